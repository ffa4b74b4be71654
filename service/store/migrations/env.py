"""Alembic's environment: migrations run on the connection that Store.ready() holds (and has locked)."""

from alembic import context
from sqlalchemy import Connection

from service.store.tables import Base


def migrate(connection: Connection) -> None:
    context.configure(connection=connection, target_metadata=Base.metadata,
                      render_as_batch=True)  # SQLite alters a table by copying it
    with context.begin_transaction():
        context.run_migrations()


# Alembic sets context.config while it runs this file; imported any other way (tests/test_layout.py imports every
# module) it does nothing.
if (config := getattr(context, "config", None)) is not None:
    migrate(config.attributes["connection"])
