"""Parallel text on disk: line-aligned `{split}.{lang}[.gz]` files of a corpus folder, and the Multi30k test set.

Neither PyTorch nor ONNX Runtime: training (model/), scoring (quality/), the tests and the benchmarks all read
corpora through it."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

TEST_SPLIT = "test_2016_flickr"  # Multi30k's test set


def multi30k_dir() -> Path:
    """The Multi30k folder: MULTI30K_DIR, else shared/data/multi30k beside the repository."""
    beside_repo = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"
    return Path(os.environ.get("MULTI30K_DIR", beside_repo))


def data_file(directory: Path, split: str, lang: str) -> Path:
    """The file of one split and language in a corpus folder, gzipped or not."""
    for name in (f"{split}.{lang}.gz", f"{split}.{lang}"):
        if (path := Path(directory) / name).exists():
            return path
    raise FileNotFoundError(f"no {split}.{lang} or {split}.{lang}.gz in {directory}")


def read_lines(path: Path) -> list[str]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def read_aligned(directory: Path, split: str, src: str, tgt: str) -> tuple[list[str], list[str]]:
    """The source and target lines of one split, line-aligned."""
    sources = read_lines(data_file(directory, split, src))
    targets = read_lines(data_file(directory, split, tgt))
    if len(sources) != len(targets):
        raise ValueError(f"{directory}/{split}: {len(sources)} {src} lines but {len(targets)} {tgt} lines")
    return sources, targets


def read_pairs(directory: Path, split: str, src: str, tgt: str) -> list[tuple[str, str]]:
    """Line-aligned (source, target) pairs of one split; pairs with an empty side are left out."""
    return [(s, t) for s, t in zip(*read_aligned(directory, split, src, tgt)) if s.strip() and t.strip()]


def load_test_set(split: str = TEST_SPLIT, src: str = "en", tgt: str = "de") -> tuple[list[str], list[str]]:
    """Source sentences and reference translations of a Multi30k split (from multi30k_dir()), line-aligned."""
    return read_aligned(multi30k_dir(), split, src, tgt)
