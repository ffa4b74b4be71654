"""Files translated by /translate_file, kept for /download_file in a folder that every HTTP worker shares: the
download may reach another worker than the upload did.

A file is kept as TOKEN/NAME: TOKEN a random 32-digit hex, NAME the uploaded file's own name, made safe first
(its last path part; at most MAX_NAME_BYTES bytes of UTF-8, as file systems allow; no control characters; a suffix
of FORMATS). A download's token and name are checked the same way before any file system call.
"""

from __future__ import annotations

import re
import shutil
import unicodedata
from pathlib import Path, PurePath
from urllib.parse import quote
from uuid import uuid4

from service.worker.documents import FORMATS, MEDIA_TYPES

KEPT_FILES = 256  # the newest are kept
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
    def __init__(self, folder: Path):
        self.folder = folder
        self.folder.mkdir(parents=True, exist_ok=True)

    def put(self, name: str, content: bytes) -> str:
        """Keep `content` as `name` (an uploaded_name()); returns its token. The oldest files beyond KEPT_FILES go."""
        token = uuid4().hex
        try:
            (self.folder / token).mkdir()
            (self.folder / token / name).write_bytes(content)
        except OSError:
            shutil.rmtree(self.folder / token, ignore_errors=True)
            raise
        kept = sorted(self.folder.iterdir(), key=modified, reverse=True)
        for old in kept[KEPT_FILES:]:
            shutil.rmtree(old, ignore_errors=True)  # another worker may be removing it too
        return token

    def get(self, token: str, name: str) -> bytes | None:
        """The file kept as token/name, or None: never kept, gone, or a token or name that no file is kept under
        (checked before the file system is asked)."""
        if not TOKEN.fullmatch(token) or name_problem(name):
            return None
        try:
            return (self.folder / token / name).read_bytes()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None


def modified(path: Path) -> float:
    try:
        return path.stat().st_mtime_ns
    except FileNotFoundError:
        return 0
