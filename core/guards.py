"""Repetition guards: a step's candidate tokens re-scored from each row's history, so that a search cannot loop.

Two options as CTranslate2 offers them, and one more (SearchOptions fields; all off by default, so that the search
gives what reference implementations give):
    repetition_penalty      a candidate token that the row already holds has its score made 1/penalty as likely
                            (its log-probability times the penalty: CTranslate2 divides a positive logit by it and
                            multiplies a negative one)
    no_repeat_ngram_size    a candidate that would complete an n-gram of this many tokens that the row already
                            holds ngram_repeats times is taken out (its log-probability -inf); ngram_repeats 1 is
                            CTranslate2's no_repeat_ngram_size
    ngram_repeats           how often an n-gram may occur (1, CTranslate2's; 2 lets a phrase stand twice, so that
                            only a loop is cut: an output in which no n-gram occurs three times is never changed)

The decoder gives each row's `width` best tokens, not the whole vocabulary: a step that the guards watch asks for
EXTRA more, so that a row whose best tokens are taken out still has others, re-ranks them, and keeps the best
`width`. The guards watch a step where they may change it (watching): at every step with a repetition penalty, and
with the n-gram guard alone only where some row may complete a repeated n-gram. Any other step is the search's own,
its candidates and their order the same: it asks for no more, and a greedy one for no log-probabilities.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

EXTRA = 8  # candidates a guarded step asks the decoder for beyond the search's own width
UNGUARDED = np.iinfo(np.int64).max  # RowGuards.held_at_most of a row without the n-gram guard


class Guarded(Protocol):
    repetition_penalty: float
    no_repeat_ngram_size: int
    ngram_repeats: int


def wanted(opts: Guarded) -> bool:
    """Whether these options guard the search at all."""
    return opts.repetition_penalty != 1.0 or opts.no_repeat_ngram_size > 0


@dataclass(frozen=True)
class RowGuards:
    """Each row's guard options, as per_row gives them for a batch's rows until its sentences change, with what
    apply() would otherwise work out from them at every step."""

    penalty: np.ndarray  # (R,) repetition_penalty
    repeats: np.ndarray  # (R,) ngram_repeats
    penalized: bool  # whether some row has a repetition penalty
    sizes: list[tuple[int, np.ndarray | None]]  # each n-gram size in use and its rows (None: every row)
    # (R,) how often a row may hold its last token before it may complete a repeated n-gram (may_repeat): its
    # ngram_repeats, -1 for unigrams (any candidate may be held), the most an int holds without the n-gram guard
    held_at_most: np.ndarray


def per_row(options: Sequence[Guarded], rows: np.ndarray) -> RowGuards:
    """The rows' guards: the options of each sentence, which has rows[i] rows. Made once per change of a running
    batch's sentences (a lone client's every sentence), so the per-sentence work is Python's, a NumPy call a field."""
    def each_row(values: list, dtype: type) -> np.ndarray:
        return np.repeat(np.array(values, dtype=dtype), rows)

    size = [o.no_repeat_ngram_size for o in options]
    held_at_most = [-1 if n == 1 else o.ngram_repeats if n > 1 else UNGUARDED for n, o in zip(size, options)]
    penalty = [o.repetition_penalty for o in options]
    size_of_row = each_row(size, np.int64)
    sizes = [(n, None if size.count(n) == len(size) else np.flatnonzero(size_of_row == n))
             for n in sorted(set(size) - {0})]
    return RowGuards(each_row(penalty, np.float64), each_row([o.ngram_repeats for o in options], np.int64),
                     any(p != 1.0 for p in penalty), sizes, each_row(held_at_most, np.int64))


def watching(history: np.ndarray, last: np.ndarray, guards: RowGuards) -> bool:
    """Whether the guards may change the candidates of the rows' next step (history and last as apply() reads
    them): a repetition penalty re-scores every step, the n-gram guard only a row that may repeat (may_repeat)."""
    return guards.penalized or bool(may_repeat(history, last, guards).any())


def apply(top_tokens: np.ndarray, top_logp: np.ndarray, history: np.ndarray, lengths: np.ndarray, last: np.ndarray,
          guards: RowGuards, width: int) -> tuple[np.ndarray, np.ndarray]:
    """The rows' `width` best candidates once guarded: top_tokens, top_logp (R, W >= width) as the decoder gave them,
    history (R, T) each row's tokens so far (the first lengths[r] of its row), last (R,) the token each row reads at
    this step (its last, or <s> before its first)."""
    logp = top_logp
    if guards.penalized:
        held = np.arange(history.shape[1]) < lengths[:, None]  # (R, T)
        seen = ((history[:, None, :] == top_tokens[:, :, None]) & held[:, None, :]).any(axis=2)  # (R, W)
        logp = np.where(seen, logp * guards.penalty[:, None], logp)
    may = may_repeat(history, last, guards)
    for n, rows in guards.sizes:
        rows = np.flatnonzero(may) if rows is None else rows[may[rows]]  # None: every row
        if len(rows):
            banned = repeated(top_tokens[rows], history[rows], lengths[rows], n, guards.repeats[rows])
            if logp is top_logp:
                logp = top_logp.astype(np.float64)
            logp[rows] = np.where(banned, -np.inf, logp[rows])
    if logp is top_logp:  # most steps: no row can complete a repeated n-gram
        return top_tokens[:, :width], top_logp[:, :width]
    order = np.argsort(-logp, axis=1, kind="stable")[:, :width]
    return np.take_along_axis(top_tokens, order, axis=1), np.take_along_axis(logp, order, axis=1).astype(top_logp.dtype)


def may_repeat(history: np.ndarray, last: np.ndarray, guards: RowGuards) -> np.ndarray:
    """(R,): whether a row may complete an n-gram it holds `repeats` times already. It can only if its last token
    stands `repeats` times before, each with a token after it (an n-gram's (n-1)th); a cheap test that spares most
    rows at most steps repeated()'s work, in one NumPy expression: the last token is counted over the whole row,
    once more for itself (<s>, read before a row's first token, is in no history). Positions past a row's tokens
    (zeros in the search's history) can only add to the count: a row named that cannot repeat costs repeated() its
    work, and repeated(), which is exact, bans none of its candidates."""
    return (history == last[:, None]).sum(axis=1) > guards.held_at_most


def repeated(candidates: np.ndarray, history: np.ndarray, lengths: np.ndarray, n: int,
             repeats: np.ndarray) -> np.ndarray:
    """(R, W): whether each candidate would complete an n-gram that its row holds `repeats` times already."""
    if n == 1:
        count = ((history[:, None, :] == candidates[:, :, None])
                 & (np.arange(history.shape[1]) < lengths[:, None])[:, None, :]).sum(axis=2)
        return count >= repeats[:, None]
    if history.shape[1] < n:
        return np.zeros(candidates.shape, dtype=bool)
    windows = np.lib.stride_tricks.sliding_window_view(history, n, axis=1)  # (R, T - n + 1, n)
    rows = np.arange(len(history))
    prefix = history[rows[:, None], np.clip(lengths[:, None] - (n - 1) + np.arange(n - 1), 0, None)]  # (R, n - 1)
    complete = np.arange(windows.shape[1]) + n <= lengths[:, None]  # windows wholly inside the history
    same = (windows[:, :, : n - 1] == prefix[:, None, :]).all(axis=2) & complete  # (R, T - n + 1)
    count = (same[:, None, :] & (windows[:, None, :, n - 1] == candidates[:, :, None])).sum(axis=2)  # (R, W)
    return (count >= repeats[:, None]) & (lengths >= n - 1)[:, None]
