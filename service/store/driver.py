"""Statements on the driver's own connection, for the few that every admitted request runs: there SQLAlchemy's work
to run a statement takes longer than the database takes to run it, and so does psycopg's (its cursors, adaptation
and results, in Python), which is why PostgreSQL's go to libpq itself (psycopg.pq), prepared once on each
connection, their parameters as text. A statement is compiled once for each dialect; transactions are the caller's.

    driver = Driver(connection)         # a SQLAlchemy Connection's, outside any transaction of SQLAlchemy's
    driver.rows(statement, {"name": value})  # a TextClause run: how many rows it returned
    driver.errors                       # the driver's exceptions (a DBAPI's Error)
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from typing import Any

from psycopg import errors, pq
from sqlalchemy import Connection, TextClause
from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg
from sqlalchemy.engine import Dialect

NUMBERED = PGDialect_psycopg(paramstyle="numeric_dollar")  # libpq's parameters: $1, $2, ... (typed casts)


@dataclass(frozen=True)
class Compiled:
    sql: str  # in the driver's parameter style
    names: tuple[str, ...] | None  # the positional parameters' names in order; None: the driver takes them by name
    processors: dict[str, Callable[[Any], Any]]  # what a typed parameter's value becomes for the driver


@functools.lru_cache(maxsize=256)
def compiled(statement: TextClause, dialect: Dialect) -> Compiled:
    done = statement.compile(dialect=dialect)
    processors = {name: processor for name, bind in done.binds.items()
                  if (processor := bind.type.bind_processor(dialect)) is not None}
    return Compiled(done.string, tuple(done.positiontup) if done.positiontup else None, processors)


def as_text(value: object) -> bytes | None:
    """A parameter as libpq takes it in text: an int, a str, a date or a moment (ISO 8601, with its time zone)."""
    if value is None:
        return None
    return (value.isoformat() if isinstance(value, date) else str(value)).encode()


class Driver:
    def __init__(self, connection: Connection):
        self.dialect = connection.dialect
        self.pooled = connection.connection  # its `info` lasts as long as the driver's connection
        self.connection = self.pooled.driver_connection
        self.errors: type[Exception] = self.dialect.loaded_dbapi.Error

    def rows(self, statement: TextClause, params: dict[str, Any]) -> int:
        """Run `statement` with `params`: how many rows it returned."""
        if self.dialect.name == "postgresql":
            return self.on_libpq(statement, params)
        done = compiled(statement, self.dialect)
        if done.processors:
            params = params | {name: processor(params[name]) for name, processor in done.processors.items()}
        cursor = self.connection.cursor()
        try:
            cursor.execute(done.sql, [params[name] for name in done.names] if done.names is not None else params)
            return len(cursor.fetchall()) if cursor.description else 0
        finally:
            cursor.close()

    def on_libpq(self, statement: TextClause, params: dict[str, Any]) -> int:
        """PostgreSQL's statement on libpq, prepared on this connection the first time, as its own transaction (the
        connection must be idle: no transaction of psycopg's is open)."""
        pgconn = self.connection.pgconn
        if pgconn.transaction_status != pq.TransactionStatus.IDLE:
            raise errors.ProgrammingError(f"a statement at once in a transaction ({pgconn.transaction_status.name})")
        done = compiled(statement, NUMBERED)
        prepared: dict[str, bytes] = self.pooled.info.setdefault("prepared", {})
        if (name := prepared.get(done.sql)) is None:
            name = f"translator_{len(prepared)}".encode()
            self.check(pgconn.prepare(name, done.sql.encode()))
            prepared[done.sql] = name
        result = pgconn.exec_prepared(name, [as_text(params[param]) for param in done.names or ()])
        self.check(result)
        return result.ntuples

    def check(self, result: pq.abc.PGresult) -> None:
        """psycopg's error for a result of libpq's that failed."""
        if result.status not in (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK):
            raise errors.error_from_result(result, encoding=self.connection.info.encoding)
