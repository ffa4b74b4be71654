"""Stand-ins for tests and benchmarks of everything around the model: an echo model the engine loads in place of
ONNX Runtime.

    Supervisor(settings, models=ECHO_MODELS).run()      # the service's processes, every sentence echoed at once

The echo model answers each sentence at once with its own source ids (less its </s>), so what is measured or tested
is the rest: HTTP, parsing, tokenizing, the engine round trip, the engine's lifecycle.
"""

from __future__ import annotations

from pathlib import Path

from core.folder import FolderConfig
from core.search import Hypothesis, SearchOptions
from service.engine.batcher import Submission
from service.metrics import Metrics
from service.protocol import PairInfo
from service.settings import Settings

ECHO_MODELS = "service.testing:echo_model"  # a model loader for service.engine (Supervisor's `models`)
ECHO_PROVIDER = "stand-in"


class EchoRunner:
    """A folder's runner (service.engine.engine.Runner) that echoes each sentence's source ids."""

    def start(self) -> None:
        """Nothing to start."""

    def send(self, request: Submission, sentences: list[list[int]], opts: SearchOptions, bulk: bool = False
             ) -> None:
        request.settle(echoed(sentences, opts))

    def withdraw(self, request: Submission) -> None:
        """Nothing waits: every request is answered as it is sent."""

    async def submit(self, sentences: list[list[int]], opts: SearchOptions, bulk: bool = False
                     ) -> list[list[Hypothesis]]:
        return echoed(sentences, opts)

    async def stop(self, deadline: float | None = None) -> None:
        """Nothing runs."""


def echoed(sentences: list[list[int]], opts: SearchOptions) -> list[list[Hypothesis]]:
    """Each sentence's source ids (less its </s>) as its translation."""
    return [[Hypothesis(ids[:-1], 0.0)] * opts.n_best for ids in sentences]


def echo_model(folder: Path, settings: Settings, metrics: Metrics) -> tuple[list[PairInfo], EchoRunner]:
    """A model folder's pairs, echoed: its config is read, its graphs never loaded."""
    config = FolderConfig.load(folder)
    pairs = [PairInfo(source, target, str(folder), ECHO_PROVIDER, settings.precision) for source, target in
             config.pairs]
    return pairs, EchoRunner()
