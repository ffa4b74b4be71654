"""Training examples: a sentence pair's ids, and batching examples by token count (the files: core.corpus)."""

from __future__ import annotations

import random
from dataclasses import dataclass


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
