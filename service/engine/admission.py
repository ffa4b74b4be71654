"""Which waiting sentences join the running batch before the next step, and whether a request fits the queue.

A pure policy, with no thread, clock or future in it (the batcher, service.engine.batcher, applies it):

- Requests take turns: the first sentence of every waiting request joins before the second of any (then by
  arrival), so a one-sentence request never waits behind the backlog of a 64-sentence one.
- The batch holds at most max_sentences sentences and max_tokens padded source tokens (sentences x longest source);
  the first sentence of a request none of whose sentences runs yet may take NEWCOMER_SHARE more places, so it waits
  for no running sentence to end.
- Otherwise sentences join once JOIN_SHARE of the places are free (or all that wait fit): each join encodes the
  newcomers and copies the caches once, so joining one sentence a step would cost throughput.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

JOIN_SHARE = 1 / 8
NEWCOMER_SHARE = 1 / 8


class Waiting(Protocol):
    """A sentence that waits to join: its source ids, its place in its request (0: the first), when it came."""

    ids: list[int]
    turn: int
    enqueued: float


W = TypeVar("W", bound=Waiting)


@dataclass(frozen=True)
class Admission:
    max_sentences: int  # sentences in the running batch
    max_tokens: int  # padded source tokens in the running batch
    max_queue: int  # sentences waiting

    def accepts(self, waiting: int, arriving: int) -> bool:
        """Whether `arriving` more sentences fit a queue where `waiting` wait already."""
        return waiting + arriving <= self.max_queue

    def places(self, newcomer: bool) -> int:
        """The sentences the batch may hold: max_sentences, or a share more for a new request's first sentence."""
        return self.max_sentences + (max(1, int(NEWCOMER_SHARE * self.max_sentences)) if newcomer else 0)

    def joining(self, pending: Sequence[W], running: Sequence[int]) -> list[W]:
        """The pending sentences that join a batch whose sentences have the source lengths `running`."""
        longest, count = max(running, default=0), len(running)
        newcomer = any(w.turn == 0 for w in pending)  # a request none of whose sentences runs yet: at once
        wanted = 1 if newcomer else min(max(1, int(JOIN_SHARE * self.max_sentences)), len(pending))
        if not pending or self.places(newcomer) - count < wanted:
            return []
        joining = []
        for waiting in sorted(pending, key=lambda w: (w.turn, w.enqueued)):
            longest, places = max(longest, len(waiting.ids)), self.places(waiting.turn == 0)
            if count + 1 > places or (count and (count + 1) * longest > self.max_tokens * places / self.max_sentences):
                break
            count += 1
            joining.append(waiting)
        return joining
