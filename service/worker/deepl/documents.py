"""DeepL's document jobs: each job's state in the store (table document_jobs), which every HTTP worker and replica
shares, and its files in the data folder (TRANSLATOR_DATA_DIR/documents/ID/): `source`, the upload, kept until the
job is done, and `result`, the translation, kept until it is downloaded once. Every file is written under a temporary
name and renamed, so nothing half-written is read. A job that ended is forgotten, its files with it, once
TRANSLATOR_FILE_RETENTION_S has passed since its upload.

A job is translated by one worker at a time: the one that holds its lease (`holder`, until `lease_expires`). The
worker that takes the upload holds it first and renews it while it translates (service.worker.deepl.runner); when
that worker stops, it lets its jobs go, and when it dies, their leases run out: either way another worker, of this
instance or of another, or of this one once restarted, claims each job (one UPDATE whose WHERE holds only while the
lease has run out, so that exactly one claimant wins) and translates it again from its upload.

The methods block on the store and the disk: their callers run them in a thread (asyncio.to_thread).
"""

from __future__ import annotations

import os
import secrets
import shutil
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import delete, or_, select, update
from sqlalchemy.orm import Session

from service.store import Store
from service.store.keys import Limits, digest
from service.store.tables import ApiKey, DocumentJob
from service.worker.access import Client
from service.worker.errors import RequestError

UNFINISHED, ENDED = ("queued", "translating"), ("done", "error")
CLAIMS_AT_ONCE = 8  # jobs one worker claims in one look
SWEPT_AT_ONCE = 64  # ended jobs one worker forgets in one look


class DocumentError(RequestError):
    """An unknown or foreign document, a wrong document_key, a result asked for twice: DeepL's 400, in words."""


NOT_FOUND = "Document not found: no such document_id with that document_key"


@dataclass(frozen=True)
class Job:
    """A job as the store has it (its document_key is kept as its hash alone)."""

    document_id: str
    owner: str  # whose documents it is among (service.worker.dependencies.glossary_owner)
    key_id: int | None  # the API key it was uploaded with
    name: str  # the uploaded file's name
    source_lang: str  # served codes ("auto": detected)
    target_lang: str
    glossary_id: str | None
    status: str  # queued, translating, done, error
    seconds_remaining: int | None
    billed_characters: int | None
    error_message: str | None

    @classmethod
    def of(cls, row: DocumentJob) -> Job:
        return cls(row.id, row.owner, row.key_id, row.name, row.source_lang, row.target_lang, row.glossary_id,
                   row.status, row.seconds_remaining, row.billed_characters, row.error_message)


class DocumentJobs:
    """Document jobs in the store and their files in `folder`; this worker is `holder` of the jobs it translates,
    for `lease_s` seconds at a time (see the module's docstring)."""

    def __init__(self, folder: Path, store: Store, lease_s: float, retention_s: float, holder: str | None = None):
        self.folder = folder
        self.store = store
        self.lease = timedelta(seconds=lease_s)
        self.retention = timedelta(seconds=retention_s)
        self.holder = holder or f"{os.getpid()}:{uuid.uuid4().hex}"

    def place(self, document_id: str) -> Path:
        return self.folder / document_id

    def create(self, owner: str, key_id: int | None, name: str, source: str, target: str, data: bytes,
               glossary_id: str | None = None) -> tuple[Job, str]:
        """A job of the upload `data` (from `source` into `target`, with the terms of the glossary if one is
        named), held by this worker; and its document_key (never stored). Nothing is left when it fails."""
        document_id, document_key, now = uuid.uuid4().hex.upper(), secrets.token_hex(32).upper(), datetime.now(UTC)
        row = DocumentJob(id=document_id, key_digest=digest(document_key), owner=owner, key_id=key_id, name=name,
                          source_lang=source, target_lang=target, glossary_id=glossary_id, status="queued",
                          created=now, holder=self.holder,
                          lease_expires=now + self.lease)
        try:
            self.place(document_id).mkdir(parents=True)
            write(self.place(document_id) / "source", data)
            with self.store.transaction() as session:
                session.add(row)
        except BaseException:
            shutil.rmtree(self.place(document_id), ignore_errors=True)
            raise
        return Job.of(row), document_key

    def get(self, owner: str, document_id: str, document_key: str) -> Job:
        """The job, or DocumentError (unknown, another owner's, a wrong key)."""
        with self.store.transaction() as session:
            return Job.of(found(session, owner, document_id, document_key))

    def source(self, job: Job) -> bytes:
        return (self.place(job.document_id) / "source").read_bytes()

    def client(self, job: Job) -> Client:
        """Whose usage the job's characters count in: its key, with its limits as they are now."""
        if job.key_id is None:
            return Client(job.owner)
        with self.store.transaction() as session:
            key = session.get(ApiKey, job.key_id)
        limits = Limits(key.req_limit, key.daily_req_limit, key.monthly_char_limit) if key else Limits()
        return Client(job.owner, job.key_id, limits)

    def translating(self, job: Job) -> bool:
        """The job is translating, with its lease renewed; False when this worker no longer holds it."""
        return self.held(job, status="translating", seconds_remaining=None)

    def bill(self, job: Job, characters: int) -> bool:
        """Record the job's characters; True the first time (they are counted in its key's usage then, and not again
        when the job is taken up anew)."""
        return self.held(job, DocumentJob.billed_characters.is_(None), billed_characters=characters)

    def finish(self, job: Job, result: bytes) -> bool:
        """Keep the result: the job is done and its upload goes; False when this worker no longer holds it."""
        place = self.place(job.document_id)
        partial = place / f"result.{uuid.uuid4().hex}.partial"
        partial.write_bytes(result)
        try:
            with self.store.transaction() as session:
                if done := self.hold(session, job, status="done", seconds_remaining=None, holder=None,
                                     lease_expires=None):
                    os.replace(partial, place / "result")  # in place before the job is seen done
        finally:
            partial.unlink(missing_ok=True)
        if done:
            (place / "source").unlink(missing_ok=True)
        return done

    def fail(self, job: Job, message: str) -> None:
        """The job ends in error (its upload goes)."""
        if self.held(job, status="error", seconds_remaining=None, error_message=message, holder=None,
                     lease_expires=None):
            (self.place(job.document_id) / "source").unlink(missing_ok=True)

    def held(self, job: Job, *where, **values) -> bool:
        """Set `values` on the job (renewing its lease) if this worker holds it and `where` holds."""
        with self.store.transaction() as session:
            return self.hold(session, job, *where, **values)

    def hold(self, session: Session, job: Job, *where, **values) -> bool:
        """held() in the caller's transaction."""
        statement = (update(DocumentJob).where(DocumentJob.id == job.document_id, DocumentJob.holder == self.holder,
                                               *where)
                     .values(**{"lease_expires": datetime.now(UTC) + self.lease, **values}))
        return session.execute(statement).rowcount == 1

    def renew(self, remaining: dict[str, int | None]) -> set[str]:
        """Renew the leases of this worker's jobs, with their seconds_remaining (by id, of those translating); the
        ids of the jobs it still holds."""
        lease_expires = datetime.now(UTC) + self.lease
        with self.store.transaction() as session:
            for document_id, seconds in remaining.items():
                session.execute(update(DocumentJob).where(DocumentJob.id == document_id,
                                                          DocumentJob.holder == self.holder)
                                .values(lease_expires=lease_expires, seconds_remaining=seconds))
            held = select(DocumentJob.id).where(DocumentJob.holder == self.holder,
                                                DocumentJob.status.in_(UNFINISHED))
            return set(session.scalars(held))

    def release(self, document_ids: list[str]) -> None:
        """Let this worker's jobs go (it stops): queued again, for any worker to claim at once."""
        if not document_ids:
            return
        with self.store.transaction() as session:
            session.execute(update(DocumentJob).where(DocumentJob.id.in_(document_ids),
                                                      DocumentJob.holder == self.holder)
                            .values(status="queued", seconds_remaining=None, holder=None, lease_expires=None))

    def claim(self) -> list[Job]:
        """Unfinished jobs that no worker holds (let go, or their lease ran out), now held by this one: each claimed
        by one UPDATE that holds only while it is still free, so that of workers claiming at once one wins."""
        now = datetime.now(UTC)
        free = or_(DocumentJob.lease_expires.is_(None), DocumentJob.lease_expires < now)
        with self.store.transaction() as session:
            candidates = list(session.scalars(select(DocumentJob.id).where(DocumentJob.status.in_(UNFINISHED), free)
                                              .order_by(DocumentJob.created).limit(CLAIMS_AT_ONCE)))
        claimed = []
        for document_id in candidates:
            with self.store.transaction() as session:
                taken = session.execute(update(DocumentJob).where(DocumentJob.id == document_id,
                                                                  DocumentJob.status.in_(UNFINISHED), free)
                                        .values(holder=self.holder, lease_expires=now + self.lease))
                if taken.rowcount == 1:
                    claimed.append(Job.of(session.get(DocumentJob, document_id)))
        return claimed

    def sweep(self) -> None:
        """Forget a batch of the jobs that ended longer than the retention ago (by their creation), with their
        files: a result not downloaded by then is gone, as a translated file of /translate_file is."""
        cutoff = datetime.now(UTC) - self.retention
        with self.store.transaction() as session:
            ended = list(session.scalars(select(DocumentJob.id).where(DocumentJob.status.in_(ENDED),
                                                                      DocumentJob.created < cutoff)
                                         .limit(SWEPT_AT_ONCE)))
            session.execute(delete(DocumentJob).where(DocumentJob.id.in_(ended)))
        for document_id in ended:
            shutil.rmtree(self.place(document_id), ignore_errors=True)

    def take_result(self, owner: str, document_id: str, document_key: str) -> tuple[Job, bytes]:
        """The result, given once; DocumentError when it is not done or was already given."""
        with self.store.transaction() as session:
            job = Job.of(found(session, owner, document_id, document_key))
            first = session.execute(update(DocumentJob).where(DocumentJob.id == document_id,
                                                              DocumentJob.status == "done",
                                                              DocumentJob.downloaded.is_(None))
                                    .values(downloaded=datetime.now(UTC))).rowcount == 1
            if not first and job.status == "done":
                raise DocumentError("The document's result was already downloaded")
            if not first:
                raise DocumentError(f"The document is not translated: its status is {job.status}")
            data = (self.place(document_id) / "result").read_bytes()  # an error here rolls the download back
        shutil.rmtree(self.place(document_id), ignore_errors=True)
        return job, data


def found(session: Session, owner: str, document_id: str, document_key: str) -> DocumentJob:
    """The job's row if it is `owner`'s and `document_key` is its key, else DocumentError."""
    row = session.get(DocumentJob, document_id)
    if row is None or row.owner != owner or not secrets.compare_digest(row.key_digest, digest(document_key)):
        raise DocumentError(NOT_FOUND)
    return row


def write(path: Path, data: bytes) -> None:
    partial = path.with_name(f"{path.name}.{uuid.uuid4().hex}.partial")
    partial.write_bytes(data)
    os.replace(partial, path)
