"""Greedy and beam search over a running batch of sentences, in NumPy.

A running batch (RunningBatch) decodes many sentences one step at a time, each with its own options: greedy and
beam sentences of any beam size share every decoder step. A sentence may join before any step and leaves the
batch at the step it ends, so a server refills the batch as it goes (iteration-level batching) rather than running
each batch until its longest sentence. Offline, search() adds all sentences at once and steps until none is left.
A sentence's first token may be forced (SearchOptions.forced_token: a many-to-many model's target language): the
decoder's choice at its first step is replaced by that token, at log-probability 0.

The decoder holds the caches of the batch's rows (a greedy sentence has one row, a beam sentence beam_size rows,
next to each other), laid out as it likes: the search knows no cache layout. A beam sentence holds one row until
its first step, whose beam_size best tokens are its beams' first: its beams would all be that row before, and a
step computes every row it holds. It offers three calls:
    add(src, src_mask)            encode sentences src (M, S) and append a row for each, which reads its first
                                  token at position 0
    step(tokens, width, log_probs)
                                  feed one token per row, each at its row's next position; get the `width` most
                                  likely next tokens of each row, best first, and their log-probabilities: two
                                  (rows, width) arrays. With log_probs False the caller reads the tokens alone (a
                                  greedy step), and the decoder may leave the log-probabilities uncomputed
    apply(plan)                   go on with the rows a StepPlan names, after a step at which a beam's row took
                                  another's place, a beam sentence's row became its beams or sentences ended, or
                                  after sentences were removed
Beam search needs no more of a step than each row's 2 * beam_size best tokens: a row adds one score to all its
tokens, so a sentence's best candidates are among its rows' best tokens. The decoder picks them where the logits
are (in the ONNX graph, or in PyTorch), so that no (rows, vocabulary) array crosses into NumPy.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from core import guards
from core.folder import ModelConfig


@dataclass(frozen=True)
class StepPlan:
    """What the batch's rows become before its next step, which the decoder applies to its caches.

    Each row that goes on names its parent: the row of the batch before whose tokens it continues (its own row, or,
    in a beam, another row of its sentence; after a beam sentence's first step, its one row is the parent of all its
    rows). Where sentences left or a beam sentence's rows grew so, it also names each row's place: the row of the
    batch before at the same place within the same sentence (its last row, past the rows it held), where that
    sentence's encoder keys/values and source mask are (a sentence's rows share them). Places are None where every
    sentence keeps its rows where they were.
    """

    parents: np.ndarray
    places: np.ndarray | None = None


class Decoder(Protocol):
    def add(self, src: np.ndarray, src_mask: np.ndarray) -> None: ...

    def step(self, tokens: np.ndarray, width: int, log_probs: bool = True) -> tuple[np.ndarray, np.ndarray]: ...

    def apply(self, plan: StepPlan) -> None: ...


@dataclass
class Hypothesis:
    tokens: list[int]  # without <s> and </s> (with the forced token, where there is one)
    score: float  # length-normalized log-probability (0.0 for greedy, which does not compute it)


@dataclass
class SearchOptions:
    beam_size: int = 1  # 1 is greedy search
    length_penalty: float = 0.6  # alpha of length_penalty(), beam search only
    n_best: int = 1  # hypotheses returned per sentence, at most beam_size
    max_length_ratio: float = 1.5  # a translation has at most ratio * source tokens + extra tokens
    max_length_extra: int = 10
    max_length: int = 256  # and never more than this
    # the token decoding must begin with (ModelConfig.forced_token: a many-to-many model's target language), at
    # log-probability 0, as transformers' ForcedBOSTokenLogitsProcessor makes it; None: the model's choice
    forced_token: int | None = None
    # repetition guards (core.guards): CTranslate2's options, and how often an n-gram may occur; off by default
    repetition_penalty: float = 1.0
    no_repeat_ngram_size: int = 0
    ngram_repeats: int = 1

    def longest(self, source_length: int, cfg: ModelConfig | None = None) -> int:
        """The most tokens (</s> included) a translation of a source of this many tokens may have: the decoding
        steps it may take. The one definition of that bound; with `cfg`, also within the model's positions."""
        ratio_bound = math.ceil(self.max_length_ratio * source_length) + self.max_length_extra
        return min(ratio_bound, self.max_length, cfg.max_len if cfg else self.max_length)


def length_penalty(length: int | np.ndarray, alpha: float | np.ndarray) -> float | np.ndarray:
    """GNMT's ((5 + length) / 6)^alpha (Wu et al., 2016); alpha 0 means no normalization."""
    return ((5.0 + length) / 6.0) ** alpha


def filled_order(stays: np.ndarray) -> np.ndarray:
    """The sentences that stay (stays: a bool per sentence), in the order they go on in: each in its place, but
    those past the new end of the batch, which fill the places of the sentences that leave. A leaving sentence
    then moves the few rows that take its place within the decoder's caches, not every row after it."""
    kept = np.flatnonzero(stays)
    order = np.arange(len(kept))
    order[~stays[: len(kept)]] = kept[kept >= len(kept)]
    return order


def block_items(sizes: np.ndarray, blocks: np.ndarray, grown: np.ndarray | None = None) -> np.ndarray:
    """The items of these blocks, in this order, of a sequence of blocks of these sizes (a sentence's rows); with
    `grown` (a size for each block), as many of each block's as its grown size, its last item repeated past its
    own (a beam sentence's one row, for each of its rows after its first step)."""
    starts, taken = np.cumsum(sizes) - sizes, (sizes if grown is None else grown)[blocks]
    within = np.arange(taken.sum()) - np.repeat(np.cumsum(taken) - taken, taken)
    if grown is not None:
        within = np.minimum(within, np.repeat(sizes[blocks] - 1, taken))
    return np.repeat(starts[blocks], taken) + within


def pad_batch(sequences: list[list[int]], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Right-pad id sequences into (N, S) int64 ids and a bool mask that is True at real tokens."""
    longest = max(len(s) for s in sequences)
    ids = np.full((len(sequences), longest), pad_id, dtype=np.int64)
    for i, s in enumerate(sequences):
        ids[i, : len(s)] = s
    return ids, ids != pad_id


@dataclass(eq=False)  # a sentence is itself, not its contents
class Sentence:
    """One source sentence in a running batch: its options and its finished hypotheses."""

    key: Hashable  # the caller's handle
    opts: SearchOptions
    finished: list[Hypothesis] = field(default_factory=list)

    def result(self) -> list[Hypothesis]:
        """Its n_best hypotheses, best first (greedy: the one; abandoned early: what it had, possibly nothing)."""
        return sorted(self.finished, key=lambda h: -h.score)[: self.opts.n_best]


class RunningBatch:
    """Sentences decoding together; rows in sentence order, a sentence's beam_size rows next to each other."""

    def __init__(self, decoder: Decoder, cfg: ModelConfig):
        self.decoder = decoder
        self.cfg = cfg
        self.sentences: list[Sentence] = []
        # per sentence
        self.beam_sizes = np.zeros(0, dtype=np.int64)
        self.last_steps = np.zeros(0, dtype=np.int64)  # the step it ends at the latest: SearchOptions.longest - 1
        self.steps = np.zeros(0, dtype=np.int64)  # tokens decoded so far; the next one is at position `steps`
        self.forced = np.zeros(0, dtype=np.int64)  # SearchOptions.forced_token, -1 for none
        self.widest = 0  # the largest beam size
        self.forcing = False  # whether some sentence's next step is its first, with a forced token
        self.guarded = False  # whether some sentence has repetition guards (core.guards)
        self.guard_options: guards.RowGuards | None = None  # guards.per_row's, until the sentences change
        # per row
        self.tokens = np.zeros(0, dtype=np.int64)  # its last token, read at the next step
        self.scores = np.zeros(0, dtype=np.float64)  # its log-probability so far (beams only)
        self.history = np.zeros((0, 0), dtype=np.int64)  # (R, longest) its tokens; position p in column p

    def __len__(self) -> int:
        return len(self.sentences)

    @property
    def rows(self) -> int:
        return len(self.tokens)

    def add(self, sources: list[list[int]], options: list[SearchOptions], keys: list[Hashable]) -> None:
        """Encode sentences (ModelConfig.source_ids) and let them take part from the next step on."""
        beam_sizes = np.array([opts.beam_size for opts in options], dtype=np.int64)
        last_steps = np.array([opts.longest(len(ids), self.cfg) - 1 for ids, opts in zip(sources, options)])
        self.decoder.add(*pad_batch(sources, self.cfg.pad_id))
        self.sentences += [Sentence(key, opts) for key, opts in zip(keys, options)]
        self.beam_sizes = np.concatenate([self.beam_sizes, beam_sizes])
        self.last_steps = np.concatenate([self.last_steps, last_steps])
        self.steps = np.concatenate([self.steps, np.zeros(len(sources), dtype=np.int64)])
        forced = [-1 if opts.forced_token is None else opts.forced_token for opts in options]
        self.forced = np.concatenate([self.forced, np.array(forced, dtype=np.int64)])
        self.widest = int(self.beam_sizes.max())
        self.forcing |= max(forced) >= 0
        self.guarded |= any(map(guards.wanted, options))
        self.guard_options = None
        self.scores = np.concatenate([self.scores, np.zeros(len(sources))])  # a row each until its first step
        self.tokens = np.concatenate([self.tokens, np.full(len(sources), self.cfg.bos_id, dtype=np.int64)])
        history = np.zeros((self.rows, max(self.history.shape[1], last_steps.max() + 1)), dtype=np.int64)
        history[: len(self.history), : self.history.shape[1]] = self.history
        self.history = history

    def remove(self, gone: set[Hashable]) -> list[Sentence]:
        """Take the sentences with these keys out of the batch (nobody waits for them); they keep what finished."""
        stays = np.array([s.key not in gone for s in self.sentences], dtype=bool)
        if stays.all():
            return []
        leaving = [s for s, stay in zip(self.sentences, stays) if not stay]
        order = filled_order(stays)
        rows = block_items(self.held(), order)
        self._keep(rows, order, rows)
        return leaving

    def held(self) -> np.ndarray:
        """The rows each sentence holds: its beam_size, but one until its first step."""
        return np.where(self.steps > 0, self.beam_sizes, 1)

    def step(self) -> list[Sentence]:
        """Decode one token for every row; returns the sentences that ended at this step, which leave the batch."""
        widest = self.widest
        width = 2 * widest if widest > 1 else 1
        held = self.beam_sizes if widest == 1 else self.held()
        watched = self.guarded and self._watched(held)
        top_tokens, top_logp = self.decoder.step(self.tokens, width + (guards.EXTRA if watched else 0),
                                                 log_probs=widest > 1 or watched)
        if watched:  # the candidates re-scored from each row's history, the best `width` kept
            top_tokens, top_logp = guards.apply(top_tokens, top_logp, self.history, self.steps.repeat(held),
                                                self.tokens, self.guard_options, width)
        if self.forcing:
            top_tokens, top_logp = self._force(top_tokens, top_logp, held)
        if widest == 1:
            return self._greedy_step(top_tokens[:, 0])
        if len(self.tokens) == widest * len(self):  # one beam size, every row held: no bookkeeping
            rows = np.arange(self.rows).reshape(len(self), widest)
            done, old_rows, tokens, scores = self._beam(np.arange(len(self)), rows,
                                                         top_tokens.reshape(*rows.shape, -1),
                                                         top_logp.reshape(*rows.shape, -1), widest)
            old_rows, tokens, scores = old_rows.ravel(), tokens.ravel(), scores.ravel()
        else:
            done, old_rows, tokens, scores = self._beam_sizes(top_tokens, top_logp, held)
        ended = [self.sentences[m] for m in np.flatnonzero(done)] if done.any() else []
        self.steps += 1
        if ended or (held < self.beam_sizes).any():  # sentences left, or a beam sentence's row became its beams
            order = filled_order(~done)  # the sentences that stay, in the order they go on in
            if ended:
                moved = block_items(self.beam_sizes[~done], (np.cumsum(~done) - 1)[order])
                old_rows, tokens, scores = old_rows[moved], tokens[moved], scores[moved]
            self._keep(old_rows, order, block_items(held, order, self.beam_sizes))
        else:
            self._keep(old_rows)
        self.tokens, self.scores = tokens, scores
        if self.rows:
            self.history[np.arange(self.rows), self.steps.repeat(self.beam_sizes) - 1] = tokens
        return ended

    def _watched(self, held: np.ndarray) -> bool:
        """Whether the repetition guards may change this step (guards.watching), the rows holding `held`."""
        if self.guard_options is None:
            self.guard_options = guards.per_row([s.opts for s in self.sentences], held)
        return guards.watching(self.history, self.tokens, self.guard_options)

    def _beam_sizes(self, top_tokens: np.ndarray, top_logp: np.ndarray, held: np.ndarray) -> tuple[np.ndarray, ...]:
        """A step of sentences of several beam sizes, or of beam sentences at their first step (which hold one row,
        `held`), each size and row count searched on its own: which sentences end, and the old row, token and score
        of each row that goes on, in sentence order."""
        starts = np.cumsum(held) - held  # each sentence's first row
        done = np.zeros(len(self), dtype=bool)
        # what goes on, per beam size and rows held: each new row's sentence, and its old row, token and score
        goes_on: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        for k, c in set(zip(self.beam_sizes.tolist(), held.tolist())):
            members = np.flatnonzero((self.beam_sizes == k) & (held == c))
            rows = starts[members][:, None] + np.arange(c)  # (G, c)
            if k == 1:
                ends, old_rows, token, score = self._greedy(members, rows, top_tokens[rows], top_logp[rows])
            else:
                ends, old_rows, token, score = self._beam(members, rows, top_tokens[rows], top_logp[rows], k)
            done[members] = ends
            goes_on.append((np.repeat(members[~ends], k), old_rows.ravel(), token.ravel(), score.ravel()))
        sentence, old_rows, tokens, scores = map(np.concatenate, zip(*goes_on))
        order = np.argsort(sentence, kind="stable")  # back into sentence order
        return done, old_rows[order], tokens[order], scores[order]

    def _force(self, top_tokens: np.ndarray, top_logp: np.ndarray, held: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The rows' best next tokens (each sentence holding `held` rows), where a sentence at its first step has a
        forced token: that token alone, at log-probability 0 (its other candidates -inf), in place of what the model
        prefers."""
        starting = (self.steps == 0) & (self.forced >= 0)
        self.forcing = False  # after this step, no sentence of the batch is at its first
        if not starting.any():
            return top_tokens, top_logp
        rows = np.repeat(starting, held)
        top_tokens, top_logp = top_tokens.copy(), top_logp.copy()
        top_tokens[rows] = self.forced[starting][:, None]  # a sentence at its first step holds one row
        top_logp[rows] = -np.inf
        top_logp[rows, 0] = 0.0
        return top_tokens, top_logp

    def _greedy_step(self, token: np.ndarray) -> list[Sentence]:
        """step() when every sentence is greedy (one row each): _greedy without the bookkeeping that sentences of
        several beam sizes need, which is most of a one-sentence batch's time outside ONNX Runtime."""
        everyone = np.arange(len(self))
        done = self._greedy_ends(everyone, everyone, token, self.steps, self.last_steps)
        self.history[everyone, self.steps] = token
        self.steps += 1
        self.tokens = token
        if done is None:
            return []
        keep = filled_order(~done)
        ended = [self.sentences[m] for m in np.flatnonzero(done)]
        self._keep(keep, keep, keep)
        return ended

    def _keep(self, rows: np.ndarray, sentences: np.ndarray | None = None, places: np.ndarray | None = None) -> None:
        """Go on with these rows (of the batch before), in this order; and where some sentence left or a beam
        sentence's row became its beams, with these sentences, in filled_order's order, and the rows' places (a
        StepPlan's), which the decoder's encoder keys/values follow."""
        if sentences is None and len(rows) == self.rows and (rows == np.arange(self.rows)).all():
            return
        self.decoder.apply(StepPlan(rows, places))
        if sentences is not None:
            self.sentences = [self.sentences[m] for m in sentences]
            self.beam_sizes, self.last_steps = self.beam_sizes[sentences], self.last_steps[sentences]
            self.widest = int(self.beam_sizes.max()) if len(sentences) else 0
            self.steps, self.forced = self.steps[sentences], self.forced[sentences]
            self.guard_options = None
        self.tokens, self.scores, self.history = self.tokens[rows], self.scores[rows], self.history[rows]

    def _greedy(self, members, rows, top_tokens, top_logp):
        """The most likely token of each sentence's row."""
        token = top_tokens[:, 0, 0]
        done = self._greedy_ends(members, rows[:, 0], token, self.steps[members], self.last_steps[members])
        keep = np.ones(len(token), dtype=bool) if done is None else ~done
        return ~keep, rows[keep], token[keep, None], np.zeros((keep.sum(), 1))

    def _greedy_ends(self, members: np.ndarray, rows: np.ndarray, token: np.ndarray, steps: np.ndarray,
                     last_steps: np.ndarray) -> np.ndarray | None:
        """Which greedy sentences (at these steps, with these last steps) end with this token (at </s> or their
        maximum length), None when none does (most steps: the callers need no second test); they get their
        hypothesis. The caller indexes steps and last_steps: a batch of greedy sentences alone passes them whole,
        with no copy."""
        done = (token == self.cfg.eos_id) | (steps >= last_steps)
        if not done.any():
            return None
        for m, row, t, last in zip(members[done], rows[done], steps[done], token[done]):
            tokens = self.history[row, :t].tolist() + ([] if last == self.cfg.eos_id else [int(last)])
            self.sentences[m].finished = [Hypothesis(tokens, 0.0)]
        return done

    def _beam(self, members, rows, top_tokens, top_logp, k):
        """One step of beam search for sentences of one beam size k, each with its k rows, or with one at its first
        step (which stands for k rows that would be the same, all but the first at score -inf).

        Every sentence keeps its k best unfinished continuations out of the 2k best candidates; a candidate ending
        in </s> among the k best is set aside as finished. A sentence ends at its maximum length, or once its best
        candidate ends in </s> with n_best hypotheses finished: CTranslate2's rule (OpenNMT's too), which stops
        sooner than waiting until no live hypothesis could beat k finished ones, at a BLEU within noise
        (docs/decisions.md).
        """
        g = len(rows)
        eos, width = self.cfg.eos_id, min(2 * k, top_logp.shape[-1])  # the vocabulary may hold fewer
        steps, last_steps = self.steps[members], self.last_steps[members]
        scores = self.scores[rows]
        if rows.shape[1] < k:  # the k rows the first step's one stands for: their candidates, in their order
            rows, top_tokens, top_logp = (x.repeat(k, axis=1) for x in (rows, top_tokens, top_logp))
            scores = np.where(np.arange(k) == 0, scores.repeat(k, axis=1), -np.inf)
        candidates = (scores[:, :, None] + top_logp[:, :, :width]).reshape(g, k * width)
        top = (-candidates).argsort(axis=1, kind="stable")[:, : 2 * k]
        each = np.arange(g)[:, None]
        top_scores, origin = candidates[each, top], top // width
        token = top_tokens[:, :, :width].reshape(g, k * width)[each, top]
        at_limit = steps >= last_steps
        ends = token == eos
        if not (ends[:, :k] | at_limit[:, None]).any():  # most steps: nothing ends, the k best go on
            origin = origin[:, :k]
            return at_limit, rows[each, origin], token[:, :k], top_scores[:, :k]
        ends[at_limit, :k] = True  # at the maximum length the k best all end here
        sentences = [self.sentences[m] for m in members]
        for b, j in zip(*np.nonzero(ends[:, :k])):
            if np.isfinite(top_scores[b, j]):
                seq = self.history[rows[b, origin[b, j]], : steps[b]].tolist()
                seq += [] if token[b, j] == eos else [int(token[b, j])]
                score = top_scores[b, j] / length_penalty(steps[b] + 1, sentences[b].opts.length_penalty)
                sentences[b].finished.append(Hypothesis(seq, float(score)))
        enough = np.array([len(s.finished) >= s.opts.n_best for s in sentences])
        done = at_limit | (ends[:, 0] & enough)
        # the k best candidates that go on, per sentence (at most k of the 2k end in </s>, so k are left)
        goes_on = (~ends & (np.cumsum(~ends, axis=1) <= k))[~done]
        origin = origin[~done][goes_on].reshape(-1, k)
        live_rows = rows[~done][np.arange(len(origin))[:, None], origin]
        return done, live_rows, token[~done][goes_on].reshape(-1, k), top_scores[~done][goes_on].reshape(-1, k)


def search(decoder: Decoder, sources: list[list[int]], opts: SearchOptions, cfg: ModelConfig) -> list[list[Hypothesis]]:
    """Translate source id sequences (ModelConfig.source_ids: each ends with </s>) in one running batch: the n_best
    hypotheses of each, best first."""
    batch = RunningBatch(decoder, cfg)
    batch.add(sources, [opts] * len(sources), list(range(len(sources))))
    results: list[list[Hypothesis]] = [[] for _ in sources]
    while len(batch):
        for sentence in batch.step():
            results[sentence.key] = sentence.result()
    return results
