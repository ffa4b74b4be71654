"""The store's engine, its migrations at start, and its transactions."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from service.settings import Settings

log = logging.getLogger(__name__)
MIGRATIONS = Path(__file__).resolve().parent / "migrations"
MIGRATION_LOCK = 52_0001  # PostgreSQL's advisory lock that one instance's migration holds while another waits
BUSY_TIMEOUT_S = 30  # how long an SQLite writer waits for another's transaction
CONNECT_TIMEOUT_S = 3


class StoreUnavailable(Exception):
    """The store cannot be reached or refused the transaction (what needs it answers 503)."""


def store_url(settings: Settings) -> str:
    """TRANSLATOR_STORE_URL, else SQLite in the data folder."""
    return settings.store_url or f"sqlite:///{settings.data_dir / 'translator.db'}"


def sqlite_engine(url: str) -> Engine:
    """SQLite with WAL (readers do not wait for the writer) and every transaction taking the write lock at once
    (BEGIN IMMEDIATE: two processes never deadlock upgrading a read to a write; they wait BUSY_TIMEOUT_S)."""
    engine = create_engine(url, connect_args={"timeout": BUSY_TIMEOUT_S})

    @event.listens_for(engine, "connect")
    def on_connect(connection, record) -> None:
        connection.isolation_level = None  # the driver's own transactions off: "begin" below starts them
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=NORMAL")
        connection.execute("PRAGMA foreign_keys=ON")

    @event.listens_for(engine, "begin")
    def on_begin(connection) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


def server_engine(url: str) -> Engine:
    """PostgreSQL (or another server): connections checked before use, so that a restarted server is found again."""
    return create_engine(url, pool_pre_ping=True, pool_size=4, max_overflow=8, pool_timeout=CONNECT_TIMEOUT_S,
                         connect_args={"connect_timeout": CONNECT_TIMEOUT_S})


def alembic_config(connection: Connection) -> Config:
    """Alembic's configuration for migrations/ on `connection`. A new revision (on a store at head):
    `command.revision(alembic_config(connection), "what it adds", autogenerate=True, rev_id="0002")`, which names
    its file r0002_what_it_adds.py (a module name may not start with a digit)."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("file_template", "r%%(rev)s_%%(slug)s")
    config.attributes["connection"] = connection
    return config


class Store:
    def __init__(self, url: str, api_keys: list[str] | tuple[str, ...] = ()):
        """`api_keys` (TRANSLATOR_API_KEYS) are imported as keys without limits once the schema is migrated."""
        self.engine = sqlite_engine(url) if make_url(url).get_backend_name() == "sqlite" else server_engine(url)
        self.api_keys = tuple(api_keys)
        self.migrated = False
        self.lock = threading.Lock()

    @classmethod
    def of(cls, settings: Settings) -> Store:
        return cls(store_url(settings), settings.api_keys)

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    def ready(self) -> None:
        """Migrate the schema to the newest revision and import the configured keys, once per process; a second
        instance migrating at once waits for the first (SQLite's write lock, PostgreSQL's advisory lock)."""
        if self.migrated:
            return
        with self.lock:
            if self.migrated:
                return
            try:
                if self.dialect == "sqlite" and (path := self.engine.url.database) not in (None, "", ":memory:"):
                    Path(path).parent.mkdir(parents=True, exist_ok=True)
                with self.engine.begin() as connection:
                    if self.dialect == "postgresql":
                        connection.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": MIGRATION_LOCK})
                    command.upgrade(alembic_config(connection), "head")
                from service.store.keys import import_keys  # keys.py builds on this module

                with Session(self.engine) as session, session.begin():
                    import_keys(session, self.api_keys)
            except (DBAPIError, OSError) as error:
                raise StoreUnavailable(describe(error)) from error
            self.migrated = True

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        """A session in one transaction, committed at the end, rolled back on any error; StoreUnavailable when the
        store cannot be reached or fails it."""
        self.ready()
        try:
            with Session(self.engine, expire_on_commit=False) as session, session.begin():
                yield session
        except DBAPIError as error:
            raise StoreUnavailable(describe(error)) from error

    def close(self) -> None:
        self.engine.dispose()


def describe(error: Exception) -> str:
    """The driver's first line, without SQLAlchemy's statement and parameters."""
    orig = getattr(error, "orig", None) or error
    return (str(orig).strip().splitlines() or [type(orig).__name__])[0]
