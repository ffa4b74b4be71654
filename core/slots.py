"""How a decoder's self-attention cache grows: by slots, a few at a time, within the model's positions.

The search knows no cache layout (core.search); the decoders that keep a growing cache (service.engine.decoder,
model.decode) size it here.
"""

from __future__ import annotations

CACHE_SLOTS = 8  # a self-attention cache grows by this many slots at a time


def cache_slots(positions: int, max_len: int) -> int:
    """Slots of a self-attention cache that holds `positions` positions: the next multiple of CACHE_SLOTS, never
    more than the model's max_len. Every step reads all slots and a beam reorder copies them, so few spare ones
    pay (powers of two were measurably slower on the CPU); growing copies the cache once per CACHE_SLOTS steps."""
    return min(-(-positions // CACHE_SLOTS) * CACHE_SLOTS, max_len)


FEW_ROWS = 16  # a batch of at most this many rows grows its self-attention cache by doubling it


def grown_slots(positions: int, slots: int, rows: int, max_len: int) -> int:
    """The slots a cache of `slots` slots grows to when a row reaches a position it lacks: cache_slots(), or, for a
    batch of FEW_ROWS rows or fewer, twice its slots. A growth costs a copy of the cache and its bindings afresh,
    which at a few rows outweighs reading spare slots (a one-sentence batch grew 6 times in 50 steps, 3 doubling)."""
    needed = cache_slots(positions, max_len)
    return max(needed, min(2 * slots, max_len)) if rows <= FEW_ROWS else needed
