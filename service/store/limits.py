"""Limits' counters in the store, shared by every worker and replica: a count per subject (a key or an address),
kind of limit and window, taken only while it stays within the limit, in the caller's transaction (so that a
request refused by one limit takes nothing from the others).

Windows are fixed: a minute-limit's start at multiples of its length since the epoch, a day's at midnight UTC, a
month's on its first day. Exactly `most` are taken in each window, however many processes ask at once: the
increments of a request's limits and their checks are one statement (INSERT ... ON CONFLICT DO UPDATE ... WHERE),
which PostgreSQL runs under the rows' locks and SQLite under its write lock.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import TextClause, delete, text
from sqlalchemy.orm import Session

from service.store.tables import Counter

COLUMNS = ("subject", "kind", "start", "ends", "count", "most")  # Counter's
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


@functools.cache
def take_statement(rows: int, within: bool) -> TextClause:
    """take()'s statement for `rows` limits, its parameters COLUMN_ROW: SQL that SQLite and PostgreSQL read alike,
    compiled once (SQLAlchemy compiles a multi-row INSERT anew each time, which takes longer than running it)."""
    values = ", ".join("(" + ", ".join(f":{column}_{i}" for column in COLUMNS) + ")" for i in range(rows))
    where = " WHERE counters.count + excluded.count <= excluded.most" if within else ""
    return text(f"INSERT INTO counters ({', '.join(COLUMNS)}) VALUES {values} ON CONFLICT (subject, kind, start) "
                f"DO UPDATE SET count = counters.count + excluded.count{where} RETURNING kind")


def take(session: Session, subject: str, wanted: list[tuple[Limit, int]], within: bool = True) -> Limit | None:
    """Count each amount for `subject` in its limit's window, all of them if each count stays within its limit (or
    whatever the counts when not `within`: what was used already), in one statement; None, or the first limit that
    refused, which leaves the transaction to be rolled back."""
    if not wanted:
        return None
    if within and (over := next((limit for limit, amount in wanted if amount > limit.most), None)):
        return over
    values = {f"{column}_{i}": value for i, (limit, amount) in enumerate(wanted) for column, value in zip(
        COLUMNS, (subject, limit.kind, limit.window.start, limit.window.ends, amount, limit.most))}
    taken = set(session.scalars(take_statement(len(wanted), within), values))
    if random.random() < SWEEP_CHANCE:
        session.execute(delete(Counter).where(Counter.ends <= min(limit.window.start for limit, _ in wanted)))
    return next((limit for limit, _ in wanted if limit.kind not in taken), None)


def count(session: Session, subject: str, limit: Limit) -> int:
    """What `subject` has taken of the limit in its window."""
    row = session.get(Counter, (subject, limit.kind, limit.window.start))
    return row.count if row else 0
