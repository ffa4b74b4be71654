"""Parallel text: reading `{split}.{lang}[.gz]` files, the Multi30k test set, and batching pairs by token count."""

from __future__ import annotations

import gzip
import os
import random
from dataclasses import dataclass
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


@dataclass
class Example:
    src: list[int]  # source ids ending with </s>
    tgt: list[int]  # target ids without <s> or </s>


def token_batches(examples: list[Example], max_tokens: int, seed: int) -> list[list[int]]:
    """Indices of examples grouped into batches of at most `max_tokens` (padded source + target tokens).

    Examples are sorted by length (ties broken at random) so that a batch holds similar lengths and
    little padding, then the batches themselves are shuffled. The same seed gives the same batches.
    """
    rng = random.Random(seed)
    order = sorted(range(len(examples)), key=lambda i: (len(examples[i].src), len(examples[i].tgt), rng.random()))
    batches, batch, longest = [], [], 0
    for i in order:
        size = max(len(examples[i].src), len(examples[i].tgt) + 1)
        if batch and max(longest, size) * (len(batch) + 1) * 2 > max_tokens:
            batches.append(batch)
            batch, longest = [], 0
        batch.append(i)
        longest = max(longest, size)
    if batch:
        batches.append(batch)
    rng.shuffle(batches)
    return batches
