"""Which of a model folder's sessions (service.engine.sessions.ModelSessions) may let their idle threads spin: the
decoder's alone, and only with spin_threads. Every session has threads of its own; the encoder's and the cache
graphs', spinning after their runs, took the cores from the decoder's."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.engine.config import ModelOptions
from service.engine.sessions import ModelSessions

SPINNING = "session.intra_op.allow_spinning"


def spins(model: ModelSessions) -> dict[str, bool]:
    sessions = {"encoder": model.encoder, "decoder": model.decoder, "select": model.select, "join": model.join,
                "fit": model.fit}
    return {name: s.get_session_options().get_session_config_entry(SPINNING) == "1" for name, s in sessions.items()}


@pytest.mark.parametrize("spin_threads", [True, False])
def test_only_the_decoders_threads_spin_and_only_when_asked(tiny_model_dir: Path, spin_threads: bool):
    model = ModelSessions(tiny_model_dir, ModelOptions(provider="cpu", threads=2, spin_threads=spin_threads))
    assert spins(model) == {"encoder": False, "decoder": spin_threads, "select": False, "join": False, "fit": False}


def test_the_decoders_threads_spin_by_default(tiny_model_dir: Path):
    assert spins(ModelSessions(tiny_model_dir, ModelOptions(provider="cpu", threads=2)))["decoder"]
