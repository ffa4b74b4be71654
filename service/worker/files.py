"""Files translated by /translate_file, kept for /download_file in the data folder, which every HTTP worker and
replica shares, with their owners in the store: the download may reach another worker or replica than the upload
did, and a restart keeps them.

A file is kept as TOKEN/NAME: TOKEN a random 32-digit hex, NAME the uploaded file's own name, made safe first
(its last path part; at most MAX_NAME_BYTES bytes of UTF-8, as file systems allow; no control characters; a suffix
of FORMATS). A download's token and name are checked the same way before any file system call.
"""

from __future__ import annotations

import re
import shutil
import unicodedata
from datetime import UTC, datetime, timedelta
from pathlib import Path, PurePath
from urllib.parse import quote
from uuid import uuid4

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from service.store import Store
from service.store.tables import KeptFile
from service.worker.documents import FORMATS, MEDIA_TYPES

EXPIRED_BATCH = 64  # expired files forgotten by one put
MAX_NAME_BYTES = 255  # a file name's length on Linux file systems (NAME_MAX)
TOKEN = re.compile(r"[0-9a-f]{32}")
PATH_SEPARATORS = re.compile(r"[/\\]")


def name_problem(name: str) -> str | None:
    """What makes `name` unfit to keep a file under, or None."""
    if len(name) > MAX_NAME_BYTES or len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        return f"a file name is at most {MAX_NAME_BYTES} bytes long (in UTF-8)"
    if any(unicodedata.category(char) in ("Cc", "Cs") for char in name):
        return "a file name may not hold control characters"
    if name in ("", ".", "..") or PATH_SEPARATORS.search(name):
        return "a file name is one path part"
    if PurePath(name).suffix.lower() not in FORMATS:
        return f"supported files are {', '.join(FORMATS)}"
    return None


def uploaded_name(filename: str | None) -> str:
    """The name an uploaded file is kept under: the last path part of the name its client gave (browsers on Windows
    may send C:\\Users\\...\\story.txt), "file.txt" if none; ValueError saying what is wrong with it."""
    name = PATH_SEPARATORS.split(filename or "file.txt")[-1]
    if problem := name_problem(name):
        raise ValueError(problem)
    return name


def media_type(name: str) -> str:
    """The Content-Type of a kept file."""
    return MEDIA_TYPES[PurePath(name).suffix.lower()]


def content_disposition(name: str) -> str:
    """An attachment named `name` (RFC 6266): an ASCII name for old clients (other characters, quotes and
    backslashes as "_"), and the name itself in UTF-8 (RFC 5987's filename*)."""
    fallback = "".join(char if " " <= char <= "~" and char not in '"\\' else "_" for char in name)
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(name, safe='')}"


class TranslatedFiles:
    """Translated files in the data folder (FOLDER/TOKEN/NAME), each with its owner in the store (a key, or an
    address when keys are off), so that every worker and replica sharing both serves it, and a restart keeps it. A
    file is served for `retention_s`; an owner's files beyond `budget` bytes go, oldest first, never another's."""

    def __init__(self, folder: Path, store: Store, retention_s: float, budget: int):
        self.folder = folder
        self.store = store
        self.retention = timedelta(seconds=retention_s)
        self.budget = budget

    def put(self, owner: str, name: str, content: bytes) -> str:
        """Keep `content` as `name` (an uploaded_name()) for `owner`; returns its token. StoreUnavailable (and
        nothing kept) when the store is."""
        token, created = uuid4().hex, datetime.now(UTC)
        try:
            (self.folder / token).mkdir(parents=True)
            (self.folder / token / name).write_bytes(content)
            with self.store.transaction() as session:
                session.add(KeptFile(token=token, name=name, owner=owner, size=len(content), created=created,
                                     expires=created + self.retention))
                session.flush()
                gone = self.evict(session, owner, created, token)
        except BaseException:
            shutil.rmtree(self.folder / token, ignore_errors=True)
            raise
        for old in gone:
            shutil.rmtree(self.folder / old, ignore_errors=True)  # another worker may be removing it too
        return token

    def evict(self, session: Session, owner: str, now: datetime, newest: str) -> list[str]:
        """Forget the files past their retention (a batch of anyone's) and the owner's oldest beyond the budget (the
        newest stays, whatever its size); their tokens."""
        gone = list(session.scalars(select(KeptFile.token).where(KeptFile.expires <= now).limit(EXPIRED_BATCH)))
        total = session.scalar(select(func.sum(KeptFile.size)).where(KeptFile.owner == owner)) or 0
        oldest_first = select(KeptFile.token, KeptFile.size).where(KeptFile.owner == owner, KeptFile.token != newest)
        for token, size in session.execute(oldest_first.order_by(KeptFile.created, KeptFile.token)) \
                if total > self.budget else ():
            if total <= self.budget:
                break
            gone.append(token)
            total -= size
        if gone:
            session.execute(delete(KeptFile).where(KeptFile.token.in_(gone)))
        return gone

    def get(self, token: str, name: str, owner: str | None = None) -> bytes | None:
        """The file kept as token/name (for `owner` unless None), or None: never kept, expired, another's, or a
        token or name that no file is kept under (checked before the store or the file system is asked)."""
        if not TOKEN.fullmatch(token) or name_problem(name):
            return None
        with self.store.transaction() as session:
            row = session.get(KeptFile, token)
        if row is None or row.name != name or row.expires <= datetime.now(UTC) or owner not in (None, row.owner):
            return None
        try:
            return (self.folder / token / name).read_bytes()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None
