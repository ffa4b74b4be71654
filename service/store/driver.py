"""Statements on the driver's own connection (sqlite3's, psycopg's), for those on every admitted request's path:
there SQLAlchemy's work to run a statement takes several times what the statement itself takes. A statement is
compiled once for each dialect; it runs in whatever transaction the SQLAlchemy connection has begun.

    driver = Driver(connection)         # a SQLAlchemy Connection's
    rows = driver.execute(statement, {"name": value})  # a TextClause: its rows, as tuples
"""

from __future__ import annotations

import functools
from typing import Any

from sqlalchemy import Connection, TextClause
from sqlalchemy.engine import Dialect


@functools.lru_cache(maxsize=256)
def compiled(statement: TextClause, dialect: Dialect) -> tuple[str, tuple[str, ...] | None]:
    """The statement's SQL in the driver's parameter style, and its parameters' names in order (None: by name)."""
    done = statement.compile(dialect=dialect)
    return done.string, tuple(done.positiontup) if done.positiontup else None


class Driver:
    def __init__(self, connection: Connection):
        self.dialect = connection.dialect
        self.connection = connection.connection.driver_connection

    def execute(self, statement: TextClause, params: dict[str, Any]) -> list[tuple]:
        sql, names = compiled(statement, self.dialect)
        cursor = self.connection.cursor()
        try:
            cursor.execute(sql, [params[name] for name in names] if names is not None else params)
            return [tuple(row) for row in cursor.fetchall()] if cursor.description else []
        finally:
            cursor.close()
