"""A document's engine calls admitted as one unit of work.

A document is translated in many engine calls (service.worker.pipeline: DOCUMENT_REQUESTS internal requests at a
time, each in calls of TRANSLATOR_MAX_SENTENCES sentences). The engine admits each call on its own (service.engine.
admission), so that a document's later calls could be refused (QueueFull) because of its own sentences waiting ahead
of them, and a document fail on an idle server. Here the first call decides: once one of a document's calls is
accepted, a later call that finds the queue full waits RETRY_S and asks again, while the document's own sentences
leave the queue as they run. A call is known to have been accepted when it is answered, or when its refusal comes
after ACCEPTED_AFTER_S (the engine refuses a call at once; later, QueueFull means its sentences waited and were
shed as unable to start in time: they are asked again). It gives up (QueueFull, 503) when no call of the document is
in the engine and none was accepted, or none was answered for TRANSLATOR_MAX_QUEUE_WAIT_S: the queue is held by
other clients' work.
"""

from __future__ import annotations

import asyncio
import time

from core.search import Hypothesis, SearchOptions
from service.protocol import EngineClient, QueueFull

RETRY_S = 0.1
ACCEPTED_AFTER_S = 1.0


class DocumentUnit:
    def __init__(self, engine: EngineClient, patience_s: float) -> None:
        self.engine, self.patience_s = engine, patience_s
        self.admitted = False  # a call of the document was accepted
        self.in_engine = 0  # calls of the document sent and not answered or refused yet
        self.progress = time.monotonic()  # when a call was last answered

    async def translate(self, pair: str, sentences: list[list[int]], opts: SearchOptions) -> list[list[Hypothesis]]:
        """The engine's translate(), refused only when the document holds nothing in the engine (see the module)."""
        while True:
            self.in_engine += 1
            sent = time.monotonic()
            try:
                hyps = await self.engine.translate(pair, sentences, opts)
            except QueueFull:
                self.in_engine -= 1
                self.admitted |= time.monotonic() - sent >= ACCEPTED_AFTER_S
                waited = time.monotonic() - self.progress
                if not self.in_engine and (not self.admitted or waited > self.patience_s):
                    raise
                await asyncio.sleep(RETRY_S)
                continue
            except BaseException:
                self.in_engine -= 1
                raise
            self.in_engine -= 1
            self.admitted, self.progress = True, time.monotonic()
            return hyps
