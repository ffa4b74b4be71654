"""A batch's usage and limits in one PostgreSQL statement, run as its own transaction (autocommit): no BEGIN or
COMMIT to wait for, and the rows it locks are locked only while the server runs it, never across a round trip to a
worker that may be waiting for its turn on a busy core. It counts each unrevoked key's usage, then adds each
subject's sums to its counters while they stay within their limits, in the order of the full transaction
(service.worker.access: usage by key id, then counters by subject and limit), so that the two never wait for each
other in a cycle.

It holds only when every key is unrevoked and every sum fits: else it fails with division by zero, which undoes
all of it (one statement), and the batch takes its full transaction instead, which says who is refused and why.
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime

from sqlalchemy import Connection, Date, TextClause, bindparam, text
from sqlalchemy.exc import DBAPIError

from service.store.limits import COLUMNS, Limit
from service.store.tables import UtcDateTime

UNDONE = "22012"  # division_by_zero: the statement's SQLSTATE when it undid itself
USAGE = ("key_id", "requests", "characters")
USAGE_TYPES = ("integer", "bigint", "bigint")
COUNTER_TYPES = ("varchar", "varchar", "bigint", "bigint", "bigint", "bigint")  # of limits.COLUMNS

Subject = tuple[str, int | None, list[tuple[Limit, int]]]  # a subject, its key's id (if a key), its sums


def values(name: str, columns: tuple[str, ...], types: tuple[str, ...], rows: int) -> str:
    """VALUES of `rows` rows of parameters COLUMN_ROW (typed), with their order in column n, named `name`."""
    typed = [f"CAST(:{column}_{{i}} AS {kind})" for column, kind in zip(columns, types)]
    rows_sql = ", ".join("(" + ", ".join([str(i), *(t.format(i=i) for t in typed)]) + ")" for i in range(rows))
    return f"(VALUES {rows_sql}) AS {name} (n, {', '.join(columns)})"


NOTHING = "SELECT CAST(NULL AS integer) AS key_id WHERE false"  # a part for no rows


@functools.cache
def statement(keys: int, rows: int) -> TextClause:
    """The statement for `keys` keys' usage and `rows` counters, compiled once for each shape."""
    used = NOTHING if not keys else (
        "INSERT INTO usage (key_id, day, requests, characters, last_used) SELECT api_keys.id, :day, "
        f"wanted.requests, wanted.characters, :last_used FROM {values('wanted', USAGE, USAGE_TYPES, keys)} "
        "JOIN api_keys ON api_keys.id = wanted.key_id WHERE api_keys.revoked IS NULL ORDER BY wanted.n "
        "ON CONFLICT (key_id, day) DO UPDATE SET requests = usage.requests + excluded.requests, "
        "characters = usage.characters + excluded.characters, last_used = excluded.last_used RETURNING key_id")
    counted = NOTHING if not rows else (
        f"INSERT INTO counters ({', '.join(COLUMNS)}) SELECT {', '.join(COLUMNS)} "
        f"FROM {values('wanted', ('owner', *COLUMNS), ('integer', *COUNTER_TYPES), rows)} "
        "WHERE wanted.owner IS NULL OR wanted.owner IN (SELECT key_id FROM used) ORDER BY wanted.n "
        "ON CONFLICT (subject, kind, start) DO UPDATE SET count = counters.count + excluded.count "
        "WHERE counters.count + excluded.count <= excluded.most RETURNING 1")
    whole = text(f"WITH used AS ({used}), counted AS ({counted}) "
                 "SELECT 1 / CAST((SELECT count(*) FROM used) + (SELECT count(*) FROM counted) = :rows_all AS integer)")
    return whole.bindparams(bindparam("day", type_=Date), bindparam("last_used", type_=UtcDateTime)) if keys else whole


def take_all(connection: Connection, used: dict[int, tuple[int, int]], subjects: list[Subject]) -> bool:
    """Each key's requests and characters of `used` (by key id, in order) counted, and each subject's sums taken
    (subjects in order), in one statement: whether it held (else it changed nothing). `connection` in autocommit."""
    when = datetime.now(UTC)
    counters = [(owner, subject, limit, amount) for subject, owner, sums in subjects for limit, amount in sums]
    params: dict[str, object] = {"day": when.date(), "last_used": when, "rows_all": len(used) + len(counters)}
    for i, (key_id, (requests, characters)) in enumerate(used.items()):
        params |= {f"key_id_{i}": key_id, f"requests_{i}": requests, f"characters_{i}": characters}
    for i, (owner, subject, limit, amount) in enumerate(counters):
        params |= {f"owner_{i}": owner} | {f"{column}_{i}": value for column, value in zip(
            COLUMNS, (subject, limit.kind, limit.window.start, limit.window.ends, amount, limit.most))}
    if not params["rows_all"]:
        return True
    try:
        connection.execute(statement(len(used), len(counters)), params)
    except DBAPIError as error:
        if getattr(error.orig, "sqlstate", None) == UNDONE:
            return False
        raise
    return True
