"""Where glossaries are kept: in the store (service.store: tables glossaries and glossary_dictionaries), which every
HTTP worker and replica shares, so that a glossary made through one is used through all of them. Each glossary
belongs to its owner (as service.worker.dependencies.glossary_owner names it; "" when keys are off): another
owner's glossary is not found. Every change is one transaction: nothing half-written is ever read.

The methods block on the store: the routes call them in a thread (asyncio.to_thread).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from service.store import Store
from service.store.tables import GlossaryEntries, GlossaryRow
from service.worker.deepl.glossary import Dictionary, Glossary, GlossaryError, Matcher, deepl_time
from service.worker.deepl.languages import source_code
from service.worker.errors import NotFound


class GlossaryNotFound(NotFound):
    def __init__(self) -> None:
        super().__init__("Glossary not found")


class Glossaries:
    """Glossaries in the store (see the module's docstring)."""

    def __init__(self, store: Store):
        self.store = store

    def create(self, owner: str, name: str, dictionaries: list[Dictionary], ignore_case: bool) -> Glossary:
        row = GlossaryRow(id=str(uuid.uuid4()), owner=owner, name=name, ignore_case=ignore_case,
                          created=datetime.now(UTC))
        with self.store.transaction() as session:
            session.add(row)
            session.flush()
            write_dictionaries(session, row.id, dictionaries)
        return glossary_of(row, dictionaries)

    def list(self, owner: str) -> list[Glossary]:
        """The owner's glossaries, oldest first."""
        with self.store.transaction() as session:
            rows = session.scalars(select(GlossaryRow).where(GlossaryRow.owner == owner)
                                   .order_by(GlossaryRow.created, GlossaryRow.id)).all()
            return [glossary_of(row, read_dictionaries(session, row.id)) for row in rows]

    def get(self, owner: str, glossary_id: str) -> Glossary:
        """The glossary, or GlossaryNotFound (also for another owner's)."""
        with self.store.transaction() as session:
            row = owned(session, owner, glossary_id)
            return glossary_of(row, read_dictionaries(session, row.id))

    def change(self, owner: str, glossary_id: str, change: Callable[[Glossary], Glossary]) -> Glossary:
        """Keep change(the glossary) in its place, in one transaction (two changes at once do not lose one);
        GlossaryNotFound, or whatever change() raises, and nothing is changed."""
        with self.store.transaction() as session:
            row = owned(session, owner, glossary_id)
            changed = change(glossary_of(row, read_dictionaries(session, row.id)))
            row.name = changed.name
            session.execute(delete(GlossaryEntries).where(GlossaryEntries.glossary_id == row.id))
            write_dictionaries(session, row.id, changed.dictionaries)
        return changed

    def delete(self, owner: str, glossary_id: str) -> None:
        """Remove the glossary (its dictionaries go with it), or GlossaryNotFound."""
        with self.store.transaction() as session:
            session.delete(owned(session, owner, glossary_id))


def owned(session: Session, owner: str, glossary_id: str) -> GlossaryRow:
    """The glossary's row, taken for update (PostgreSQL: a change waits for another's), or GlossaryNotFound."""
    query = select(GlossaryRow).where(GlossaryRow.id == glossary_id, GlossaryRow.owner == owner).with_for_update()
    if (row := session.scalars(query).one_or_none()) is None:
        raise GlossaryNotFound()
    return row


def write_dictionaries(session: Session, glossary_id: str, dictionaries: list[Dictionary]) -> None:
    session.add_all(GlossaryEntries(glossary_id=glossary_id, source_lang=d.source_lang, target_lang=d.target_lang,
                                    position=i, entries=d.as_tsv()) for i, d in enumerate(dictionaries))
    session.flush()


def read_dictionaries(session: Session, glossary_id: str) -> list[Dictionary]:
    query = select(GlossaryEntries).where(GlossaryEntries.glossary_id == glossary_id).order_by(GlossaryEntries.position)
    return [Dictionary.from_tsv(d.source_lang, d.target_lang, d.entries) for d in session.scalars(query)]


def glossary_of(row: GlossaryRow, dictionaries: list[Dictionary]) -> Glossary:
    return Glossary(row.id, row.name, dictionaries, deepl_time(row.created), row.ignore_case)


def matcher(glossaries: Glossaries, owner: str, glossary_id: str, source: str, target: str) -> Matcher:
    """The terms of a glossary's dictionary from `source` into `target` (served codes), for the pipeline; 404 for a
    glossary not found, 400 for one without that pair."""
    glossary = glossaries.get(owner, glossary_id)
    dictionary = glossary.dictionary(source_code(source).lower(), source_code(target).lower())
    if dictionary is None:
        raise GlossaryError(f"The glossary has no dictionary from {source_code(source)} to {source_code(target)}")
    return Matcher(dictionary.entries, glossary.ignore_case)
