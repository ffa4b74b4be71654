"""Alembic's environment: migrations run on the connection that Store.ready() holds (and has locked)."""

from alembic import context

from service.store.tables import Base

context.configure(connection=context.config.attributes["connection"], target_metadata=Base.metadata,
                  render_as_batch=True)  # SQLite alters a table by copying it
with context.begin_transaction():
    context.run_migrations()
