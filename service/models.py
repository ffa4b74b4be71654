"""The model folders the service serves, in order: TRANSLATOR_MODELS (pulled into TRANSLATOR_MODEL_CACHE where
missing: model.pull), then TRANSLATOR_MODEL_DIR's folders by name. Where two folders translate one pair, the first
serves it, and one log line names both.
"""

from __future__ import annotations

import logging
from pathlib import Path

from core.folder import FolderConfig, model_folders, pair_name
from model.cache import ModelCache
from model.pull import PullError, pull_all
from service.settings import Settings

log = logging.getLogger(__name__)
SHOWN_PAIRS = 6  # of a log line's pairs


def exported_precisions(settings: Settings) -> list[str]:
    """The graphs a pulled model gets: fp32 and int8, and the precision served where it is another."""
    return list(dict.fromkeys(["fp32", "int8", settings.precision]))


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
    """Every model folder to serve; a TRANSLATOR_MODELS entry that cannot be made is logged and left out, or raises
    model.pull.PullError with TRANSLATOR_MODELS_REQUIRED."""
    try:
        named = pull_all(settings.models, ModelCache(settings.model_cache), exported_precisions(settings),
                         settings.argos_index, settings.models_required)
    except PullError as e:
        log.critical("%s (TRANSLATOR_MODELS_REQUIRED: the service does not start)", e)
        raise
    try:
        local = model_folders(settings.model_dir)
    except FileNotFoundError:
        if not named:
            raise
        local = []
    return first_of_each_pair(named + local)
