"""The model cache: model folders that `python -m model.pull` and the service's start made from named models.

    CACHE/
        argos-en-de/                  one ready model folder per entry (config.json, graphs, tokenizer, pulled.json)
        Helsinki-NLP--opus-mt-en-de/
        .<name>.partial/               a folder being made; renamed into place once complete, removed on failure
        .downloads/                    Argos packages, resumed from their .part file
        .hub/                          huggingface_hub's own cache (resumes, ETags, snapshots)
        .lock                          held while an entry is made: replicas sharing the volume wait for each other
        .progress.json                 what is being fetched or converted now (the service's /health shows it)

A folder without a leading dot is complete: it is renamed into place only once converted and exported. Torch-free,
so that the service finds cached models without loading the converters.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock

from core.folder import is_model_folder
from model.out_folder import replacing

PULLED_FILE = "pulled.json"  # beside config.json: the entry, where it came from, its licence, when
PROGRESS_FILE = ".progress.json"
GIB = 2**30


class NoSpace(Exception):
    """Too little free disk for an entry: the message names it and what to do."""


class ModelCache:
    def __init__(self, root: Path):
        self.root = Path(root)

    def folder(self, name: str) -> Path:
        return self.root / name

    def ready(self, name: str) -> Path | None:
        """The model folder of an entry's name, if it is complete."""
        folder = self.folder(name)
        return folder if is_model_folder(folder) else None

    def models(self) -> list[Path]:
        """Every complete model folder in the cache."""
        if not self.root.is_dir():
            return []
        return sorted(f for f in self.root.iterdir() if not f.name.startswith(".") and is_model_folder(f))

    def pulled(self, folder: Path) -> dict:
        """What pulled.json says of a cached folder (empty for a folder without one)."""
        path = folder / PULLED_FILE
        return json.loads(path.read_text()) if path.is_file() else {}

    def remove(self, name: str) -> bool:
        """Delete a cached model folder; False if there is none of that name."""
        folder = self.folder(name)
        if name.startswith(".") or not folder.is_dir():
            return False
        with self.lock():
            shutil.rmtree(folder)
        return True

    @contextmanager
    def lock(self) -> Iterator[None]:
        """Held while an entry is made, so that replicas sharing the cache make each entry once."""
        self.root.mkdir(parents=True, exist_ok=True)
        with FileLock(self.root / ".lock"):
            yield

    @contextmanager
    def building(self, name: str) -> Iterator[Path]:
        """A fresh folder to make the entry in, renamed to folder(name) when the block ends without an error and
        removed when it raises: an interrupted start leaves no folder that a later one takes for a model."""
        with replacing(self.folder(name), force=True) as partial:
            yield partial

    def check_space(self, entry: str, needed: int) -> None:
        """Raise NoSpace, naming the entry and what to do, when the cache's disk has less than `needed` bytes free."""
        self.root.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(self.root).free
        if free < needed:
            raise NoSpace(f"{entry}: needs about {needed / GIB:.1f} GiB in {self.root}, which has {free / GIB:.1f} "
                          "GiB free: free some space (python -m model.pull --remove NAME) or point "
                          "TRANSLATOR_MODEL_CACHE at a larger disk")

    def report(self, entry: str, stage: str, done: int = 0, total: int = 0) -> None:
        """Write what is being made now into PROGRESS_FILE (written whole, then renamed)."""
        self.root.mkdir(parents=True, exist_ok=True)
        values = {"entry": entry, "stage": stage, "done": done, "total": total, "time": time.time()}
        tmp = self.root / f"{PROGRESS_FILE}.{os.getpid()}.{threading.get_ident()}"
        tmp.write_text(json.dumps(values))
        tmp.replace(self.root / PROGRESS_FILE)

    def progress(self) -> dict | None:
        """PROGRESS_FILE's last report, if a pull is under way."""
        try:
            return json.loads((self.root / PROGRESS_FILE).read_text())
        except (OSError, ValueError):
            return None

    def done(self) -> None:
        """No pull is under way any more."""
        (self.root / PROGRESS_FILE).unlink(missing_ok=True)
