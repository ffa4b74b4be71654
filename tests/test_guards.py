"""Repetition guards (core.guards) on their own and in the search (core.search): a loop is cut, an output without
one is unchanged, and with the guards off (the default) nothing changes; the device's decoder gives the host's
guarded translations."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from test_cache_layouts import assert_same, sources

from core import guards
from core.search import SearchOptions, StepPlan, search
from model.config import preset
from service.engine.config import ModelOptions
from service.engine.decoder import ExportedDecoder
from service.engine.graphed import BucketedDecoder, BucketStore
from service.engine.sessions import ModelSessions

VOCAB, EOS, CYCLE = 12, 3, (5, 6, 7)
CFG = preset("tiny", vocab_size=VOCAB, max_len=64)


class LoopingDecoder:
    """Prefers the token after the row's last one in CYCLE (5 6 7 5 6 7 ...); </s> is unlikely, every other token
    less likely than the cycle's, token 4 + t a little more likely at step t than the rest."""

    def __init__(self) -> None:
        self.t = np.zeros(0, dtype=np.int64)

    def add(self, src: np.ndarray, src_mask: np.ndarray) -> None:
        self.t = np.concatenate([self.t, np.zeros(len(src), dtype=np.int64)])

    def step(self, tokens: np.ndarray, width: int, log_probs: bool = True) -> tuple[np.ndarray, np.ndarray]:
        logits = np.full((len(tokens), VOCAB), -4.0)
        logits[:, EOS] = -6.0
        logits[np.arange(len(tokens)), (4 + self.t) % VOCAB] = -3.0
        following = np.array([CYCLE[(CYCLE.index(t) + 1) % 3] if t in CYCLE else CYCLE[0] for t in tokens])
        logits[np.arange(len(tokens)), following] = -0.1
        logits[:, :3] = -np.inf  # <pad>, <unk>, <s>
        self.t += 1
        order = np.argsort(-logits, axis=1, kind="stable")[:, :width]
        return order, np.take_along_axis(logits, order, axis=1)

    def apply(self, plan: StepPlan) -> None:
        self.t = self.t[plan.parents]


def ngram_counts(tokens: list[int], n: int) -> Counter:
    return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def translate(beam: int, **guard: float) -> list[int]:
    opts = SearchOptions(beam_size=beam, max_length=40, **guard)
    return search(LoopingDecoder(), [[4, EOS]], opts, CFG)[0][0].tokens


@pytest.mark.parametrize("beam", [1, 4])
def test_without_guards_the_decoder_loops(beam: int):
    assert max(ngram_counts(translate(beam), 4).values()) > 2


@pytest.mark.parametrize("beam", [1, 4])
@pytest.mark.parametrize(("n", "repeats"), [(4, 2), (3, 1), (2, 1)])
def test_no_n_gram_occurs_more_often_than_allowed(beam: int, n: int, repeats: int):
    tokens = translate(beam, no_repeat_ngram_size=n, ngram_repeats=repeats)
    assert len(tokens) >= 10  # it goes on, with other tokens
    assert max(ngram_counts(tokens, n).values()) <= repeats


def test_the_repetition_penalty_makes_held_tokens_less_likely():
    tokens = translate(1, repetition_penalty=50.0)
    assert len(set(tokens[:6])) == 6  # once a token is held, a fresh one is likelier than the cycle's next


def test_an_output_without_a_loop_is_unchanged_by_the_loop_guard():
    """A row whose 4-grams occur at most twice keeps its candidates and their order."""
    history = np.array([[5, 6, 7, 8, 5, 6, 7, 9, 0, 0]])
    candidates = np.array([[8, 9, 10]])
    logp = np.array([[-0.1, -0.2, -0.3]])
    options = guards.per_row([SearchOptions(no_repeat_ngram_size=4, ngram_repeats=2)], np.array([1]))
    tokens, scores = guards.apply(candidates, logp, history, np.array([7]), history[:, 6], options, 3)
    assert tokens.tolist() == [[8, 9, 10]] and scores.tolist() == logp.tolist()
    # "5 6 7 8" held twice: 8 after "5 6 7" would be its third
    history = np.array([[5, 6, 7, 8, 5, 6, 7, 8, 5, 6, 7, 0]])
    tokens, _ = guards.apply(candidates, logp, history, np.array([11]), history[:, 10], options, 2)
    assert tokens.tolist() == [[9, 10]]


class WidthRecordingDecoder(LoopingDecoder):
    """LoopingDecoder that records what each step asks for: its width and whether log-probabilities."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[tuple[int, bool]] = []

    def step(self, tokens: np.ndarray, width: int, log_probs: bool = True) -> tuple[np.ndarray, np.ndarray]:
        self.asked.append((width, log_probs))
        return super().step(tokens, width)


def test_the_loop_guard_widens_only_the_steps_it_may_change():
    """A greedy step asks for guards.EXTRA more candidates, with log-probabilities, exactly where the row's last token
    stands twice before with a token after it (it may then complete a 4-gram held twice); every other step asks what
    greedy search alone asks: one token, no log-probabilities."""
    decoder = WidthRecordingDecoder()
    opts = SearchOptions(max_length=40, no_repeat_ngram_size=4, ngram_repeats=2)
    tokens = search(decoder, [[4, EOS]], opts, CFG)[0][0].tokens
    watched = [t > 0 and tokens[: t - 1].count(tokens[t - 1]) >= 2 for t in range(len(decoder.asked))]
    assert 0 < sum(watched) < len(watched)
    assert decoder.asked == [(1 + guards.EXTRA, True) if w else (1, False) for w in watched]


def test_watching_says_where_the_guards_may_change_a_step():
    def rows(*lengths: int) -> tuple[np.ndarray, np.ndarray]:
        """The two rows' histories cut to these lengths (zeros past them) and their last tokens."""
        history = np.array([[5, 6, 7, 5, 6, 7, 5, 0], [5, 6, 5, 9, 0, 0, 0, 0]])
        history[np.arange(8) >= np.array(lengths)[:, None]] = 0
        return history, history[[0, 1], np.array(lengths) - 1]

    loop_guard = guards.per_row([SearchOptions(no_repeat_ngram_size=4, ngram_repeats=2)] * 2, np.array([1, 1]))
    assert not guards.watching(*rows(6, 4), loop_guard)  # the last 7 stands once before, 9 never
    assert not guards.watching(*rows(6, 3), loop_guard)  # the second row's last 5 once
    assert guards.watching(*rows(7, 4), loop_guard)  # the first row's last 5 twice: "5 6 7" may recur
    one_row_guarded = guards.per_row([SearchOptions(no_repeat_ngram_size=4, ngram_repeats=2), SearchOptions()],
                                     np.array([1, 1]))
    assert not guards.watching(*rows(6, 3), one_row_guarded)
    assert guards.watching(*rows(7, 3), one_row_guarded)
    assert not guards.watching(*rows(6, 3), guards.per_row([SearchOptions()] * 2, np.array([1, 1])))
    unigrams = guards.per_row([SearchOptions(no_repeat_ngram_size=1)] * 2, np.array([1, 1]))
    assert guards.watching(*rows(1, 1), unigrams)  # any candidate may be held already
    penalty = guards.per_row([SearchOptions(repetition_penalty=1.2)] * 2, np.array([1, 1]))
    assert guards.watching(*rows(1, 1), penalty)  # a penalty re-scores every step


@pytest.mark.parametrize("beam", [1, 3])
@pytest.mark.parametrize("guard", [{"no_repeat_ngram_size": 4, "ngram_repeats": 2}, {"no_repeat_ngram_size": 2},
                                   {"repetition_penalty": 1.5, "no_repeat_ngram_size": 3}])
def test_steps_the_guards_do_not_watch_translate_as_watched_ones(beam: int, guard: dict, monkeypatch):
    """Every step watched, as before the guards said where they may change one: the same hypotheses and scores."""
    opts = SearchOptions(beam_size=beam, n_best=beam, max_length=40, **guard)
    sources = [[4, EOS], [5, 4, EOS], [6, 6, 6, EOS]]
    hypotheses = search(LoopingDecoder(), sources, opts, CFG)
    monkeypatch.setattr(guards, "watching", lambda *_: True)
    assert search(LoopingDecoder(), sources, opts, CFG) == hypotheses


def test_guards_are_off_by_default():
    assert not guards.wanted(SearchOptions())
    assert translate(1) == translate(1, no_repeat_ngram_size=0, repetition_penalty=1.0)


def longest_repeat(hyps: list[list], n: int = 4) -> int:
    return max(max(ngram_counts(h.tokens, n).values(), default=0) for sentence in hyps for h in sentence)


@pytest.mark.parametrize("beam", [1, 4])
def test_the_device_decoder_cuts_a_loop_as_the_host_does(tiny_model_dir: Path, beam: int):
    """The search with the guards over the decoder a GPU runs in CUDA graphs (service.engine.graphed's buckets, here
    on the CPU provider, capture aside), which asks it for guards.EXTRA more candidates a step: the host decoder's
    translations, and no 4-gram more than twice, where the tiny model's random weights loop without the guards."""
    model = ModelSessions(tiny_model_dir, ModelOptions(provider="cpu", threads=1, kernels=False))
    batch, cfg = sources(3, seed=1), model.model_config
    guarded = SearchOptions(beam_size=beam, max_length_extra=40, no_repeat_ngram_size=4, ngram_repeats=2)
    device = search(BucketedDecoder(model, BucketStore(model, model.decoder, capture=False)), batch, guarded, cfg)
    assert_same(device, search(ExportedDecoder(model), batch, guarded, cfg))
    assert longest_repeat(device) <= 2
    assert longest_repeat(search(ExportedDecoder(model), batch, SearchOptions(beam_size=beam, max_length_extra=40),
                                 cfg)) > 2


@pytest.mark.parametrize(("n", "repeats"), [(2, 1), (3, 1), (4, 2), (3, 3)])
def test_may_repeat_spares_no_row_with_a_banned_candidate(n: int, repeats: int):
    """apply() runs repeated() only on the rows may_repeat() names: every row with a banned candidate is one (random
    histories over a few tokens, where n-grams repeat often), and some rows are spared."""
    rng = np.random.default_rng(n * 10 + repeats)
    rows, length = 400, 24
    history = rng.integers(4, 8, size=(rows, length + 3))
    lengths = rng.integers(0, length + 1, size=rows)
    candidates = rng.integers(4, 8, size=(rows, 4))
    repeats_per_row = np.full(rows, repeats)
    banned = guards.repeated(candidates, history, lengths, n, repeats_per_row).any(axis=1)
    last = np.where(lengths > 0, history[np.arange(rows), lengths - 1], 2)  # <s> before a row's first token
    options = guards.per_row([SearchOptions(no_repeat_ngram_size=n, ngram_repeats=repeats)], np.array([rows]))
    may = guards.may_repeat(history, last, options)
    assert banned.any() and not (banned & ~may).any()
    assert (~may).any()
