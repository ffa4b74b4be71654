"""The benchmark's test set: a Multi30k split, from MULTI30K_DIR (default: shared/data/multi30k beside the repo)."""

from __future__ import annotations

import os
from pathlib import Path

from model.data import data_file, read_lines

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SPLIT = "test_2016_flickr"


def multi30k_dir() -> Path:
    return Path(os.environ.get("MULTI30K_DIR", REPO.parent / "shared" / "data" / "multi30k"))


def load_test_set(split: str = DEFAULT_SPLIT, src: str = "en", tgt: str = "de") -> tuple[list[str], list[str]]:
    """Line-aligned source sentences and reference translations of one split."""
    directory = multi30k_dir()
    sources = read_lines(data_file(directory, split, src))
    references = read_lines(data_file(directory, split, tgt))
    if len(sources) != len(references):
        raise ValueError(f"{directory}/{split}: {len(sources)} {src} lines but {len(references)} {tgt} lines")
    return sources, references
