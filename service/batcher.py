"""Dynamic batching: sentences from all concurrent requests share translator runs.

A request submits its sentences and awaits their results. One worker task forms batches: it takes the
oldest waiting sentence, waits up to max_wait_ms for company, and fills the batch with the waiting
sentences (same search options) closest to it in length, up to max_batch_sentences and max_batch_tokens.
Under load, sentences queue while the translator runs, so batches fill without any wait (the default is 0).
The translator runs in a worker thread, so the event loop keeps answering /health and /metrics.

Nothing accepted is dropped silently, and nothing abandoned costs work: a request whose client hung up (its
task is cancelled) takes its sentences out of the queue, and out of a running batch at the translator's next
step. Stopping finishes what was accepted up to a deadline, then answers what is left with ShuttingDown.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from core.search import Hypothesis, SearchOptions
from service.client import QueueFull, ShuttingDown
from service.metrics import Metrics
from service.translator import Translator

log = logging.getLogger(__name__)


RELEASE_GROWTH = 1.25  # memory is given back when idle once the process is this much larger than at start


def resident_bytes() -> int:
    """The process's resident memory (Linux; 0 elsewhere, where nothing is released)."""
    try:
        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


@dataclass(eq=False)  # a job is itself, not its contents
class Job:
    ids: list[int]
    opts: SearchOptions
    future: asyncio.Future
    enqueued: float = field(default_factory=time.perf_counter)


class Batcher:
    def __init__(
        self,
        translator: Translator,
        metrics: Metrics,
        name: str,
        max_batch_sentences: int,
        max_batch_tokens: int,
        max_wait_ms: float,
        max_queue: int,
        release_after: float = 1.0,
    ):
        self.translator = translator
        self.metrics = metrics
        self.queue_depth = metrics.queue_depth.labels(name)
        self.max_sentences = max_batch_sentences
        self.max_tokens = max_batch_tokens
        self.max_wait = max_wait_ms / 1000
        self.max_queue = max_queue
        self.release_after = release_after
        self.baseline = 0
        self.pending: list[Job] = []
        self.arrived = asyncio.Event()
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="translator")
        self.closing = False
        self.running: list[Job] = []  # the batch in the translator now
        self.worker: asyncio.Task | None = None

    def start(self) -> None:
        self.worker = asyncio.create_task(self._run())

    async def stop(self, deadline: float | None = None) -> None:
        """Accept nothing new and finish what was accepted; after `deadline` seconds (None: no limit), answer what
        is left with ShuttingDown, then stop."""
        self.closing = True
        self.arrived.set()
        if self.worker:
            try:
                await asyncio.wait_for(asyncio.shield(self.worker), deadline)
            except TimeoutError:
                left = self.pending + self.running
                log.warning("shutdown deadline of %.0f s passed: %d sentences answered 503", deadline, len(left))
                for job in left:
                    if not job.future.done():
                        job.future.set_exception(ShuttingDown())
                self.pending = []
                await self.worker  # the running batch sees its sentences answered and ends at its next step
        self.executor.shutdown(wait=True)

    async def submit(self, sentences: list[list[int]], opts: SearchOptions) -> list[list[Hypothesis]]:
        """Queue the sentences of one request; returns their hypotheses in the same order."""
        if self.closing:
            raise ShuttingDown()
        if len(self.pending) + len(sentences) > self.max_queue:
            raise QueueFull()
        loop = asyncio.get_running_loop()
        jobs = [Job(ids, opts, loop.create_future()) for ids in sentences]
        self.pending.extend(jobs)
        self.queue_depth.set(len(self.pending))
        self.arrived.set()
        try:
            return await asyncio.gather(*(job.future for job in jobs))
        except asyncio.CancelledError:  # the client is gone: nobody waits for these sentences any more
            for job in jobs:
                job.future.cancel()
            self.pending = [j for j in self.pending if not j.future.done()]
            self.queue_depth.set(len(self.pending))
            raise

    async def _run(self) -> None:
        self.baseline = resident_bytes()
        while self.pending or not self.closing:
            if not self.pending:
                await self._idle()
                continue
            await self._wait_for_company()
            batch = self._take_batch()
            await self._translate(batch)

    async def _idle(self) -> None:
        """Wait for work. Idle for release_after seconds with the process grown past RELEASE_GROWTH x its size at
        start (a heavy batch's buffers stay in ONNX Runtime's arenas), give that memory back first."""
        self.arrived.clear()
        try:
            await asyncio.wait_for(self.arrived.wait(), self.release_after)
        except TimeoutError:
            if resident_bytes() > RELEASE_GROWTH * self.baseline:
                loop = asyncio.get_running_loop()
                await loop.run_in_executor(self.executor, self.translator.release_memory)
            await self.arrived.wait()

    async def _wait_for_company(self) -> None:
        """Give the oldest sentence up to max_wait for others to arrive, unless a full batch is already here."""
        deadline = self.pending[0].enqueued + self.max_wait
        while len(self.pending) < self.max_sentences and (left := deadline - time.perf_counter()) > 0:
            self.arrived.clear()
            try:
                await asyncio.wait_for(self.arrived.wait(), left)
            except TimeoutError:
                break

    def _take_batch(self) -> list[Job]:
        """The oldest job and the waiting jobs with its options nearest to it in length, within the bounds."""
        oldest = self.pending[0]
        group = sorted((j for j in self.pending if j.opts == oldest.opts), key=lambda j: len(j.ids))
        lo = hi = group.index(oldest)
        longest = len(oldest.ids)
        while hi - lo + 1 < self.max_sentences:
            left = group[lo - 1] if lo > 0 else None
            right = group[hi + 1] if hi + 1 < len(group) else None
            pick = min(
                (j for j in (left, right) if j is not None),
                key=lambda j: abs(len(j.ids) - len(oldest.ids)),
                default=None,
            )
            if pick is None or max(longest, len(pick.ids)) * (hi - lo + 2) > self.max_tokens:
                break
            longest = max(longest, len(pick.ids))
            if pick is left:
                lo -= 1
            else:
                hi += 1
        batch = group[lo : hi + 1]
        taken = {id(j) for j in batch}
        self.pending = [j for j in self.pending if id(j) not in taken]
        self.queue_depth.set(len(self.pending))
        return batch

    async def _translate(self, batch: list[Job]) -> None:
        now = time.perf_counter()
        for job in batch:
            self.metrics.queue_wait.observe(now - job.enqueued)
        self.metrics.batch_size.observe(len(batch))
        loop = asyncio.get_running_loop()
        sources = [job.ids for job in batch]

        def abandoned() -> np.ndarray:  # asked by the translator's thread at every step
            return np.array([job.future.done() for job in batch])

        self.running = batch
        self.metrics.running_rows.inc(len(batch) * batch[0].opts.beam_size)
        try:
            result = await loop.run_in_executor(
                self.executor, self.translator.translate_ids, sources, batch[0].opts, abandoned
            )
        except Exception as error:  # a fault in one batch fails its requests, never the service
            log.exception("translator run failed for a batch of %d sentences", len(batch))
            for job in batch:
                if not job.future.done():
                    job.future.set_exception(error)
            return
        finally:
            self.running = []
            self.metrics.running_rows.dec(len(batch) * batch[0].opts.beam_size)
        self.metrics.inference.labels("encode").observe(result.encode_seconds)
        self.metrics.inference.labels("decode").observe(result.decode_seconds)
        if result.steps:
            self.metrics.decoder_steps.inc(result.steps)
            self.metrics.step_time.observe(result.decode_seconds / result.steps)
        self.metrics.input_tokens.inc(sum(len(s) for s in sources))
        self.metrics.output_tokens.inc(sum(len(h[0].tokens) + 1 for h in result.hypotheses if h))
        for job, hyps in zip(batch, result.hypotheses):
            if not job.future.done():  # a request that was cancelled (client gone) no longer waits
                job.future.set_result(hyps)
