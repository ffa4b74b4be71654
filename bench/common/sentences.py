"""The sentences a benchmark translates, and how a run cuts them into batches."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

from core.corpus import TEST_SPLIT, data_file, multi30k_dir, read_lines

T = TypeVar("T")

# Short English sentences, for measurements that need no test set (and the soak when Multi30k is not there).
SENTENCES = [
    "A man is riding a bicycle.", "Two dogs are running on the green grass.", "The cat sleeps on the sofa.",
    "A girl in a red dress is dancing.", "People are fixing the roof of a house.", "She drinks hot tea in the kitchen.",
    "Five people stand in the snow.", "A woman with a large purse is walking by a gate.",
    "The children play outside with a ball.", "Where is the station?", "My brother is very tall.",
    "A boy jumps into the lake.", "An old man reads a newspaper on a bench.", "We are reading a book together.",
    "A dog catches a red frisbee.", "Workers build a wall of bricks.",
]  # fmt: skip


def multi30k_sentences(directory: Path | None = None, split: str = TEST_SPLIT, lang: str = "en") -> list[str]:
    """One side of a Multi30k split (from MULTI30K_DIR unless directory is given), empty lines left out."""
    return [line for line in read_lines(data_file(directory or multi30k_dir(), split, lang)) if line.strip()]


def run_sentences(batch_size: int, short_run: int, run: int, available: int) -> int:
    """How many test sentences a run translates: fewer at batch size 1."""
    return min(available, short_run if batch_size == 1 else run)


def batches(items: list[T], batch_size: int) -> list[list[T]]:
    """The items cut into batches of batch_size as they come (the last one may be smaller)."""
    return [items[start : start + batch_size] for start in range(0, len(items), batch_size)]
