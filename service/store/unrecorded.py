"""Keys' usage that requests were admitted with but the store has not yet recorded: kept by the batches' thread
(service.store.batches) and written after their answers, off the requests' path, in one transaction, once no
request waits; kept for the next try while the store fails it, so that no count is lost."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, date, datetime
from typing import Generic, TypeVar

from sqlalchemy import Connection

from service.store.keys import record_use

Item = TypeVar("Item")
Answer = TypeVar("Answer")
Used = dict[int, tuple[int, int]]  # requests and characters by key id
UsageOf = Callable[[list[Item], list[Answer | Exception]], Used]  # of a committed batch's items and answers


class Unrecorded(Generic[Item, Answer]):
    def __init__(self, usage_of: UsageOf[Item, Answer]):
        self.usage_of = usage_of
        self.used: dict[tuple[int, date], tuple[int, int, datetime]] = {}  # by key id and day: and the last use

    def committed(self, items: list[Item], answers: list[Answer | Exception]) -> None:
        """Note the usage of a batch the store admitted."""
        when = datetime.now(UTC)
        self.add({(key_id, when.date()): (requests, characters, when)
                  for key_id, (requests, characters) in self.usage_of(items, answers).items()})

    def add(self, used: dict[tuple[int, date], tuple[int, int, datetime]]) -> None:
        for day, (requests, characters, when) in used.items():
            before = self.used.get(day, (0, 0, when))
            self.used[day] = (before[0] + requests, before[1] + characters, max(before[2], when))

    def due(self) -> bool:
        """Whether some usage waits to be recorded."""
        return bool(self.used)

    def record(self, connection: Connection) -> None:
        """All of it, in one transaction on `connection`, keys in order; kept if the store fails it."""
        taken, self.used = self.used, {}
        try:
            with connection.begin():
                for (key_id, _), (requests, characters, when) in sorted(taken.items()):
                    record_use(connection, key_id, requests, characters, when)
        except BaseException:
            self.add(taken)
            raise
