"""Files translated by /translate_file, kept for /download_file in a folder that every HTTP worker shares: the
download may reach another worker than the upload did."""

from __future__ import annotations

import shutil
from pathlib import Path
from uuid import uuid4

KEPT_FILES = 256  # the newest are kept
FORMATS = {".txt": "text", ".html": "html", ".htm": "html"}  # the files taken, by suffix: the format they are read in


class TranslatedFiles:
    def __init__(self, folder: Path):
        self.folder = folder
        self.folder.mkdir(parents=True, exist_ok=True)

    def put(self, name: str, content: bytes) -> str:
        """Keep `content` as `name`; returns its token. The oldest files beyond KEPT_FILES go."""
        token = uuid4().hex
        (self.folder / token).mkdir()
        (self.folder / token / name).write_bytes(content)
        kept = sorted(self.folder.iterdir(), key=modified, reverse=True)
        for old in kept[KEPT_FILES:]:
            shutil.rmtree(old, ignore_errors=True)  # another worker may be removing it too
        return token

    def get(self, token: str, name: str) -> bytes | None:
        """The file kept as token/name, or None (never kept, gone, or a name that tries to leave the folder)."""
        path = self.folder / token / name
        if path.parent.parent != self.folder or path.name != name or not path.is_file():
            return None
        return path.read_bytes()


def modified(path: Path) -> float:
    try:
        return path.stat().st_mtime_ns
    except FileNotFoundError:
        return 0
