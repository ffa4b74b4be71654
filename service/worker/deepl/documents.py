"""DeepL's documents: where a job and its files are kept, behind the DocumentJobs interface, and JobFolder, its
implementation on a folder (a store-backed one may take its place behind the same interface, with jobs that survive
a restart).

JobFolder keeps a job as ID/job.json (its status, owner and document_key), ID/source (the upload, until it is
translated) and ID/result (the translation, until it is downloaded once), in TRANSLATOR_DATA_DIR/documents, which
the HTTP workers share: a status or download may reach another worker than the upload did. Every file is written
under a temporary name and renamed, so nothing half-written is read.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import secrets
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from service.worker.errors import RequestError


class DocumentError(RequestError):
    """An unknown or foreign document, a wrong document_key, a result asked for twice: DeepL's 400, in words."""


@dataclass(frozen=True)
class Job:
    document_id: str
    document_key: str
    owner: str  # a hash of the key it was uploaded with
    name: str  # the uploaded file's name
    status: str = "queued"  # queued, translating, done, error
    seconds_remaining: int | None = None
    billed_characters: int | None = None
    error_message: str | None = None


class DocumentJobs(Protocol):
    def create(self, owner: str, name: str, data: bytes) -> Job: ...

    def get(self, owner: str, document_id: str, document_key: str) -> Job:
        """The job, or DocumentError (unknown, another owner's, a wrong key)."""
        ...

    def update(self, job: Job) -> None: ...

    def source(self, job: Job) -> bytes: ...

    def finish(self, job: Job, result: bytes, billed_characters: int) -> None:
        """Keep the result; the job is done."""
        ...

    def take_result(self, owner: str, document_id: str, document_key: str) -> tuple[Job, bytes]:
        """The result, given once; DocumentError when it is not done or was already given."""
        ...


class JobFolder:
    """DocumentJobs on a folder (see the module's docstring)."""

    def __init__(self, folder: Path):
        self.folder = folder

    @staticmethod
    def owner_of(key: str) -> str:
        return hashlib.sha256(key.encode()).hexdigest()[:32]

    def place(self, document_id: str) -> Path:
        try:
            uuid.UUID(hex=document_id)
        except ValueError:
            raise DocumentError("Document not found: no such document_id") from None
        return self.folder / document_id

    def create(self, owner: str, name: str, data: bytes) -> Job:
        job = Job(uuid.uuid4().hex.upper(), secrets.token_hex(32).upper(), self.owner_of(owner), name)
        self.place(job.document_id).mkdir(parents=True)
        write(self.place(job.document_id) / "source", data)
        self.update(job)
        return job

    def get(self, owner: str, document_id: str, document_key: str) -> Job:
        try:
            job = Job(**json.loads((self.place(document_id) / "job.json").read_text()))
        except FileNotFoundError:
            raise DocumentError("Document not found: no such document_id") from None
        if job.owner != self.owner_of(owner) or not secrets.compare_digest(job.document_key, document_key):
            raise DocumentError("Document not found: no such document_id with that document_key")
        return job

    def update(self, job: Job) -> None:
        write(self.place(job.document_id) / "job.json", json.dumps(dataclasses.asdict(job)).encode())

    def source(self, job: Job) -> bytes:
        return (self.place(job.document_id) / "source").read_bytes()

    def finish(self, job: Job, result: bytes, billed_characters: int) -> None:
        place = self.place(job.document_id)
        write(place / "result", result)
        (place / "source").unlink(missing_ok=True)
        self.update(dataclasses.replace(job, status="done", seconds_remaining=None,
                                        billed_characters=billed_characters))

    def take_result(self, owner: str, document_id: str, document_key: str) -> tuple[Job, bytes]:
        job = self.get(owner, document_id, document_key)
        taken = self.place(document_id) / f"result.{uuid.uuid4().hex}.taken"
        try:
            os.rename(self.place(document_id) / "result", taken)  # one download wins
        except FileNotFoundError:
            if job.status == "done":
                raise DocumentError("The document's result was already downloaded") from None
            raise DocumentError(f"The document is not translated: its status is {job.status}") from None
        data = taken.read_bytes()
        taken.unlink()
        return job, data


def write(path: Path, data: bytes) -> None:
    partial = path.with_name(f"{path.name}.{uuid.uuid4().hex}.partial")
    partial.write_bytes(data)
    os.replace(partial, path)
