"""INSERT ... ON CONFLICT for the store's dialect: SQLite's and PostgreSQL's have the same interface."""

from __future__ import annotations

from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

INSERTS = {"sqlite": sqlite.insert, "postgresql": postgresql.insert}


def insert(session: Session, table):
    """An INSERT on `table` with on_conflict_do_update() / on_conflict_do_nothing() for the session's dialect."""
    return INSERTS[session.get_bind().dialect.name](table)
