"""Training-time augmentation, so that robustness is learned by the model rather than patched in the server.

casing:  a share of the pairs again in UPPER, lower or Title case on both sides, so that "A MAN IS RIDING" is
         translated as well as "A man is riding".
numbers: pairs whose source and target hold the same digit runs, again with other random numbers in their
         place, so that the model learns to copy digits (years, times, prices) rather than to guess them.
"""

from __future__ import annotations

import random
import re

DIGITS = re.compile(r"\d+")
CASINGS = (str.upper, str.lower, str.title)


def casing_variants(pairs: list[tuple[str, str]], share: float, seed: int) -> list[tuple[str, str]]:
    """About `share` of the pairs, each once more with one casing applied to source and target alike."""
    rng = random.Random(seed)
    variants = []
    for src, tgt in pairs:
        if rng.random() < share:
            case = rng.choice(CASINGS)
            variants.append((case(src), case(tgt)))
    return variants


def random_number(rng: random.Random, like: str) -> str:
    """A number of about the same size as `like` (1 to 4 digits, no leading zero unless `like` has one)."""
    if like.startswith("0") and len(like) > 1:  # "05" in "10:05": keep the width
        return f"{rng.randrange(10 ** len(like)):0{len(like)}d}"
    width = max(1, min(4, len(like) + rng.choice((-1, 0, 0, 1))))
    return str(rng.randrange(10 ** (width - 1) if width > 1 else 0, 10**width))


def renumber(text: str, new: dict[str, str]) -> str:
    return DIGITS.sub(lambda match: new[match.group()], text)


def number_variants(pairs: list[tuple[str, str]], copies: int, seed: int) -> list[tuple[str, str]]:
    """`copies` variants of each pair whose sides hold the same digit runs, with new numbers in both."""
    rng = random.Random(seed)
    variants = []
    for src, tgt in pairs:
        runs = DIGITS.findall(src)
        if not runs or sorted(runs) != sorted(DIGITS.findall(tgt)):
            continue
        for _ in range(copies):
            new = {run: random_number(rng, run) for run in runs}
            variants.append((renumber(src, new), renumber(tgt, new)))
    return variants
