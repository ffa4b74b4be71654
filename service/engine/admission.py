"""Whether a request's sentences may queue, which waiting sentences join the running batch before the next step, and
which requests cannot start in time.

A pure policy, with no thread, clock or future in it (the batcher, service.engine.batcher, applies it). Work is
counted in decoder row-steps: a sentence's is its beam size x its longest translation (SearchOptions.longest), what
it may cost the decoder, as TRANSLATOR_MAX_REQUEST_WORK counts it.

- A request queues only if the queue then holds at most max_queue sentences and max_queue_work row-steps, and, once
  the batcher's recent rate is known (Throughput), only if all that work can start within ADMIT_SHARE of
  max_queue_wait at that rate: otherwise it is refused at once (503), not after waiting. Into an empty queue a
  request always goes, sentence bound permitting, so an idle engine refuses nothing that the request limits allow.
- A request whose sentence has waited max_queue_wait without joining is answered 503, unstarted; so is one that, at
  the rate of the moment, cannot start by then, older requests going first (overdue()): when the engine slows down
  (the machine is shared, the work heavier than its rate was measured on), the youngest requests get their 503 as
  soon as that is known, rather than every request's work running until the deadline.
- Requests take turns: the first sentence of every waiting request joins before the second of any (then by
  arrival), so a one-sentence request never waits behind the backlog of a 64-sentence one. Sentences that have
  waited LATE_SHARE of max_queue_wait are late: they join first, oldest first, so that the work accepted first is
  answered first rather than every request's last sentences running out of time together.
- The batch holds at most max_sentences sentences and max_tokens padded source tokens (sentences x longest source);
  the first sentence of a request none of whose sentences runs yet may take NEWCOMER_SHARE more places, so it waits
  for no running sentence to end.
- Otherwise sentences join once JOIN_SHARE of the places are free (or all that wait fit): each join encodes the
  newcomers and copies the caches once, so joining one sentence a step would cost throughput.
- Bulk work (a document's sentences) comes after interactive work: it queues within max_queue sentences of bulk
  work alone, is never shed as overdue (its client's going is what ends it), so that a document's later requests are
  never refused because of its own earlier ones, and joins after every waiting interactive sentence. While
  interactive sentences run or wait, bulk sentences hold at most BULK_SHARE of the batch's places, so that an
  interactive sentence's steps stay short; otherwise bulk work may fill the batch. At most BULK_SHARE of the places
  are taken by bulk sentences at one join, so that the loop never encodes a whole batch of a document's sentences
  at once: an interactive request that comes meanwhile waits for one short join, not for a long one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

JOIN_SHARE = 1 / 8
NEWCOMER_SHARE = 1 / 8
LATE_SHARE = 1 / 2
BULK_SHARE = 1 / 4
ADMIT_SHARE = 3 / 4  # the rate may fall by a quarter before admitted work is shed
RATE_HORIZON_S = 10.0  # Throughput weighs recent decoding: a step this many seconds of decoding ago counts e times less
RATE_KNOWN_S = 3.0  # and knows a rate once it has this many (weighted) seconds to go on


class Waiting(Protocol):
    """A sentence that waits to join: its source ids, its place in its request (0: the first), when its request came
    (the same instant for all its sentences: what tells the policy a request's sentences), its work (row-steps), and
    whether it is bulk work."""

    ids: list[int]
    turn: int
    enqueued: float
    work: int
    bulk: bool


W = TypeVar("W", bound=Waiting)


@dataclass
class Throughput:
    """The work the running batch gets through while work waits, per second, in the policy's units: the decoder rows
    stepped per second over about the last RATE_HORIZON_S seconds, times the work a sentence is counted as per
    row-step it really takes (a translation mostly ends well before its longest). Only steps taken with a backlog
    count: an engine with little to do runs small batches, which says nothing of what it can do."""

    row_steps: float = 0.0  # rows stepped (decayed)
    seconds: float = 0.0  # the time those steps took (decayed)
    used: int = 0  # row-steps the sentences that ended took
    counted: int = 0  # the work they were counted as

    def decoded(self, rows: int, seconds: float) -> None:
        """One more step with a backlog: `rows` rows in `seconds`."""
        keep = math.exp(-seconds / RATE_HORIZON_S)
        self.row_steps = self.row_steps * keep + rows
        self.seconds = self.seconds * keep + seconds

    def ended(self, used: int, counted: int) -> None:
        """Sentences ended that took `used` row-steps and were counted as `counted`."""
        self.used += used
        self.counted += counted

    @property
    def rate(self) -> float | None:
        """Work a second; None until RATE_KNOWN_S seconds of steps with a backlog (until a sentence ends, a row-step
        counts as one)."""
        if self.seconds < RATE_KNOWN_S:
            return None
        return self.row_steps / self.seconds * (self.counted / self.used if self.used else 1.0)


@dataclass(frozen=True)
class Admission:
    max_sentences: int  # sentences in the running batch
    max_tokens: int  # padded source tokens in the running batch
    max_queue: int  # sentences waiting
    max_queue_work: float = math.inf  # row-steps waiting
    max_queue_wait: float = math.inf  # seconds a sentence may wait to join

    def accepts(self, waiting: Sequence[Waiting], arriving: Sequence[Waiting], rate: float | None) -> bool:
        """Whether one request's `arriving` sentences may queue behind `waiting`, the batcher getting through `rate`
        work a second (None: not known yet). Bulk and interactive work are counted apart: neither is refused for the
        other's."""
        bulk = bool(arriving) and arriving[0].bulk
        waiting = [w for w in waiting if w.bulk == bulk]
        if len(waiting) + len(arriving) > self.max_queue:
            return False
        if bulk or not waiting:
            return True
        work = sum(w.work for w in waiting) + sum(w.work for w in arriving)
        return work <= self.max_queue_work and (rate is None or work / rate <= ADMIT_SHARE * self.max_queue_wait)

    def overdue(self, pending: Sequence[W], now: float, rate: float | None) -> list[W]:
        """The pending sentences of the requests that cannot start in time, to be answered 503 before they start:
        those that waited longer than max_queue_wait, and, at a known `rate`, those whose work cannot all start
        before that deadline, older requests' work going first (as late sentences do). Bulk work is never overdue."""
        requests: dict[float, list[W]] = {}
        for w in pending:
            if not w.bulk:
                requests.setdefault(w.enqueued, []).append(w)
        overdue, ahead = [], 0.0
        for arrived in sorted(requests):
            work, left = sum(w.work for w in requests[arrived]), arrived + self.max_queue_wait - now
            if left < 0 or (rate is not None and ahead + work > rate * left):
                overdue += requests[arrived]
            else:
                ahead += work
        return overdue

    def places(self, newcomer: bool) -> int:
        """The sentences the batch may hold: max_sentences, or a share more for a new request's first sentence."""
        return self.max_sentences + (max(1, int(NEWCOMER_SHARE * self.max_sentences)) if newcomer else 0)

    def joining(self, pending: Sequence[W], running: Sequence[int], now: float, bulk_running: int = 0) -> list[W]:
        """The pending sentences that join a batch whose sentences have the source lengths `running`, `bulk_running`
        of them bulk work, at `now`."""
        longest, count = max(running, default=0), len(running)
        late_after = LATE_SHARE * self.max_queue_wait
        interactive = len(running) > bulk_running or any(not w.bulk for w in pending)
        bulk_share = max(1, int(BULK_SHARE * self.max_sentences))  # the bulk sentences that may join at once
        bulk_places = bulk_share if interactive else self.places(True)
        bulk_joining = 0

        def order(w: W) -> tuple:
            late = now - w.enqueued > late_after
            return (w.bulk, *((0, w.enqueued, w.turn) if late else (1, w.turn, w.enqueued)))

        newcomer = any(w.turn == 0 for w in pending)  # a request none of whose sentences runs yet: at once
        wanted = 1 if newcomer else min(max(1, int(JOIN_SHARE * self.max_sentences)), len(pending))
        if not pending or self.places(newcomer) - count < wanted:
            return []
        joining = []
        for waiting in sorted(pending, key=order):
            if waiting.bulk and (bulk_running + 1 > bulk_places or bulk_joining == bulk_share):
                break  # bulk work comes last: none of it joins after this one
            if count + 1 > self.places(waiting.turn == 0):
                if count + 1 > self.places(True):
                    break
                continue  # the batch is full but for newcomers' places: a later newcomer may still take one
            longest, places = max(longest, len(waiting.ids)), self.places(waiting.turn == 0)
            if count and (count + 1) * longest > self.max_tokens * places / self.max_sentences:
                break
            count += 1
            bulk_running += waiting.bulk
            bulk_joining += waiting.bulk
            joining.append(waiting)
        return joining
