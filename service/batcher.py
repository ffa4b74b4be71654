"""Iteration-level batching: sentences from all concurrent requests share every decoder step.

A request submits its sentences and awaits their results. A thread of its own (the batcher's loop) keeps one
running batch (core.search.RunningBatch) over the translator's decoder and, before every step, lets waiting
sentences join it while the batch stays within max_batch_sentences sentences and max_batch_tokens padded source
tokens. Requests take turns: the first sentence of every waiting request joins before the second of any (then by
arrival), so a one-sentence request never waits behind the backlog of a 64-sentence one; and that first sentence
may join a full batch (NEWCOMER_SHARE), so it waits for no running sentence to end either. A sentence leaves the
batch at the step it ends and its request hears at once; its place is free for the next waiting sentence. Greedy
and beam sentences of any beam size share the batch, so a short greedy request sent while long beam requests run
is done after its own few steps, not after theirs.

When the batch is empty, the first sentence waits up to max_wait_ms for company (the default is 0). The event loop
only queues and awaits, so it keeps answering /health and /metrics while the loop decodes.

Nothing accepted is dropped silently, and nothing abandoned costs work: a request whose client hung up (its task is
cancelled) has its sentences leave the queue, or the running batch before the next step. Stopping finishes what
was accepted up to a deadline, then answers what is left with ShuttingDown.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from core.search import Hypothesis, RunningBatch, SearchOptions, Sentence
from service.client import QueueFull, ShuttingDown
from service.metrics import Metrics
from service.translator import Translator

log = logging.getLogger(__name__)

RELEASE_GROWTH = 1.25  # memory is given back when idle once the process is this much larger than at start
# Sentences join a running batch once this share of its places is free (or all that wait fit), unless a new
# request waits: each join encodes the newcomers and copies the caches once, so joining one sentence a step costs
# throughput, but a new request's first sentence should not wait.
JOIN_SHARE = 1 / 8
# The first sentence of a request none of whose sentences runs yet may join a full batch, up to this share of its
# places (and of its tokens) more: a one-sentence request then waits for no sentence of a long request to end.
NEWCOMER_SHARE = 1 / 8


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
    turn: int = 0  # its place in its request: the request's first sentence has turn 0
    enqueued: float = field(default_factory=time.perf_counter)
    joined: float = 0.0  # when it joined the running batch

    @property
    def abandoned(self) -> bool:
        """Answered already: its client hung up, or the server answered it ShuttingDown."""
        return self.future.done()


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
        self.name = name
        self.queue_depth = metrics.queue_depth.labels(name)
        self.max_sentences = max_batch_sentences
        self.max_tokens = max_batch_tokens
        self.max_wait = max_wait_ms / 1000
        self.max_queue = max_queue
        self.release_after = release_after
        self.pending: list[Job] = []  # waiting to join, oldest first; guarded by `changed`
        self.running: list[Job] = []  # in the running batch (only the loop's thread changes it)
        self.changed = threading.Condition()
        self.closing = False
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        self.loop = asyncio.get_running_loop()
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
                left = [job for job in self.pending + self.running if not job.abandoned]
            log.warning("shutdown deadline of %.0f s passed: %d sentences answered 503", deadline, len(left))
            for job in left:
                job.future.set_exception(ShuttingDown())
            with self.changed:
                self.changed.notify()
            await asyncio.to_thread(self.thread.join)  # the loop drops the answered sentences at its next step

    async def submit(self, sentences: list[list[int]], opts: SearchOptions) -> list[list[Hypothesis]]:
        """Queue the sentences of one request; returns their hypotheses in the same order."""
        loop = asyncio.get_running_loop()
        jobs = [Job(ids, opts, loop.create_future(), turn) for turn, ids in enumerate(sentences)]
        with self.changed:
            if self.closing:
                raise ShuttingDown()
            if len(self.pending) + len(sentences) > self.max_queue:
                raise QueueFull()
            self.pending.extend(jobs)
            self.queue_depth.set(len(self.pending))
            self.changed.notify()
        try:
            return await asyncio.gather(*(job.future for job in jobs))
        except asyncio.CancelledError:  # the client is gone: nobody waits for these sentences any more
            for job in jobs:
                job.future.cancel()
            with self.changed:
                self.pending = [j for j in self.pending if not j.abandoned]
                self.queue_depth.set(len(self.pending))
            raise

    # --- the loop, in its own thread -------------------------------------------------------------------------

    def _run(self) -> None:
        baseline = resident_bytes()
        batch = RunningBatch(self.translator.new_decoder(), self.translator.model_config)
        while True:
            with self.changed:
                if not self.running and not self._wait_for_work(baseline):
                    return
                joining = self._take_joining()
            try:
                if joining:
                    self._join(batch, joining)
                self._drop_abandoned(batch)
                if len(batch):
                    self._step(batch)
            except Exception as error:  # a fault fails the requests in the batch, never the service
                log.exception("translator failed with %d sentences in the batch", len(self.running) + len(joining))
                for job in self.running + joining:
                    self._answer(job, error)
                self.running = []
                batch = RunningBatch(self.translator.new_decoder(), self.translator.model_config)
            self.metrics.running_rows.set(batch.rows)

    def _wait_for_work(self, baseline: int) -> bool:
        """With the batch empty, wait for a sentence (giving memory back when idle long), then give it up to
        max_wait for company. False: closing, and nothing is left to do."""
        while not self.pending:
            if self.closing:
                return False
            if not self.changed.wait(self.release_after) and resident_bytes() > RELEASE_GROWTH * baseline:
                self.changed.release()  # submit() must not wait for it
                try:
                    self.translator.release_memory()
                finally:
                    self.changed.acquire()
        deadline = self.pending[0].enqueued + self.max_wait
        while len(self.pending) < self.max_sentences and (left := deadline - time.perf_counter()) > 0:
            self.changed.wait(left)
        return True

    def _take_joining(self) -> list[Job]:
        """The waiting sentences that fit into the running batch, requests taking turns."""
        self.pending = [j for j in self.pending if not j.abandoned]
        running = [j for j in self.running if not j.abandoned]
        longest, count = max((len(j.ids) for j in running), default=0), len(running)
        newcomer = any(j.turn == 0 for j in self.pending)  # a request none of whose sentences runs yet: at once
        wanted = 1 if newcomer else min(max(1, int(JOIN_SHARE * self.max_sentences)), len(self.pending))
        if not self.pending or self._places(newcomer) - count < wanted:
            return []
        joining = []
        for job in sorted(self.pending, key=lambda j: (j.turn, j.enqueued)):
            longest, places = max(longest, len(job.ids)), self._places(job.turn == 0)
            if count + 1 > places or (count and (count + 1) * longest > self.max_tokens * places / self.max_sentences):
                break
            count += 1
            joining.append(job)
        taken = set(joining)
        self.pending = [j for j in self.pending if j not in taken]
        self.queue_depth.set(len(self.pending))
        return joining

    def _places(self, newcomer: bool) -> int:
        """The sentences the batch may hold: max_batch_sentences, or a share more for a new request's first."""
        return self.max_sentences + (max(1, int(NEWCOMER_SHARE * self.max_sentences)) if newcomer else 0)

    def _join(self, batch: RunningBatch, joining: list[Job]) -> None:
        started = time.perf_counter()
        batch.add([j.ids for j in joining], [j.opts for j in joining], joining)
        now = time.perf_counter()
        self.metrics.inference.labels("encode").observe(now - started)
        for job in joining:
            self.metrics.queue_wait.observe(started - job.enqueued)
            job.joined = now
        self.metrics.input_tokens.inc(sum(len(j.ids) for j in joining))
        self.running += joining

    def _drop_abandoned(self, batch: RunningBatch) -> None:
        gone = {job for job in self.running if job.abandoned}
        if gone:
            batch.remove(gone)
            self.running = [j for j in self.running if j not in gone]

    def _step(self, batch: RunningBatch) -> None:
        self.metrics.batch_size.observe(len(batch))
        started = time.perf_counter()
        ended = batch.step()
        now = time.perf_counter()
        self.metrics.step_time.observe(now - started)
        self.metrics.decoder_steps.inc()
        for sentence in ended:
            self._finish(sentence, now)
        if ended:
            done = {s.key for s in ended}
            self.running = [j for j in self.running if j not in done]

    def _finish(self, sentence: Sentence, now: float) -> None:
        job: Job = sentence.key
        hyps = sentence.result()
        self.metrics.inference.labels("decode").observe(now - job.joined)
        self.metrics.output_tokens.inc(len(hyps[0].tokens) + 1 if hyps else 0)
        self._answer(job, hyps)

    def _answer(self, job: Job, result: list[Hypothesis] | Exception) -> None:
        """Settle a job's future on the event loop's thread (unless it was answered meanwhile)."""

        def settle() -> None:
            if job.future.done():
                return
            if isinstance(result, Exception):
                job.future.set_exception(result)
            else:
                job.future.set_result(result)

        self.loop.call_soon_threadsafe(settle)
