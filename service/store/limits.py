"""Limits' counters in the store, shared by every worker and replica: a count per subject (a key or an address),
kind of limit and window, taken only while it stays within the limit, in the caller's transaction (so that a
request refused by one limit takes nothing from the others).

Windows are fixed: a minute-limit's start at multiples of its length since the epoch, a day's at midnight UTC, a
month's on its first day. Exactly `most` are taken in each window, however many processes ask at once: the
increment and its check are one statement (INSERT ... ON CONFLICT DO UPDATE ... WHERE), which PostgreSQL runs
under the row's lock and SQLite under its write lock.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import delete
from sqlalchemy.orm import Session

from service.store.tables import Counter
from service.store.upsert import insert

DAY_S = 86400
SWEEP_CHANCE = 1 / 256  # of a take also deleting the counters of windows that have ended


@dataclass(frozen=True)
class Window:
    start: int  # seconds since the epoch
    ends: int


def fixed_window(now: float, length: int) -> Window:
    """The window of `length` seconds that holds `now`."""
    start = int(now // length * length)
    return Window(start, start + length)


def month_window(now: float) -> Window:
    """The calendar month (UTC) that holds `now`."""
    day = datetime.fromtimestamp(now, UTC)
    first = day.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    following = first.replace(year=first.year + first.month // 12, month=first.month % 12 + 1)
    return Window(int(first.timestamp()), int(following.timestamp()))


@dataclass(frozen=True)
class Limit:
    """At most `most` of `kind` (requests, or characters for "chars") in `window`."""

    kind: str
    most: int
    window: Window


def take(session: Session, subject: str, limit: Limit, amount: int, within: bool = True) -> bool:
    """Count `amount` for `subject` in the limit's window if the count stays within it (or whatever the count when
    not `within`: what was used already); whether it was counted."""
    if within and amount > limit.most:
        return False
    start, ends = limit.window.start, limit.window.ends
    values = {"subject": subject, "kind": limit.kind, "start": start, "ends": ends, "count": amount}
    statement = insert(session, Counter).values(values).on_conflict_do_update(
        index_elements=["subject", "kind", "start"],
        set_={"count": Counter.count + amount},
        where=Counter.count + amount <= limit.most if within else None,
    ).returning(Counter.count)
    taken = session.execute(statement).first() is not None
    if random.random() < SWEEP_CHANCE:
        session.execute(delete(Counter).where(Counter.ends <= start))
    return taken


def count(session: Session, subject: str, limit: Limit) -> int:
    """What `subject` has taken of the limit in its window."""
    row = session.get(Counter, (subject, limit.kind, limit.window.start))
    return row.count if row else 0
