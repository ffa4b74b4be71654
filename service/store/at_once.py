"""A batch's limits in one PostgreSQL statement, run as its own transaction (autocommit): no BEGIN or COMMIT to wait
for, and the rows it locks are locked only while the server runs it, never across a round trip to a worker that may
be waiting for its turn on a busy core. It finds each of the batch's keys unrevoked, then adds each subject's sums to
its counters while they stay within their limits, subjects in the order of the full transaction
(service.worker.access), so that two never wait for each other in a cycle.

It holds only when every key is unrevoked and every sum fits: else it fails with division by zero, which undoes
all of it (one statement), and the batch takes its full transaction instead, which says who is refused and why.
"""

from __future__ import annotations

import functools

from sqlalchemy import Connection, TextClause, text

from service.store.driver import Driver
from service.store.limits import COLUMNS, Limit

UNDONE = "22012"  # division_by_zero: the statement's SQLSTATE when it undid itself
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
    """The statement for `keys` keys and `rows` counters, compiled once for each shape."""
    unrevoked = NOTHING if not keys else (
        "SELECT id AS key_id FROM api_keys WHERE revoked IS NULL AND id IN ("
        + ", ".join(f"CAST(:key_id_{i} AS integer)" for i in range(keys)) + ")")
    counted = NOTHING if not rows else (
        f"INSERT INTO counters ({', '.join(COLUMNS)}) SELECT {', '.join(COLUMNS)} "
        f"FROM {values('wanted', ('owner', *COLUMNS), ('integer', *COUNTER_TYPES), rows)} "
        "WHERE wanted.owner IS NULL OR wanted.owner IN (SELECT key_id FROM unrevoked) ORDER BY wanted.n "
        "ON CONFLICT (subject, kind, start) DO UPDATE SET count = counters.count + excluded.count "
        "WHERE counters.count + excluded.count <= excluded.most RETURNING 1")
    return text(f"WITH unrevoked AS ({unrevoked}), counted AS ({counted}) SELECT 1 / CAST((SELECT count(*) FROM "
                "unrevoked) + (SELECT count(*) FROM counted) = :rows_all AS integer)")


def take_all(connection: Connection, keys: set[int], subjects: list[Subject]) -> bool:
    """Each key of `keys` found unrevoked, and each subject's sums taken (subjects in order), in one statement:
    whether it held (else it changed nothing). `connection` in autocommit."""
    counters = [(owner, subject, limit, amount) for subject, owner, sums in subjects for limit, amount in sums]
    params: dict[str, object] = {"rows_all": len(keys) + len(counters)}
    for i, key_id in enumerate(sorted(keys)):
        params[f"key_id_{i}"] = key_id
    for i, (owner, subject, limit, amount) in enumerate(counters):
        params |= {f"owner_{i}": owner} | {f"{column}_{i}": value for column, value in zip(
            COLUMNS, (subject, limit.kind, limit.window.start, limit.window.ends, amount, limit.most))}
    if not params["rows_all"]:
        return True
    try:
        Driver(connection).execute(statement(len(keys), len(counters)), params)
    except connection.dialect.loaded_dbapi.Error as error:
        if getattr(error, "sqlstate", None) == UNDONE:
            return False
        raise
    return True
