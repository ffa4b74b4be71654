"""A batch's usage and limits taken whole or not at all, on the driver's own connection (service.store.driver):
it counts each unrevoked key's usage, then adds each subject's sums to its counters while they stay within their
limits, in the order of the full transaction (service.worker.access: usage by key id, then counters by subject and
limit), so that the two never wait for each other in a cycle.

On PostgreSQL, in one statement run as its own transaction: no BEGIN or COMMIT to wait for, and the rows it locks
are locked only while the server runs it, never across a round trip to a worker that may be waiting for its turn on
a busy core. On SQLite, in a transaction of its own under the write lock (BEGIN IMMEDIATE): a statement for each
key's usage, one for all the counters.

It holds only when every key is unrevoked and every sum fits: else it undoes all of it (PostgreSQL's statement
fails with division by zero, SQLite's transaction is rolled back), and the batch takes its full transaction instead,
which says who is refused and why.
"""

from __future__ import annotations

import contextlib
import functools
from datetime import UTC, datetime

from sqlalchemy import Connection, Date, TextClause, bindparam, text

from service.store.driver import Driver
from service.store.keys import RECORD_USE
from service.store.limits import COLUMNS, Limit, counting_statement
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


BEGIN_IMMEDIATE = text("BEGIN IMMEDIATE")  # SQLite's write lock, taken at once (as service.store.database's)
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
    (subjects in order), all of it or nothing: whether it held (never when a sum alone is over its limit, which a
    new window's counter would take). `connection` outside any transaction of SQLAlchemy's; the driver's error
    (Driver.errors) if the store fails it."""
    when = datetime.now(UTC)
    counters = [(owner, subject, limit, amount) for subject, owner, sums in subjects for limit, amount in sums]
    if any(amount > limit.most for _, _, limit, amount in counters):
        return False
    if not used and not counters:
        return True
    driver = Driver(connection)
    if driver.dialect.name == "postgresql":
        return in_one_statement(driver, when, used, counters)
    return in_one_transaction(driver, when, used, counters)


Counted = tuple[int | None, str, Limit, int]  # a counter's key id (if a key), subject, limit and amount


@functools.cache
def row_names(row: int) -> tuple[str, ...]:
    """A counter's parameters in row `row`: owner_ROW (its key's id), then COLUMN_ROW of each of COLUMNS."""
    return (f"owner_{row}", *(f"{column}_{row}" for column in COLUMNS))


def counter_params(counters: list[Counted]) -> dict[str, object]:
    """The counters' parameters, row by row (row_names())."""
    params: dict[str, object] = {}
    for i, (owner, subject, limit, amount) in enumerate(counters):
        params.update(zip(row_names(i), (owner, subject, limit.kind, limit.window.start, limit.window.ends, amount,
                                         limit.most)))
    return params


def in_one_statement(driver: Driver, when: datetime, used: dict[int, tuple[int, int]],
                     counters: list[Counted]) -> bool:
    """PostgreSQL's: statement()'s."""
    params: dict[str, object] = {"day": when.date(), "last_used": when, "rows_all": len(used) + len(counters)}
    for i, (key_id, (requests, characters)) in enumerate(used.items()):
        params |= {f"key_id_{i}": key_id, f"requests_{i}": requests, f"characters_{i}": characters}
    try:
        driver.rows(statement(len(used), len(counters)), params | counter_params(counters))
    except driver.errors as error:
        if getattr(error, "sqlstate", None) == UNDONE:
            return False
        raise
    return True


def in_one_transaction(driver: Driver, when: datetime, used: dict[int, tuple[int, int]],
                       counters: list[Counted]) -> bool:
    """SQLite's: under the write lock, each key's usage unless revoked, then every counter within its limit."""
    driver.rows(BEGIN_IMMEDIATE, {})
    try:
        held = all(driver.rows(RECORD_USE[True], {
            "key_id": key_id, "day": when.date(), "requests": requests, "characters": characters, "last_used": when})
            for key_id, (requests, characters) in used.items())
        if held and counters:
            taken = driver.rows(counting_statement(len(counters), within=True), counter_params(counters))
            held = taken == len(counters)
    except BaseException:
        with contextlib.suppress(driver.errors):  # a lost connection's transaction ends with it
            driver.connection.rollback()
        raise
    if held:
        driver.connection.commit()
    else:
        driver.connection.rollback()
    return held
