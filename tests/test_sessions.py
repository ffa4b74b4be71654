"""How a model folder's sessions (service.engine.sessions.ModelSessions) let their idle threads spin: the decoder's
as spin_threads says (`step`: spinning stops as a run returns), the others within their runs alone where the
decoder's spin at all. Every session has threads of its own; the encoder's and the cache graphs', spinning after
their runs, took the cores from the decoder's."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.engine.config import ModelOptions
from service.engine.sessions import ModelSessions
from service.settings import Settings

SPINNING, STOPPING = "session.intra_op.allow_spinning", "session.force_spinning_stop"


def spins(model: ModelSessions) -> dict[str, str]:
    """Each session's spin mode, as its options say."""
    sessions = {"encoder": model.encoder, "decoder": model.decoder, "select": model.select, "join": model.join,
                "fit": model.fit}
    modes = {}
    for name, session in sessions.items():
        entries = session.get_session_options()
        spinning, stopping = (entries.get_session_config_entry(k) == "1" for k in (SPINNING, STOPPING))
        modes[name] = "never" if not spinning else "step" if stopping else "always"
    return modes


@pytest.mark.parametrize("spin_threads", ["never", "step", "always"])
def test_the_decoders_threads_spin_as_asked_and_the_others_within_their_runs(tiny_model_dir: Path, spin_threads: str):
    model = ModelSessions(tiny_model_dir, ModelOptions(provider="cpu", threads=2, spin_threads=spin_threads))
    other = "never" if spin_threads == "never" else "step"
    assert spins(model) == {"encoder": other, "decoder": spin_threads, "select": other, "join": other, "fit": other}


def test_the_decoders_threads_spin_by_default(tiny_model_dir: Path):
    assert spins(ModelSessions(tiny_model_dir, ModelOptions(provider="cpu", threads=2)))["decoder"] == "always"


@pytest.mark.parametrize(("value", "mode"), [("true", "always"), ("false", "never"), ("yes", "always"),
                                             ("off", "never"), ("step", "step")])
def test_the_setting_takes_the_modes_and_the_old_booleans(monkeypatch: pytest.MonkeyPatch, value: str, mode: str):
    monkeypatch.setenv("TRANSLATOR_SPIN_THREADS", value)
    assert Settings().spin_threads == mode


def test_the_service_spins_within_a_step_by_default():
    assert Settings().spin_threads == "step"
