"""Limits' counters in the store, shared by every worker and replica: a count per subject (a key or an address),
kind of limit and window, taken only while it stays within the limit, in the caller's transaction; a request refused
by one limit takes nothing from the others. The requests of one subject that a batch admits (service.store.batches)
are taken together: their sums in one statement while they fit, else one by one under the rows' locks.

Windows are fixed: a minute-limit's start at multiples of its length since the epoch, a day's at midnight UTC, a
month's on its first day. Exactly `most` are taken in each window, however many processes ask at once: the
increments of a request's limits and their checks are one statement (INSERT ... ON CONFLICT DO UPDATE ... WHERE),
which PostgreSQL runs under the rows' locks and SQLite under its write lock; where some do not fit, the counts
are read and written under those locks, which the transaction holds until it ends.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import Connection, TextClause, delete, text
from sqlalchemy.orm import Session

from service.store.tables import Counter

COLUMNS = ("subject", "kind", "start", "ends", "count", "most")  # Counter's
DAY_S = 86400
SWEEP_CHANCE = 1 / 256  # of a batch first deleting the counters of windows that have ended (sweep())


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
def counting_statement(rows: int, within: bool) -> TextClause:
    """counted()'s statement for `rows` limits, its parameters COLUMN_ROW: SQL that SQLite and PostgreSQL read
    alike, compiled once (SQLAlchemy compiles a multi-row INSERT anew each time, which takes longer than running
    it). PostgreSQL locks each row it meets, updated or not, until the transaction ends; SQLite's transaction holds
    the write lock."""
    values = ", ".join("(" + ", ".join(f":{column}_{i}" for column in COLUMNS) + ")" for i in range(rows))
    where = " WHERE counters.count + excluded.count <= excluded.most" if within else ""
    return text(f"INSERT INTO counters ({', '.join(COLUMNS)}) VALUES {values} ON CONFLICT (subject, kind, start) "
                f"DO UPDATE SET count = counters.count + excluded.count{where} RETURNING kind, count")


def counted(session: Session | Connection, subject: str, wanted: list[tuple[Limit, int]],
            within: bool) -> dict[str, int]:
    """Add each amount to `subject`'s count in its limit's window (when `within`, only where the count stays within
    the limit; an amount over the limit alone must not be asked), in one statement: the counts added to, by kind."""
    values = {f"{column}_{i}": value for i, (limit, amount) in enumerate(wanted) for column, value in zip(
        COLUMNS, (subject, limit.kind, limit.window.start, limit.window.ends, amount, limit.most))}
    return {kind: count for kind, count in session.execute(counting_statement(len(wanted), within), values)}


def sums(requests: list[list[tuple[Limit, int]]]) -> list[tuple[Limit, int]]:
    """What requests with the same limits want of each limit, together."""
    return [(limit, sum(wanted[i][1] for wanted in requests)) for i, (limit, _) in enumerate(requests[0])]


def take_each(session: Session | Connection, subject: str,
              requests: list[list[tuple[Limit, int]]]) -> list[Limit | None]:
    """Each request's amounts for `subject` (every request with the same limits), in their order: all of a
    request's if each count stays within its limit, else none of them; for each request None, or the first limit
    that refused it. One statement when all fit (their sums taken at once), three when some do not."""
    limits = [limit for limit, _ in requests[0]]
    if not limits:
        return [None] * len(requests)
    summed = sums(requests)
    taken = counted(session, subject, summed, within=True) if all(s <= limit.most for limit, s in summed) else {}
    if len(taken) == len(limits):
        return [None] * len(requests)
    locked = counted(session, subject, [(limit, 0) for limit in limits], within=False)  # every row, locked
    counts = {limit.kind: locked[limit.kind] - (s if limit.kind in taken else 0) for limit, s in summed}
    refused = []
    for wanted in requests:  # in order, each while it fits
        over = next((limit for limit, amount in wanted if counts[limit.kind] + amount > limit.most), None)
        for limit, amount in wanted if over is None else []:
            counts[limit.kind] += amount
        refused.append(over)
    if changes := [(limit, counts[limit.kind] - locked[limit.kind]) for limit in limits
                   if counts[limit.kind] != locked[limit.kind]]:
        counted(session, subject, changes, within=False)
    return refused


def take(session: Session | Connection, subject: str, wanted: list[tuple[Limit, int]],
         within: bool = True) -> Limit | None:
    """One request's amounts for `subject`: all of them if each count stays within its limit, else none (or
    whatever the counts when not `within`: what was used already); None, or the first limit that refused."""
    if within:
        return take_each(session, subject, [wanted])[0]
    if wanted:
        counted(session, subject, wanted, within=False)
    return None


def sweep(session: Session | Connection, before: float) -> None:
    """Delete the counters of windows that ended before `before`: at a batch's start, before it locks any row, so
    that it waits for no other batch's rows while it holds its own."""
    session.execute(delete(Counter).where(Counter.ends <= before))


def count(session: Session, subject: str, limit: Limit) -> int:
    """What `subject` has taken of the limit in its window."""
    row = session.get(Counter, (subject, limit.kind, limit.window.start))
    return row.count if row else 0
