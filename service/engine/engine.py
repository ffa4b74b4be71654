"""The engine: every model folder served, each with its sessions and its batcher; ids in, hypotheses out.

    engine = Engine(settings, metrics)
    await engine.start()                                   # loads and warms up every model, starts the batchers
    await engine.translate("en-de", sentences, options)    # hypotheses of each sentence
    await engine.stop(deadline=20)                         # finish what was accepted, up to the deadline

It runs in the engine process of `python -m service` (service.engine.server serves it to the HTTP workers), or
inside the one process that serves everything (TRANSLATOR_HTTP_WORKERS=0). Either way it is an EngineClient
(service.protocol), and a translation not answered within TRANSLATOR_ENGINE_TIMEOUT_S is dropped and answered
EngineStalled (503). In the process that serves everything it is never STALLED: it cannot stop apart from its
HTTP server, which would stop answering too. A model loader (load_model: a folder's pairs and what translates them)
may stand in for ONNX Runtime (service.testing's echo model, for tests and benchmarks of everything around it).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Protocol

from core.search import Hypothesis, SearchOptions
from service.engine.admission import Admission
from service.engine.batcher import Answer, Batcher, Submission
from service.engine.config import BatchLimits, EngineConfig, ModelOptions
from service.engine.memory import resident_bytes
from service.engine.runner import ModelRunner
from service.metrics import Metrics
from service.models import served_folders
from service.protocol import EngineStalled, PairInfo, Phase, ShuttingDown
from service.settings import Settings

log = logging.getLogger(__name__)
MEMORY_REPORT_S = 5.0  # how often the engine reports its resident memory (translator_resident_memory_bytes)


class Runner(Protocol):
    """What translates a model folder's sentences: its batcher, or a stand-in."""

    def start(self) -> None: ...

    def send(self, request: Submission, sentences: list[list[int]], opts: SearchOptions, bulk: bool = False
             ) -> None: ...

    def withdraw(self, request: Submission) -> None: ...

    async def submit(self, sentences: list[list[int]], opts: SearchOptions, bulk: bool = False
                     ) -> list[list[Hypothesis]]: ...

    async def stop(self, deadline: float | None = None) -> None: ...


ModelLoader = Callable[[Path, Settings, Metrics], tuple[list[PairInfo], Runner]]


def warm_up(model: ModelRunner) -> None:
    """Run every graph once greedy and once with beams, so that no request pays for a first run."""
    ids = [*range(4, min(model.model_config.vocab_size, 10)), model.model_config.eos_id]
    for beam_size in (1, 2):
        model.translate_ids([ids], SearchOptions(beam_size=beam_size))


def engine_config(s: Settings) -> EngineConfig:
    """The engine's options and limits, as the settings say."""
    model = ModelOptions(
        precision=s.precision, provider=s.provider, threads=s.threads, optimization=s.optimization,
        spin_threads=s.spin_threads, kernels=s.kernels, cuda_graphs=s.cuda_graphs,
        cuda_graphs_memory_mb=s.cuda_graphs_memory_mb, cuda_graphs_max_rows=s.cuda_graphs_max_rows,
    )
    admission = Admission(
        max_sentences=s.max_batch_sentences, max_tokens=s.max_batch_tokens, max_queue=s.max_queue,
        max_queue_work=s.max_queue_work, max_queue_wait=s.max_queue_wait_s,
    )
    return EngineConfig(model, BatchLimits(admission, s.max_wait_ms, s.release_memory_after_s))


def load_model(folder: Path, settings: Settings, metrics: Metrics) -> tuple[list[PairInfo], Runner]:
    """A model folder's sessions, warm, behind a batcher; the pairs it serves."""
    config = engine_config(settings)
    model = ModelRunner(folder, config.model)
    warm_up(model)
    log.info("model %s (%s) ready on %s (%s%s)", model.name, folder, model.provider, config.model.precision,
             ", our kernels" if model.sessions.kernels else "")
    metrics.model_info.labels(model.name, model.provider, config.model.precision).set(1)
    batcher = Batcher(model, metrics, model.name, config.batch)
    pairs = [PairInfo(source, target, str(folder), model.provider, config.model.precision) for source, target in
             model.config.pairs]
    return pairs, batcher


class Engine:
    def __init__(self, settings: Settings, metrics: Metrics, loader: ModelLoader = load_model):
        self.settings = settings
        self.metrics = metrics
        self.loader = loader
        self.phase = Phase.LOADING
        self.pairs: list[PairInfo] = []
        self.runners: list[Runner] = []  # one per model folder
        self.routes: dict[str, Runner] = {}  # pair name -> its folder's runner
        self.memory_report: asyncio.Task | None = None

    async def prepare(self) -> None:
        """Nothing: in this process the models load in start(), while /health answers."""

    async def start(self) -> None:
        """Load every model folder (service.models: named ones pulled first; in a thread: the event loop keeps
        answering), then start one runner per folder: the pairs of a multi-target model share its batcher, their
        sentences its running batch."""
        for folder in await asyncio.to_thread(served_folders, self.settings):
            pairs, runner = await asyncio.to_thread(self.loader, folder, self.settings, self.metrics)
            pairs = [pair for pair in pairs if pair.name not in self.routes]  # the first folder serves a pair
            self.routes |= {pair.name: runner for pair in pairs}
            self.pairs += pairs
            self.runners.append(runner)
        for runner in self.runners:
            runner.start()
        self.memory_report = asyncio.create_task(self.report_memory())
        self.phase = Phase.READY

    async def report_memory(self) -> None:
        """This process's resident memory, in the metrics every MEMORY_REPORT_S while the engine serves."""
        while True:
            self.metrics.resident_memory.labels("engine").set(resident_bytes())
            await asyncio.sleep(MEMORY_REPORT_S)

    def pair(self, name: str) -> PairInfo:
        return next(pair for pair in self.pairs if pair.name == name)

    async def translate(self, pair: str, sentences: list[list[int]], opts: SearchOptions, bulk: bool = False
                        ) -> list[list[Hypothesis]]:
        if self.phase is not Phase.READY:
            raise ShuttingDown()
        try:
            async with asyncio.timeout(self.settings.engine_timeout_s):  # no task of its own, unlike wait_for
                hyps = await self.routes[pair].submit(sentences, opts, bulk)
        except TimeoutError:  # the submission was cancelled: its sentences left the queue and the batch
            raise EngineStalled(f"no answer within {self.settings.engine_timeout_s:g} s") from None
        self._count(pair, sentences, hyps)
        return hyps

    def send(self, pair: str, sentences: list[list[int]], opts: SearchOptions, bulk: bool,
             answer: Callable[[Answer], None]) -> Submission:
        """translate() for a caller that takes the answer in whichever thread it comes (the batcher's): `answer`
        gets the hypotheses or the error, once, unless the returned submission is withdrawn first (withdraw()). No
        deadline here: the caller holds its own (an HTTP worker sends Cancel). Raises what the admission refuses."""
        if self.phase is not Phase.READY:
            raise ShuttingDown()

        def counted(result: Answer) -> None:
            answer(result)  # before the counting: nobody waits for it
            if not isinstance(result, Exception):
                self._count(pair, sentences, result)

        request = Submission(len(sentences), counted)
        self.routes[pair].send(request, sentences, opts, bulk)
        return request

    def withdraw(self, pair: str, request: Submission) -> None:
        """Nobody waits for a sent request: no answer, and its sentences leave the engine."""
        self.routes[pair].withdraw(request)

    def _count(self, pair: str, sentences: list[list[int]], hyps: list[list[Hypothesis]]) -> None:
        self.metrics.input_tokens.labels(pair).inc(sum(len(ids) for ids in sentences))
        self.metrics.output_tokens.labels(pair).inc(sum(len(h[0].tokens) + 1 for h in hyps if h))  # with </s>

    def stop(self, deadline: float | None = None) -> Awaitable[None]:
        """DRAINING from this call on; the awaitable stops every runner: accepted work finishes up to `deadline`
        seconds, what is left is answered ShuttingDown (503)."""
        self.phase = Phase.DRAINING
        if self.memory_report:
            self.memory_report.cancel()
        return asyncio.gather(*(runner.stop(deadline) for runner in self.runners))
