"""Where glossaries are kept: the GlossaryRepository interface, and GlossaryFolder, its implementation on a folder
(a store-backed repository may take its place behind the same interface).

GlossaryFolder keeps each glossary as one JSON file in TRANSLATOR_DATA_DIR/glossaries, which the service's HTTP
workers share, so that a glossary made through one worker is seen by all of them. A file is written under a
temporary name and then renamed, so nothing half-written is ever read. Each glossary belongs to its owner (the key
it was made with, as service.worker.access names it; "" when keys are off): another owner's glossary is not found.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import uuid
from pathlib import Path
from typing import Protocol

from service.worker.deepl.glossary import Dictionary, Glossary, GlossaryError, Matcher
from service.worker.deepl.languages import source_code
from service.worker.errors import NotFound


class GlossaryNotFound(NotFound):
    def __init__(self) -> None:
        super().__init__("Glossary not found")


class GlossaryRepository(Protocol):
    def create(self, owner: str, name: str, dictionaries: list[Dictionary], ignore_case: bool) -> Glossary: ...

    def list(self, owner: str) -> list[Glossary]: ...

    def get(self, owner: str, glossary_id: str) -> Glossary:
        """The glossary, or GlossaryNotFound (also for another owner's)."""
        ...

    def update(self, owner: str, glossary: Glossary) -> None:
        """Keep `glossary` in place of the one of its id, or GlossaryNotFound."""
        ...

    def delete(self, owner: str, glossary_id: str) -> None:
        """Remove the glossary, or GlossaryNotFound."""
        ...


class GlossaryFolder:
    """GlossaryRepository on a folder of JSON files (see the module's docstring)."""

    def __init__(self, folder: Path):
        self.folder = folder

    def owned(self, owner: str) -> Path:
        """The owner's folder: named by a hash of the key, which is never written down."""
        return self.folder / hashlib.sha256(owner.encode()).hexdigest()[:32]

    def path(self, owner: str, glossary_id: str) -> Path:
        try:
            uuid.UUID(glossary_id)
        except ValueError:
            raise GlossaryNotFound() from None
        return self.owned(owner) / f"{glossary_id}.json"

    def create(self, owner: str, name: str, dictionaries: list[Dictionary], ignore_case: bool) -> Glossary:
        glossary = Glossary(str(uuid.uuid4()), name, dictionaries, ignore_case=ignore_case)
        self.write(owner, glossary)
        return glossary

    def update(self, owner: str, glossary: Glossary) -> None:
        self.get(owner, glossary.glossary_id)
        self.write(owner, glossary)

    def write(self, owner: str, glossary: Glossary) -> None:
        """The glossary's file, written whole under a temporary name, then renamed."""
        path = self.path(owner, glossary.glossary_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{uuid.uuid4().hex}.partial")
        partial.write_text(json.dumps(dataclasses.asdict(glossary)))
        os.replace(partial, path)

    def list(self, owner: str) -> list[Glossary]:
        paths = sorted(self.owned(owner).glob("*.json"), key=lambda p: p.stat().st_mtime)
        return [glossary for path in paths if (glossary := read(path))]

    def get(self, owner: str, glossary_id: str) -> Glossary:
        if (glossary := read(self.path(owner, glossary_id))) is None:
            raise GlossaryNotFound()
        return glossary

    def delete(self, owner: str, glossary_id: str) -> None:
        try:
            self.path(owner, glossary_id).unlink()
        except FileNotFoundError:
            raise GlossaryNotFound() from None


def read(path: Path) -> Glossary | None:
    """The glossary of a file, or None when it is gone (deleted meanwhile)."""
    try:
        fields = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    fields["dictionaries"] = [Dictionary(**d) for d in fields["dictionaries"]]
    return Glossary(**fields)


def matcher(repository: GlossaryRepository, owner: str, glossary_id: str, source: str, target: str) -> Matcher:
    """The terms of a glossary's dictionary from `source` into `target` (served codes), for the pipeline; 404 for a
    glossary not found, 400 for one without that pair."""
    glossary = repository.get(owner, glossary_id)
    dictionary = glossary.dictionary(source_code(source).lower(), source_code(target).lower())
    if dictionary is None:
        raise GlossaryError(f"The glossary has no dictionary from {source_code(source)} to {source_code(target)}")
    return Matcher(dictionary.entries, glossary.ignore_case)
