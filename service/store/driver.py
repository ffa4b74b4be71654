"""Statements on the driver's own connection (sqlite3's, psycopg's), for the few that every admitted request runs:
there SQLAlchemy's work to run a statement takes longer than the database takes to run it. A statement is compiled
once for each dialect, its typed parameters converted as SQLAlchemy would; transactions are the caller's.

    driver = Driver(connection)         # a SQLAlchemy Connection's, outside any transaction of SQLAlchemy's
    rows = driver.execute(statement, {"name": value})  # a TextClause: its rows, as tuples
    driver.errors                       # the driver's exceptions (a DBAPI's Error)
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, TextClause
from sqlalchemy.engine import Dialect


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


class Driver:
    def __init__(self, connection: Connection):
        self.dialect = connection.dialect
        self.connection = connection.connection.driver_connection
        self.errors: type[Exception] = self.dialect.loaded_dbapi.Error

    def execute(self, statement: TextClause, params: dict[str, Any]) -> list[tuple]:
        done = compiled(statement, self.dialect)
        if done.processors:
            params = params | {name: processor(params[name]) for name, processor in done.processors.items()}
        cursor = self.connection.cursor()
        try:
            cursor.execute(done.sql, [params[name] for name in done.names] if done.names is not None else params)
            return cursor.fetchall() if cursor.description else []
        finally:
            cursor.close()
