"""The store of what must last and what every HTTP worker and replica shares: API keys, the limits' counters, usage
by day, translated files' owners, DeepL's glossaries and document jobs. SQLite in the data folder by default,
PostgreSQL when TRANSLATOR_STORE_URL names it (replicas share it).

    store = Store.of(settings)          # no connection yet
    with store.transaction() as session:  # migrated first (once per process), StoreUnavailable if unreachable
        ...

tables.py holds the tables, migrations/ their Alembic migrations, keys.py, limits.py and files.py what is done with
them.
"""

from service.store.database import Store, StoreUnavailable

__all__ = ["Store", "StoreUnavailable"]
