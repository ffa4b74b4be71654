"""Greedy and beam search over any step-by-step decoder (ONNX Runtime or PyTorch), in NumPy.

A decoder holds the caches of a batch of rows and offers two calls:
    step(tokens, width)           feed one token per row; get the `width` most likely next tokens of each row,
                                  best first, and their log-probabilities: two (rows, width) arrays
    select(rows, cross_rows)      keep and reorder rows of the self-attention cache; cross_rows, when given,
                                  does the same for the encoder keys/values (only needed when sentences leave)
Beam search needs no more of a step than each row's 2 * beam_size best tokens: a row adds one score to all its
tokens, so a sentence's best candidates are among its rows' best tokens. The decoder picks them where the logits
are (in the ONNX graph, or in PyTorch), so that no (rows, vocabulary) array crosses into NumPy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from core.folder import ModelConfig

# Which sentences of the batch nobody waits for any more (a client hung up, the server is shutting down): a bool
# array over the batch's sentences, asked once per step. Their rows leave the batch and they get no hypotheses.
Abandoned = Callable[[], np.ndarray]


def nothing_abandoned() -> np.ndarray:
    return np.zeros(0, dtype=bool)


class StepDecoder(Protocol):
    def step(self, tokens: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]: ...

    def select(self, rows: np.ndarray, cross_rows: np.ndarray | None) -> None: ...


@dataclass
class Hypothesis:
    tokens: list[int]  # without <s> and </s>
    score: float  # length-normalized log-probability (0.0 for greedy, which does not compute it)


def length_penalty(length: int, alpha: float) -> float:
    """GNMT's ((5 + length) / 6)^alpha (Wu et al., 2016); alpha 0 means no normalization."""
    return ((5.0 + length) / 6.0) ** alpha


def abandoned_rows(abandoned: Abandoned, sentences: np.ndarray) -> np.ndarray:
    """For each of `sentences` (indices into the batch), whether it was abandoned."""
    gone = abandoned()
    return gone[sentences] if len(gone) else np.zeros(len(sentences), dtype=bool)


def greedy_search(
    decoder: StepDecoder, max_lengths: np.ndarray, bos: int, eos: int, abandoned: Abandoned = nothing_abandoned
) -> list[Hypothesis]:
    """Pick the most likely token at every step; rows leave the batch as soon as they end."""
    n = len(max_lengths)
    out = np.full((n, int(max_lengths.max())), eos, dtype=np.int64)
    alive = np.arange(n)
    tokens = np.full(n, bos, dtype=np.int64)
    for t in range(out.shape[1]):
        tokens = decoder.step(tokens, 1)[0][:, 0]
        out[alive, t] = tokens
        ended = (tokens == eos) | (t + 1 >= max_lengths[alive]) | abandoned_rows(abandoned, alive)
        if ended.all():
            break
        if ended.any():
            keep = np.flatnonzero(~ended)
            decoder.select(keep, keep)
            alive, tokens = alive[keep], tokens[keep]
    return [Hypothesis(_until_eos(row, eos), 0.0) for row in out]


def beam_search(
    decoder: StepDecoder,
    max_lengths: np.ndarray,
    bos: int,
    eos: int,
    beam_size: int,
    alpha: float = 0.6,
    n_best: int = 1,
    abandoned: Abandoned = nothing_abandoned,
) -> list[list[Hypothesis]]:
    """Beam search; the decoder holds beam_size rows per sentence (sentence-major).

    At each step every sentence keeps its beam_size best unfinished continuations out of the 2*beam_size
    best candidates; a candidate ending in </s> among the beam_size best is set aside as finished.
    A sentence stops at its maximum length, or once beam_size hypotheses have finished and no unfinished
    one can still score better than them.
    Returns the n_best finished hypotheses of each sentence, best first.
    """
    n, k = len(max_lengths), beam_size
    finished: list[list[Hypothesis]] = [[] for _ in range(n)]
    sentences = np.arange(n)  # which sentence each active block of k rows belongs to
    scores = np.zeros((n, k), dtype=np.float64)
    scores[:, 1:] = -np.inf  # at the start all beams are the same: only the first may extend
    history = np.zeros((n, k, 0), dtype=np.int64)
    tokens = np.full(n * k, bos, dtype=np.int64)
    for t in range(int(max_lengths.max())):
        row_tokens, logp = decoder.step(tokens, 2 * k)
        active, width = len(sentences), logp.shape[-1]
        candidates = (scores[:, :, None] + logp.reshape(active, k, width)).reshape(active, k * width)
        top = np.argsort(-candidates, axis=1, kind="stable")[:, : 2 * k]
        top_scores = np.take_along_axis(candidates, top, 1)
        origin, token = top // width, np.take_along_axis(row_tokens.reshape(active, k * width), top, 1)
        at_limit = t + 1 >= max_lengths[sentences]
        ends = token == eos
        ends[at_limit, :k] = True  # at the maximum length the k best all end here
        for b, j in zip(*np.nonzero(ends[:, :k])):
            if np.isfinite(top_scores[b, j]):
                seq = history[b, origin[b, j]].tolist() + ([] if token[b, j] == eos else [int(token[b, j])])
                finished[sentences[b]].append(Hypothesis(seq, top_scores[b, j] / length_penalty(t + 1, alpha)))
        # done once k hypotheses have finished and no live one can still beat them: a live hypothesis's
        # log-probability only falls, so the best it can reach is its score now / length_penalty(max length)
        best_live = np.where(ends, -np.inf, top_scores).max(axis=1) / length_penalty(max_lengths[sentences], alpha)
        kth_best = np.array([sorted(h.score for h in finished[s])[-k] if len(finished[s]) >= k else -np.inf
                             for s in sentences])
        done = at_limit | (kth_best >= best_live) | abandoned_rows(abandoned, sentences)
        if done.all():
            break
        # the k best candidates that go on, per sentence
        goes_on = ~ends & (np.cumsum(~ends, axis=1) <= k)
        keep = np.flatnonzero(~done)
        pick = goes_on[keep]
        origin = origin[keep][pick].reshape(-1, k)
        token = token[keep][pick].reshape(-1, k)
        scores = top_scores[keep][pick].reshape(-1, k)
        history = np.concatenate([np.take_along_axis(history[keep], origin[:, :, None], 1), token[:, :, None]], 2)
        rows = (keep[:, None] * k + origin).ravel()
        cross_rows = None if len(keep) == active else np.repeat(keep * k, k)
        decoder.select(rows, cross_rows)
        sentences, tokens = sentences[keep], token.ravel()
    return [sorted(f, key=lambda h: -h.score)[:n_best] for f in finished]


def _until_eos(row: np.ndarray, eos: int) -> list[int]:
    ends = np.flatnonzero(row == eos)
    return row[: ends[0] if len(ends) else len(row)].tolist()


@dataclass
class SearchOptions:
    beam_size: int = 1  # 1 is greedy search
    length_penalty: float = 0.6  # alpha of length_penalty(), beam search only
    n_best: int = 1  # hypotheses returned per sentence, at most beam_size
    max_length_ratio: float = 1.5  # a translation has at most ratio * source tokens + extra tokens
    max_length_extra: int = 10
    max_length: int = 256  # and never more than this


class StartDecoder(Protocol):
    def __call__(self, src: np.ndarray, src_mask: np.ndarray, repeat: int) -> StepDecoder:
        """Encode src (N, S) and return a decoder holding `repeat` rows per sentence."""


def pad_batch(sequences: list[list[int]], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Right-pad id sequences into (N, S) int64 ids and a bool mask that is True at real tokens."""
    longest = max(len(s) for s in sequences)
    ids = np.full((len(sequences), longest), pad_id, dtype=np.int64)
    for i, s in enumerate(sequences):
        ids[i, : len(s)] = s
    return ids, ids != pad_id


def search(
    start: StartDecoder,
    sources: list[list[int]],
    opts: SearchOptions,
    cfg: ModelConfig,
    abandoned: Abandoned = nothing_abandoned,
) -> list[list[Hypothesis]]:
    """Translate a batch of source id sequences (ModelConfig.source_ids: each ends with </s>): n_best hypotheses
    per sentence; an abandoned sentence gets what it had when it was dropped (possibly nothing)."""
    src, src_mask = pad_batch(sources, cfg.pad_id)
    lengths = src_mask.sum(axis=1)
    longest = min(opts.max_length, cfg.max_len)
    max_lengths = np.minimum(np.ceil(opts.max_length_ratio * lengths) + opts.max_length_extra, longest)
    max_lengths = max_lengths.astype(np.int64)
    decoder = start(src, src_mask, opts.beam_size)
    if opts.beam_size == 1:
        return [[h] for h in greedy_search(decoder, max_lengths, cfg.bos_id, cfg.eos_id, abandoned)]
    return beam_search(
        decoder, max_lengths, cfg.bos_id, cfg.eos_id, opts.beam_size, opts.length_penalty, opts.n_best, abandoned
    )
