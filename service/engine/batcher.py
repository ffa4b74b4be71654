"""Iteration-level batching: sentences from all concurrent requests share every decoder step.

A request sends its sentences with whoever takes their answer (a Submission: the engine's server answers its
worker from the batcher's thread, so that an answer wakes no other thread), or submits them and awaits their results
on an event loop (submit()); the admission policy (service.engine.admission) refuses it at once (QueueFull, 503)
when the work waiting could not start in time. A thread of its own (the batcher's loop) keeps one running batch
(core.search.RunningBatch) over the model's decoder and, before every step, answers 503 to the requests whose
sentences cannot join within max_queue_wait_s and lets waiting sentences join the batch as the policy says (requests
take turns, within the batch's bounds). A sentence leaves the batch at the step it ends; its request hears at once
when its last sentence ends, and its place is free for the next waiting sentence. Greedy and beam sentences of any
beam size share the batch, so a short greedy request sent while long beam requests run is done after its own few
steps, not after theirs. The loop also measures the rate at which the batch gets through work while work waits
(admission.Throughput): the policy's estimate of when waiting work can start.

When the batch is empty, the first sentence waits up to max_wait_ms for company (the default is 0). The event loop
only queues and awaits, so it keeps answering /health and /metrics while the loop decodes.

Nothing accepted is dropped silently, and nothing abandoned costs work: a request whose client hung up (its
submission is cancelled) has its sentences leave the queue, or the running batch before the next step; so does a
request one of whose sentences was answered 503. Stopping finishes what was accepted up to a deadline (the drain's,
in place of max_queue_wait_s), then answers what is left with ShuttingDown. Once idle, the memory that a heavy batch
took is given back (service.engine.memory).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from core.folder import ModelConfig
from core.search import Decoder, Hypothesis, RunningBatch, SearchOptions
from service.engine.admission import Throughput
from service.engine.config import BatchLimits
from service.engine.memory import MemoryWatch
from service.metrics import Metrics
from service.protocol import QueueFull, ShuttingDown

log = logging.getLogger(__name__)

METRICS_S = 1.0  # how often the loop writes what it measured into the metrics while a batch runs


class CountedDecoder(Decoder, Protocol):
    """A decoder that says the memory its caches hold."""

    @property
    def cache_bytes(self) -> int: ...


class DecodingModel(Protocol):
    """What the batcher needs of a model: service.engine.runner.ModelRunner, or a test's stand-in."""

    model_config: ModelConfig

    def new_decoder(self) -> CountedDecoder: ...

    def release_memory(self) -> None: ...


Answer = list[list[Hypothesis]] | Exception  # a request's hypotheses, a list a sentence; or why it has none


class Submission:
    """A request's sentences in the batcher: answered once, `answer(hypotheses or error)` in whichever thread settles
    it (the batcher's, or the one that stops it); never once cancelled (nobody waits for it)."""

    def __init__(self, count: int, answer: Callable[[Answer], None]):
        self.hypotheses: list[list[Hypothesis]] = [[] for _ in range(count)]
        self.left = count  # sentences not ended yet (only the batcher's thread ends them)
        self.answer = answer
        self.lock = threading.Lock()
        self.done = False  # answered or cancelled

    def ended(self, turn: int, hypotheses: list[Hypothesis]) -> None:
        """A sentence ended: the request is answered with its last."""
        self.hypotheses[turn] = hypotheses
        self.left -= 1
        if not self.left:
            self.settle(self.hypotheses)

    def settle(self, answer: Answer) -> None:
        """Answer the request, unless it was answered or cancelled already."""
        with self.lock:
            if self.done:
                return
            self.done = True
        self.answer(answer)

    def cancel(self) -> None:
        """Nobody waits: no answer; its sentences leave the queue and the running batch."""
        with self.lock:
            self.done = True


def settle_future(future: asyncio.Future, answer: Answer) -> None:
    """An answer into an event loop's future (on its thread), unless it was cancelled meanwhile."""
    if future.done():
        return
    if isinstance(answer, Exception):
        future.set_exception(answer)
    else:
        future.set_result(answer)


@dataclass
class Measured:
    """What the batcher's steps measured since the loop last wrote it into the metrics: written when the batch
    empties, and every METRICS_S while it runs, so that no step waits for it."""

    batch_sizes: list[int] = field(default_factory=list)  # sentences in the batch, a step
    step_seconds: list[float] = field(default_factory=list)
    decode_seconds: list[float] = field(default_factory=list)  # a sentence's, from its join to its end

    def write(self, metrics: Metrics) -> None:
        """Into the metrics, and forgotten."""
        for size in self.batch_sizes:
            metrics.batch_size.observe(size)
        for seconds in self.step_seconds:
            metrics.step_time.observe(seconds)
        if self.step_seconds:
            metrics.decoder_steps.inc(len(self.step_seconds))
        for seconds in self.decode_seconds:
            metrics.inference.labels("decode").observe(seconds)
        for values in vars(self).values():
            values.clear()


@dataclass(eq=False)  # a job is itself, not its contents
class Job:
    ids: list[int]
    opts: SearchOptions
    request: Submission
    turn: int = 0  # its place in its request: the request's first sentence has turn 0
    enqueued: float = field(default_factory=time.perf_counter)
    work: int = 0  # decoder row-steps it may take: beam size x its longest translation
    bulk: bool = False  # a document's: after interactive work, never shed as overdue (service.engine.admission)
    joined: float = 0.0  # when it joined the running batch
    first_step: int = 0  # the batcher's step count when it joined

    @property
    def abandoned(self) -> bool:
        """Its request is answered already (a sentence of it failed or was answered 503), or cancelled."""
        return self.request.done


class Batcher:
    def __init__(self, model: DecodingModel, metrics: Metrics, name: str, limits: BatchLimits):
        self.model = model
        self.metrics = metrics
        self.name = name
        self.queue_depth = metrics.queue_depth.labels(name)
        self.admission = limits.admission
        self.throughput = Throughput()  # guarded by `changed`
        self.steps = 0  # decoder steps taken (only the loop's thread counts them)
        self.max_wait = limits.max_wait_ms / 1000
        self.release_after = limits.release_memory_after_s
        self.pending: list[Job] = []  # waiting to join, oldest first; guarded by `changed`
        self.running: list[Job] = []  # in the running batch (only the loop's thread changes it)
        self.changed = threading.Condition()
        self.closing = False
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name=f"batcher-{self.name}", daemon=True)
        self.thread.start()

    async def stop(self, deadline: float | None = None) -> None:
        """Accept nothing new and finish what was accepted; after `deadline` seconds (None: no limit), answer what
        is left with ShuttingDown, then stop."""
        with self.changed:
            self.closing = True
            self.changed.notify()
        if not self.thread:
            return
        await asyncio.to_thread(self.thread.join, deadline)
        if self.thread.is_alive():
            with self.changed:
                left = {job.request for job in self.pending + self.running if not job.abandoned}
            log.warning("shutdown deadline of %.0f s passed: %d requests answered 503", deadline, len(left))
            for request in left:
                request.settle(ShuttingDown())
            with self.changed:
                self.changed.notify()
            await asyncio.to_thread(self.thread.join)  # the loop drops the answered sentences at its next step

    def send(self, request: Submission, sentences: list[list[int]], opts: SearchOptions, bulk: bool = False
             ) -> None:
        """Queue the sentences of one request (bulk: a document's), answered through `request`; from any thread.
        Raises QueueFull or ShuttingDown when they are refused."""
        now, cfg = time.perf_counter(), self.model.model_config
        jobs = [Job(ids, opts, request, turn, now, opts.beam_size * opts.longest(len(ids), cfg), bulk=bulk)
                for turn, ids in enumerate(sentences)]
        with self.changed:
            if self.closing:
                raise ShuttingDown()
            if not self.admission.accepts(self.pending, jobs, self.throughput.rate):
                raise QueueFull()
            self.pending.extend(jobs)
            self.queue_depth.set(len(self.pending))
            self.changed.notify()

    def withdraw(self, request: Submission) -> None:
        """Cancel a request: its sentences leave the queue now, and the running batch before the next step."""
        request.cancel()
        with self.changed:
            self.pending = [j for j in self.pending if not j.abandoned]
            self.queue_depth.set(len(self.pending))

    async def submit(self, sentences: list[list[int]], opts: SearchOptions, bulk: bool = False
                     ) -> list[list[Hypothesis]]:
        """send() on an event loop: returns the sentences' hypotheses in the same order; cancelling withdraws them."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        request = Submission(len(sentences), lambda answer: loop.call_soon_threadsafe(settle_future, future, answer))
        self.send(request, sentences, opts, bulk)
        try:
            return await future
        except (asyncio.CancelledError, Exception):  # the client is gone, or a sentence was answered 503 or failed:
            self.withdraw(request)  # nobody waits for the others
            raise

    # --- the loop, in its own thread -------------------------------------------------------------------------

    def _run(self) -> None:
        memory = MemoryWatch()
        batch = RunningBatch(self.model.new_decoder(), self.model.model_config)
        measured, written = Measured(), -METRICS_S  # what the loop measured, and when it was last written
        while True:
            with self.changed:
                if not self.running and not self._wait_for_work(memory):
                    return
                self._expire()
                joining = self._take_joining()
                backlog = bool(self.pending)  # work waits beyond what joins: the batch runs as full as it may
            started, rows, ended = time.perf_counter(), 0, []
            try:
                if joining:
                    self._join(batch, joining)
                self._drop_abandoned(batch)
                if len(batch):
                    rows, ended = batch.rows, self._step(batch, measured)
            except Exception as error:  # a fault fails the requests in the batch, never the service
                log.exception("translator failed with %d sentences in the batch", len(self.running) + len(joining))
                for job in self.running + joining:
                    self._answer(job, error)
                self.running = []
                batch = RunningBatch(self.model.new_decoder(), self.model.model_config)
            self._observe_join(joining, started)  # after the step's answers: nobody waits for it
            self._measure(rows if backlog else 0, time.perf_counter() - started, ended)
            if not len(batch) or started - written >= METRICS_S:
                measured.write(self.metrics)
                self.metrics.running_rows.set(batch.rows)
                self.metrics.cache_bytes.labels(self.name).set(batch.decoder.cache_bytes)  # it walks every cache
                written = started

    def _measure(self, rows: int, seconds: float, ended: list[Job]) -> None:
        """What the admission's rate reads: a step of `rows` rows taken with a backlog (0: none), and the row-steps
        that the sentences which ended took against the work they were counted as."""
        if not rows and not ended:
            return
        with self.changed:
            if rows:
                self.throughput.decoded(rows, seconds)
            if ended:
                used = sum(job.opts.beam_size * (self.steps - job.first_step) for job in ended)
                self.throughput.ended(used, sum(job.work for job in ended))

    def _wait_for_work(self, memory: MemoryWatch) -> bool:
        """With the batch empty, wait for a sentence (giving memory back when idle long), then give it up to
        max_wait for company. False: closing, and nothing is left to do."""
        while not self.pending:
            if self.closing:
                return False
            if not self.changed.wait(self.release_after) and memory.grown():
                self.changed.release()  # submit() must not wait for it
                try:
                    self.model.release_memory()
                finally:
                    self.changed.acquire()
        deadline = self.pending[0].enqueued + self.max_wait
        while len(self.pending) < self.admission.max_sentences and (left := deadline - time.perf_counter()) > 0:
            self.changed.wait(left)
        return True

    def _expire(self) -> None:
        """Answer 503 (QueueFull) to the requests whose sentences cannot join within max_queue_wait_s, unstarted;
        their other sentences then leave too (submit). Not in a drain: the drain's deadline holds then."""
        if self.closing or not self.pending:
            return
        rate = self.throughput.rate
        if not (overdue := self.admission.overdue(self.pending, time.perf_counter(), rate)):
            return
        log.warning("%d waiting sentences cannot join the batch within %.0f s (at %s row-steps a second): their "
                    "requests are answered 503", len(overdue), self.admission.max_queue_wait,
                    "an unknown number of" if rate is None else f"{rate:,.0f}")
        for job in overdue:
            self._answer(job, QueueFull("cannot start within the queue's deadline"))
        gone = set(overdue)
        self.pending = [j for j in self.pending if j not in gone]
        self.queue_depth.set(len(self.pending))

    def _take_joining(self) -> list[Job]:
        """The waiting sentences that fit into the running batch, requests taking turns."""
        if not self.pending:  # most steps: nobody waits
            return []
        self.pending = [j for j in self.pending if not j.abandoned]
        running = [j for j in self.running if not j.abandoned]
        joining = self.admission.joining(self.pending, [len(j.ids) for j in running], time.perf_counter(),
                                         bulk_running=sum(j.bulk for j in running))
        if joining:
            taken = set(joining)
            self.pending = [j for j in self.pending if j not in taken]
            self.queue_depth.set(len(self.pending))
        return joining

    def _join(self, batch: RunningBatch, joining: list[Job]) -> None:
        batch.add([j.ids for j in joining], [j.opts for j in joining], joining)
        now = time.perf_counter()
        for job in joining:
            job.joined, job.first_step = now, self.steps
        self.running += joining

    def _observe_join(self, joining: list[Job], started: float) -> None:
        """The metrics of the sentences that joined at a step begun at `started` (none if the join failed): their
        encoding's time, and each one's wait in the queue (what the tests and probes count as taken in)."""
        if not joining or not joining[0].joined:
            return
        self.metrics.inference.labels("encode").observe(joining[0].joined - started)
        for job in joining:
            self.metrics.queue_wait.observe(started - job.enqueued)

    def _drop_abandoned(self, batch: RunningBatch) -> None:
        gone = {job for job in self.running if job.abandoned}
        if gone:
            batch.remove(gone)
            self.running = [j for j in self.running if j not in gone]

    def _step(self, batch: RunningBatch, measured: Measured) -> list[Job]:
        """One decoder step; the sentences that ended at it, answered."""
        measured.batch_sizes.append(len(batch))
        started = time.perf_counter()
        ended = batch.step()
        self.steps += 1
        now = time.perf_counter()
        measured.step_seconds.append(now - started)
        for sentence in ended:
            job: Job = sentence.key
            self._answer(job, sentence.result())
            measured.decode_seconds.append(now - job.joined)
        if ended:
            done = {s.key for s in ended}
            self.running = [j for j in self.running if j not in done]
        return [s.key for s in ended]

    def _answer(self, job: Job, result: list[Hypothesis] | Exception) -> None:
        """A sentence's hypotheses, or its request's error (the whole request is answered with it)."""
        if isinstance(result, Exception):
            job.request.settle(result)
        elif not job.abandoned:
            job.request.ended(job.turn, result)
