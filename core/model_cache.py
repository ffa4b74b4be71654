"""The model cache: model folders that `python -m model.pull` and the service's start made from named models.

    CACHE/
        argos-en-de/                  one ready model folder per entry (config.json, graphs, tokenizer, pulled.json)
        Helsinki-NLP--opus-mt-en-de/
        .<name>.partial/               a folder being made; renamed into place once complete, removed on failure
        .downloads/                    Argos packages, resumed from their .part file
        .hub/                          huggingface_hub's own cache (resumes, ETags, snapshots)
        .lock                          held while an entry is made: replicas sharing the volume wait for each other
        .progress.json                 what is being fetched or converted now (the service's /health shows it)

A folder without a leading dot is complete: it is renamed into place only once converted and exported
(replacing). An entry (Entry: what TRANSLATOR_MODELS and `python -m model.pull` name) has one folder. Torch-free,
so that the service finds cached models without loading the converters.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from filelock import FileLock

from core.folder import is_model_folder

PULLED_FILE = "pulled.json"  # beside config.json: the entry, where it came from, its licence, when
PROGRESS_FILE = ".progress.json"
GIB = 2**30
# an entry: an Argos Translate pair (argos:en-de, en-de, zt-en), or a hub repository[@revision][:languages]
PAIR = re.compile(r"(?:argos:)?([a-z]{2,3}(?:-[A-Z][a-z]{3})?|z[th])-([a-z]{2,3}(?:-[A-Z][a-z]{3})?|z[th])")
REPO = re.compile(r"([\w.-]+/[\w.-]+)(?:@([\w./-]+?))?(?::([\w,-]+))?")
HOW = ("name an Argos Translate pair (en-de) or a Hugging Face repository (Helsinki-NLP/opus-mt-en-de, "
       "facebook/nllb-200-distilled-600M:en,de,fr)")


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
        try:
            tmp.write_text(json.dumps(values))
            tmp.replace(self.root / PROGRESS_FILE)
        finally:  # a full disk leaves no half-written file
            tmp.unlink(missing_ok=True)

    def progress(self) -> dict | None:
        """PROGRESS_FILE's last report, if a pull is under way."""
        try:
            return json.loads((self.root / PROGRESS_FILE).read_text())
        except (OSError, ValueError):
            return None

    def done(self) -> None:
        """No pull is under way any more."""
        (self.root / PROGRESS_FILE).unlink(missing_ok=True)


@contextmanager
def replacing(out: Path, force: bool) -> Iterator[Path]:
    """A fresh folder beside `out` (.NAME.partial) to write the model in; it takes the place of `out` when the block
    ends without an error and is removed when it raises, so that no half-written folder is left to pass for a model.
    A folder `out` that holds files already (another model) is refused (ValueError) unless `force`."""
    if out.is_dir() and any(out.iterdir()) and not force:
        names = sorted(p.name for p in out.iterdir())
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        raise ValueError(f"{out} holds another model ({shown}): give another --out, or --force to replace it")
    partial = out.with_name(f".{out.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    try:
        yield partial
        shutil.rmtree(out, ignore_errors=True)
        partial.rename(out)
    finally:
        shutil.rmtree(partial, ignore_errors=True)


class PullError(Exception):
    """An entry that could not be made: one line naming it and what to do."""


@dataclass(frozen=True)
class Entry:
    """One named model."""

    text: str  # as it was named
    kind: str  # "argos" or "hub"
    source: str = ""  # an Argos package's pair
    target: str = ""
    repo: str = ""  # a hub model's repository, revision and languages
    revision: str | None = None
    languages: list[str] = field(default_factory=list)

    @classmethod
    def parse(cls, text: str) -> Entry:
        text = text.strip()
        if match := PAIR.fullmatch(text):
            return cls(text, "argos", source=match[1], target=match[2])
        if match := REPO.fullmatch(text):
            languages = [code for code in (match[3] or "").split(",") if code]
            return cls(text, "hub", repo=match[1], revision=match[2], languages=languages)
        raise PullError(f"{text}: not a model name: {HOW}")

    @property
    def name(self) -> str:
        """Its folder's name in the cache: argos-en-de, Helsinki-NLP--opus-mt-en-de, ...@rev, ...--en-de-fr."""
        if self.kind == "argos":
            return f"argos-{self.source}-{self.target}"
        name = self.repo.replace("/", "--") + (f"@{self.revision.replace('/', '_')}" if self.revision else "")
        return name + ("--" + "-".join(self.languages) if self.languages else "")
