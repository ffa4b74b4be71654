"""The model folders the service serves, in order: TRANSLATOR_MODELS (from TRANSLATOR_MODEL_CACHE; those missing
made first by `python -m model.pull` in a child process, whose progress and errors go to this log), then
TRANSLATOR_MODEL_DIR's folders by name. Where two folders translate one pair, the first serves it, and one log line
names both.
"""

from __future__ import annotations

import importlib.util
import logging
import subprocess
import sys
from pathlib import Path

from core.folder import FolderConfig, model_folders, pair_name
from core.model_cache import Entry, ModelCache, PullError
from service.settings import Settings

log = logging.getLogger(__name__)
SHOWN_PAIRS = 6  # of a log line's pairs
CONVERTERS = ["torch", "huggingface_hub"]  # what model.pull needs beyond serving (pyproject's pull extra)


def exported_precisions(settings: Settings) -> list[str]:
    """The graphs a pulled model gets: fp32 and int8, and the precision served where it is another."""
    return list(dict.fromkeys(["fp32", "int8", settings.precision]))


def pull(settings: Settings, names: list[str]) -> None:
    """`python -m model.pull` of the entries not in the cache (it loads the converters: not in this process); where
    the converters are not installed (the serving image), one line for each entry saying where to pull it."""
    if missing := [name for name in CONVERTERS if importlib.util.find_spec(name) is None]:
        for name in names:
            log.error("%s: not in the model cache %s, and this installation cannot make it (no %s): pull it where "
                      "'.[pull]' is installed, into the same TRANSLATOR_MODEL_CACHE (python -m model.pull; docker "
                      "compose: the models service does, before the translator starts)", name, settings.model_cache,
                      ", ".join(missing))
        return
    command = [sys.executable, "-m", "model.pull", *names, "--cache", str(settings.model_cache), "--index",
               settings.argos_index, "--variants", *exported_precisions(settings)]
    subprocess.run(command, check=False)


def named_folders(settings: Settings) -> list[Path]:
    """The model folders of TRANSLATOR_MODELS, pulled where missing; those that could not be made are logged and
    left out, or raise PullError with TRANSLATOR_MODELS_REQUIRED."""
    cache = ModelCache(settings.model_cache)
    entries: dict[str, Entry | None] = {}
    for text in settings.models:
        try:
            entries[text] = Entry.parse(text)
        except PullError as e:
            log.error("%s", e)
            entries[text] = None
    if missing := [text for text, entry in entries.items() if entry and not cache.ready(entry.name)]:
        pull(settings, missing)
    folders = {text: entry and cache.ready(entry.name) for text, entry in entries.items()}
    if failed := [text for text, folder in folders.items() if folder is None]:
        message = f"TRANSLATOR_MODELS: {', '.join(failed)} not served (the lines above say why)"
        if settings.models_required:
            log.critical("%s; TRANSLATOR_MODELS_REQUIRED: the service does not start", message)
            raise PullError(message)
        log.error("%s; the others are", message)
    return [folder for folder in folders.values() if folder]


def first_of_each_pair(folders: list[Path]) -> list[Path]:
    """The folders in order, less those whose every pair an earlier one translates; each folder that a pair is
    taken from is logged, with the folder that serves it."""
    served: dict[str, Path] = {}
    kept = []
    for folder in folders:
        names = [pair_name(*pair) for pair in FolderConfig.load(folder).pairs]
        taken: dict[Path, list[str]] = {}
        for name in names:
            if name in served:
                taken.setdefault(served[name], []).append(name)
        for other, pairs in taken.items():
            shown = ", ".join(pairs[:SHOWN_PAIRS]) + (f" and {len(pairs) - SHOWN_PAIRS} more" * (len(pairs) >
                                                                                                SHOWN_PAIRS))
            log.warning("%s serves %s, which %s also translates: the first named serves a pair (TRANSLATOR_MODELS in "
                        "order, then TRANSLATOR_MODEL_DIR's folders by name)", other, shown, folder)
        if len(taken) and sum(map(len, taken.values())) == len(names):
            continue
        served |= {name: folder for name in names if name not in served}
        kept.append(folder)
    return kept


def served_folders(settings: Settings) -> list[Path]:
    """Every model folder to serve (see the module's docstring)."""
    named = named_folders(settings)
    try:
        local = model_folders(settings.model_dir)
    except FileNotFoundError:
        if not named:
            raise
        local = []
    return first_of_each_pair(named + local)
