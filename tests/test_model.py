"""The Transformer's parts against their formulas, cached decoding, beam search and the tokenizer."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from core.search import (
    Hypothesis,
    RunningBatch,
    SearchOptions,
    StepPlan,
    block_items,
    filled_order,
    length_penalty,
    pad_batch,
    search,
)
from core.slots import CACHE_SLOTS, FEW_ROWS, grown_slots
from core.tokenizer import Tokenizer
from model.config import preset
from model.decode import CachedDecoder, translate_ids
from model.tokenizer import train_sentencepiece
from model.transformer import Transformer, attention, best_next_tokens, causal_mask, sinusoidal_positions

torch.set_num_threads(1)

VOCAB = 12
PAD, BOS, EOS = 0, 2, 3
MAX_LENGTH = 9  # decoding steps in the search tests


def tiny_model(pre_norm: bool = False, seed: int = 0) -> Transformer:
    """A random two-layer model in eval mode (its dropout would otherwise make outputs random)."""
    torch.manual_seed(seed)
    return Transformer(preset("tiny", vocab_size=VOCAB, n_layers=2, dropout=0.1, pre_norm=pre_norm)).eval()


def random_sources(lengths: list[int], seed: int = 0) -> list[list[int]]:
    """Random source id sequences of the given lengths, each ending with </s>."""
    rng = np.random.default_rng(seed)
    return [rng.integers(4, VOCAB, n - 1).tolist() + [EOS] for n in lengths]


def padded(sources: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    src, mask = pad_batch(sources, PAD)
    return torch.as_tensor(src), torch.as_tensor(mask)


# --- the formulas -----------------------------------------------------------------------------------


def test_positional_encoding_matches_the_formula():
    length, d_model = 60, 16
    expected = torch.zeros(length, d_model)
    for pos in range(length):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            expected[pos, 2 * i] = math.sin(angle)
            expected[pos, 2 * i + 1] = math.cos(angle)
    torch.testing.assert_close(sinusoidal_positions(length, d_model), expected, atol=1e-6, rtol=0)


def reference_attention(q, k, v, mask):
    """softmax(Q K^T / sqrt(d_k)) V written out with einsum; masked scores are -inf."""
    scores = torch.einsum("nhqd,nhkd->nhqk", q, k) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~mask, -math.inf)
    weights = torch.exp(scores - scores.amax(-1, keepdim=True))
    weights = weights / weights.sum(-1, keepdim=True)
    return torch.einsum("nhqk,nhkd->nhqd", weights, v), weights


def test_attention_equals_direct_computation():
    torch.manual_seed(0)
    q = torch.randn(2, 3, 4, 8, dtype=torch.float64)
    k, v = torch.randn(2, 2, 3, 6, 8, dtype=torch.float64)
    mask = torch.rand(2, 1, 4, 6) > 0.3
    mask[..., 0] = True  # every query may attend to something
    out, weights = attention(q, k, v, mask)
    expected_out, expected_weights = reference_attention(q, k, v, mask)
    torch.testing.assert_close(weights, expected_weights, atol=1e-12, rtol=0)
    torch.testing.assert_close(out, expected_out, atol=1e-12, rtol=0)


def test_padded_keys_get_exactly_zero_weight():
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 2, 5, 8) * 10, torch.randn(3, 2, 7, 8) * 10, torch.randn(3, 2, 7, 8)
    key_mask = torch.arange(7)[None, :] < torch.tensor([7, 4, 1])[:, None]  # (N, S): True at real tokens
    _, weights = attention(q, k, v, key_mask[:, None, None, :])
    assert torch.all(weights.masked_select(~key_mask[:, None, None, :].expand_as(weights)) == 0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 2, 5))


def test_look_ahead_mask_hides_every_future_position():
    length = 6
    expected = torch.tensor([[j <= i for j in range(length)] for i in range(length)])
    assert torch.equal(causal_mask(length), expected)
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 1, 2, length, 8)
    _, weights = attention(q, k, v, causal_mask(length))
    assert torch.all(weights.triu(diagonal=1) == 0)
    assert torch.all(weights.masked_select(causal_mask(length)) > 0)


# --- cached decoding --------------------------------------------------------------------------------


def step_logp(decoder: CachedDecoder, tokens: list[int]) -> np.ndarray:
    """One step of the decoder: every row's log-probabilities over the whole vocabulary, (rows, V)."""
    best, logp = decoder.step(np.array(tokens), VOCAB)
    out = np.empty_like(logp)
    np.put_along_axis(out, best, logp, axis=1)
    return out


def teacher_forced_logp(model: Transformer, source: list[int], tgt: list[int]) -> np.ndarray:
    """Log-probabilities (T, V) after each prefix of tgt, decoded in one pass."""
    src, mask = padded([source])
    logits = model.decode(torch.tensor([tgt]), model.cross_keys_values(model.encode(src, mask)), mask)
    return logits[0].log_softmax(-1).numpy()


@pytest.mark.parametrize("pre_norm", [False, True], ids=["post-LN", "pre-LN"])
@torch.inference_mode()
def test_cached_steps_equal_full_decoding_also_for_rows_that_join_later(pre_norm):
    """Rows at different positions share each step: a sentence that joins after three steps, with a longer source,
    gets the log-probabilities it gets decoded alone in one pass; the cache grows twice on the way."""
    model = tiny_model(pre_norm)
    first, second = random_sources([4, 7], seed=2)
    tgt = [[BOS, *torch.randint(4, VOCAB, (20,)).tolist()] for _ in range(2)]
    decoder = CachedDecoder(model)
    decoder.add(*pad_batch([first], PAD))
    got: list[list[np.ndarray]] = [[], []]
    for t in range(len(tgt[0])):
        if t == 3:
            decoder.add(*pad_batch([second], PAD))
        rows = step_logp(decoder, [tgt[0][t]] + ([tgt[1][t - 3]] if t >= 3 else []))
        got[0].append(rows[0])
        if t >= 3:
            got[1].append(rows[1])
    assert decoder.self_kv[0][0].size(2) == 3 * CACHE_SLOTS
    np.testing.assert_allclose(np.stack(got[0]), teacher_forced_logp(model, first, tgt[0]), atol=1e-5)
    np.testing.assert_allclose(np.stack(got[1]), teacher_forced_logp(model, second, tgt[1][:-3]), atol=1e-5)


def test_a_cache_of_few_rows_doubles_and_one_of_many_grows_by_cache_slots():
    assert [grown_slots(slots + 1, slots, 1, 512) for slots in (8, 16, 32, 256)] == [16, 32, 64, 512]
    assert grown_slots(9, 8, FEW_ROWS, 512) == 16 and grown_slots(33, 32, FEW_ROWS + 1, 512) == 32 + CACHE_SLOTS
    assert grown_slots(40, 8, 1, 512) == 40  # what the rows need, where that is more than twice
    assert grown_slots(65, 64, 1, 100) == 100  # never beyond the model's positions


def test_padding_does_not_change_a_sentence_s_logits():
    model = tiny_model()
    sources = random_sources([7, 3])
    tgt = torch.cat([torch.full((2, 1), BOS), torch.randint(4, VOCAB, (2, 4))], dim=1)
    src, src_mask = padded(sources)
    with torch.no_grad():
        batch = model(src, src_mask, tgt, torch.ones_like(tgt, dtype=torch.bool))
        alone = model(*padded(sources[1:]), tgt[1:], torch.ones_like(tgt[1:], dtype=torch.bool))
    assert (batch[1:] - alone).abs().max() <= 1e-5


# --- search -----------------------------------------------------------------------------------------


class TableDecoder:
    """A toy decoder whose next-token logits are a random table of (sentence, step, previous token); the source of
    sentence i is [i + 4, </s>]."""

    def __init__(self, table: np.ndarray):
        self.table = table
        self.sentence = np.zeros(0, dtype=np.int64)  # which sentence each row belongs to
        self.t = np.zeros(0, dtype=np.int64)  # each row's position

    def add(self, src: np.ndarray, src_mask: np.ndarray) -> None:
        self.sentence = np.concatenate([self.sentence, src[:, 0] - 4])
        self.t = np.concatenate([self.t, np.zeros(len(src), dtype=np.int64)])

    def step(self, tokens: np.ndarray, width: int, log_probs: bool = True) -> tuple[np.ndarray, np.ndarray]:
        logp, best = best_next_tokens(torch.as_tensor(self.table[self.sentence, self.t, tokens]), width)
        self.t += 1
        return best.numpy(), logp.numpy()

    def apply(self, plan: StepPlan) -> None:
        self.sentence, self.t = self.sentence[plan.parents], self.t[plan.parents]


CFG = preset("tiny", vocab_size=VOCAB, max_len=MAX_LENGTH)


def table_options(k: int, n_best: int = 1) -> SearchOptions:
    """Options under which every sentence may run for MAX_LENGTH steps."""
    return SearchOptions(beam_size=k, n_best=n_best, max_length=MAX_LENGTH)


def table_sources(table: np.ndarray) -> list[list[int]]:
    return [[i + 4, EOS] for i in range(len(table))]


def random_table(sentences: int, seed: int = 0) -> np.ndarray:
    """Logits (sentences, MAX_LENGTH, VOCAB, VOCAB) peaked enough to end sentences at varied lengths."""
    return np.random.default_rng(seed).normal(0.0, 2.0, (sentences, MAX_LENGTH, VOCAB, VOCAB))


def scored_tokens(tokens: list[int], limit: int) -> list[int]:
    """What a hypothesis's score covers: one shorter than the limit ended with </s>; one at the limit was cut."""
    return tokens + [EOS] if len(tokens) < limit else tokens


def table_score(table: np.ndarray, tokens: list[int], alpha: float = 0.6, forced: bool = False) -> float:
    """Length-normalized log-probability of a hypothesis under one sentence's table, step by step; a forced first
    token counts 0."""
    target = scored_tokens(tokens, MAX_LENGTH)
    previous = [BOS] + target[:-1]
    logp = sum(torch.tensor(table[t, p]).log_softmax(-1)[y].item() for t, (p, y) in enumerate(zip(previous, target))
               if t or not forced)
    return logp / length_penalty(len(target), alpha)


def table_greedy(table: np.ndarray) -> list[list[int]]:
    return [h[0].tokens for h in search(TableDecoder(table), table_sources(table), table_options(1), CFG)]


def table_beam(table: np.ndarray, k: int, n_best: int = 1) -> list[list[Hypothesis]]:
    return search(TableDecoder(table), table_sources(table), table_options(k, n_best), CFG)


def test_beam_search_of_width_one_is_greedy_search():
    table = random_table(20)
    greedy = table_greedy(table)
    assert len({len(tokens) for tokens in greedy}) >= 4  # sentences end at varied lengths, some at the limit
    assert [h[0].tokens for h in table_beam(table, k=1)] == greedy



class LogProbsRecordingDecoder(TableDecoder):
    """TableDecoder that records each step's log_probs, and gives NaN in place of log-probabilities not asked for."""

    def __init__(self, table: np.ndarray):
        super().__init__(table)
        self.asked: list[bool] = []

    def step(self, tokens: np.ndarray, width: int, log_probs: bool = True) -> tuple[np.ndarray, np.ndarray]:
        self.asked.append(log_probs)
        best, logp = super().step(tokens, width)
        return best, logp if log_probs else np.full_like(logp, np.nan)


@pytest.mark.parametrize(("k", "guard", "asked"), [(1, {}, False), (3, {}, True),
                                                   (3, {"no_repeat_ngram_size": 2}, True),
                                                   (1, {"repetition_penalty": 1.2}, True)])
def test_only_a_step_that_reads_log_probabilities_asks_for_them(k, guard, asked):
    """Greedy search reads the best token alone; beams and a repetition penalty read the log-probabilities (the
    n-gram guard only at the steps it may change: tests/test_guards.py)."""
    table = random_table(6, seed=3)
    decoder = LogProbsRecordingDecoder(table)
    opts = SearchOptions(beam_size=k, max_length=MAX_LENGTH, **guard)
    translations = [h[0].tokens for h in search(decoder, table_sources(table), opts, CFG)]
    assert set(decoder.asked) == {asked}
    assert translations == [h[0].tokens for h in search(TableDecoder(table), table_sources(table), opts, CFG)]


class PlanRecordingDecoder(TableDecoder):
    """TableDecoder that records the rows of each step and the plans it is given."""

    def __init__(self, table: np.ndarray):
        super().__init__(table)
        self.rows: list[int] = []
        self.plans: list[StepPlan] = []

    def step(self, tokens: np.ndarray, width: int, log_probs: bool = True) -> tuple[np.ndarray, np.ndarray]:
        self.rows.append(len(tokens))
        return super().step(tokens, width)

    def apply(self, plan: StepPlan) -> None:
        self.plans.append(plan)
        super().apply(plan)


def test_a_beam_sentence_holds_one_row_until_its_first_step():
    """Its beams would all be that row before: the first step computes a row a sentence, and its plan makes each
    beam sentence's beam_size rows of its row (their parent and place); the translations are those of sentences
    that joined one at a time."""
    table = random_table(3, seed=4)
    decoder = PlanRecordingDecoder(table)
    batch = RunningBatch(decoder, CFG)
    batch.add(table_sources(table), [table_options(k, n_best=k) for k in (3, 1, 2)], [0, 1, 2])
    assert batch.rows == 3
    results = {s.key: s.result() for s in batch.step()}
    assert not results and decoder.rows == [3] and batch.rows == 6
    (plan,) = decoder.plans
    assert plan.parents.tolist() == plan.places.tolist() == [0, 0, 0, 1, 2, 2]
    while len(batch):
        results |= {s.key: s.result() for s in batch.step()}
    assert decoder.rows[1] == 6
    for i, k in enumerate((3, 1, 2)):
        (alone,) = search(TableDecoder(table[i : i + 1]), table_sources(table[i : i + 1]), table_options(k, k), CFG)
        assert [h.tokens for h in results[i]] == [h.tokens for h in alone]

def test_beam_search_scores_are_right_and_beat_greedy():
    table = random_table(20, seed=1)
    beams = table_beam(table, k=4, n_best=4)
    for sentence_table, greedy_tokens, hyps in zip(table, table_greedy(table), beams):
        assert len(hyps) == 4
        for h in hyps:
            assert h.score == pytest.approx(table_score(sentence_table, h.tokens), abs=1e-9)
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
        assert hyps[0].score >= table_score(sentence_table, greedy_tokens) - 1e-9
    assert sum(hyps[0].tokens != g for hyps, g in zip(beams, table_greedy(table))) >= 3  # beam finds better ones


def test_a_forced_first_token_comes_first_and_adds_nothing_to_the_score():
    """A many-to-many model's target language token (SearchOptions.forced_token) begins every hypothesis at
    log-probability 0, greedy or beam, and the search goes on after it; sentences with and without one share a
    batch, the others translating as alone."""
    table, forced = random_table(6, seed=2), 7
    options = [SearchOptions(beam_size=k, n_best=k, max_length=MAX_LENGTH, forced_token=forced if i % 2 else None)
               for i, k in enumerate([1, 1, 3, 3, 2, 2])]
    batch, results = RunningBatch(TableDecoder(table), CFG), {}
    batch.add(table_sources(table), options, list(range(len(table))))
    while len(batch):
        results.update((s.key, s.result()) for s in batch.step())
    for i, opts in enumerate(options):
        if opts.forced_token is None:
            (alone,) = search(TableDecoder(table[i : i + 1]), [[4, EOS]], opts, CFG)
            assert [h.tokens for h in results[i]] == [h.tokens for h in alone]
            continue
        assert {h.tokens[0] for h in results[i]} == {forced}
        if opts.beam_size == 1:  # after the forced token, the most likely one at each step
            target = scored_tokens(results[i][0].tokens, MAX_LENGTH)
            assert all(y == table[i, t, p].argmax() for t, (p, y) in enumerate(zip(target, target[1:]), start=1))
        else:
            assert len(results[i]) == opts.beam_size
            for h in results[i]:
                assert h.score == pytest.approx(table_score(table[i], h.tokens, forced=True), abs=1e-9)


def test_beam_search_goes_on_while_a_live_hypothesis_is_better():
    sure = 4
    table = np.full((1, MAX_LENGTH, VOCAB, VOCAB), -10.0)
    table[0, :5, :, sure] = 0.0  # the path the model is sure of: five tokens, then </s>
    table[0, :5, :, EOS] = -5.0  # at every step before, ending there is the runner-up
    table[0, 5:, :, EOS] = 0.0
    assert table_greedy(table) == [[sure] * 5]
    assert table_beam(table, k=2)[0][0].tokens == [sure] * 5


def max_length(source: list[int]) -> int:
    """Decoding steps for a source: they differ, so that sentences leave a batch at different steps."""
    return len(source) + 2


@torch.inference_mode()
def model_beam(model: Transformer, sources: list[list[int]], k: int, n_best: int = 1) -> list[list[Hypothesis]]:
    """Beam search over the model through model.decode's cached decoder."""
    batch = RunningBatch(CachedDecoder(model), model.cfg)
    batch.add(sources, [model_options(source, k, n_best) for source in sources], list(range(len(sources))))
    results = {}
    while len(batch):
        results.update((s.key, s.result()) for s in batch.step())
    return [results[i] for i in range(len(sources))]


def model_options(source: list[int], k: int, n_best: int = 1) -> SearchOptions:
    return SearchOptions(beam_size=k, n_best=n_best, max_length=max_length(source))


@torch.inference_mode()
def model_score(model: Transformer, source: list[int], tokens: list[int], alpha: float = 0.6) -> float:
    """Length-normalized log-probability of a hypothesis, computed teacher-forced in one pass."""
    target = scored_tokens(tokens, max_length(source))
    tgt_in = torch.tensor([[BOS] + target[:-1]])
    logits = model(*padded([source]), tgt_in, torch.ones_like(tgt_in, dtype=torch.bool))
    logp = logits[0].double().log_softmax(-1)[torch.arange(len(target)), target].sum().item()
    return logp / length_penalty(len(target), alpha)


def test_cached_beam_search_scores_are_the_model_s():
    """Beam search reorders the self-attention cache at every step; wrong rows would give other scores."""
    model, sources = tiny_model(seed=1), random_sources([5, 8, 3, 6], seed=1)
    for source, hyps in zip(sources, model_beam(model, sources, k=4, n_best=4)):
        assert len({tuple(h.tokens) for h in hyps}) == 4
        for h in hyps:
            assert h.score == pytest.approx(model_score(model, source, h.tokens), abs=1e-4)


def test_a_batch_translates_as_its_sentences_one_by_one():
    model, sources = tiny_model(seed=3), random_sources([5, 8, 3, 6], seed=3)
    for source, hyps in zip(sources, model_beam(model, sources, k=3)):
        (alone,) = model_beam(model, [source], k=3)
        assert hyps[0].tokens == alone[0].tokens
        assert hyps[0].score == pytest.approx(alone[0].score, abs=1e-5)


@torch.inference_mode()
def test_sentences_that_join_a_running_batch_translate_as_alone():
    """Greedy and beam sentences of several beam sizes share the steps, joining at different ones (one into an
    empty batch); each gets the hypotheses it gets alone."""
    model, sources = tiny_model(seed=5), random_sources([5, 8, 3, 6, 4, 7, 9, 9], seed=5)
    beams = [1, 3, 2, 1, 4, 2, 3, 1]
    joins = {0: [0, 6, 1], 2: [2, 7], 3: [3, 4], 12: [5]}  # step -> sentences that join before it
    batch, results, step = RunningBatch(CachedDecoder(model), model.cfg), {}, 0
    while len(batch) or joins:
        for i in joins.pop(step, []):
            batch.add([sources[i]], [model_options(sources[i], beams[i], n_best=beams[i])], [i])
        if step == 4:  # nobody waits for this one any more: its rows leave from the middle of the batch
            assert [s.key for s in batch.remove({6})] == [6]
        if step == 12:
            assert len(batch) == batch.rows == 1  # the others have ended: this one (beam 2) starts an empty batch,
            # with one row until its first step
        if len(batch):
            results.update((s.key, s.result()) for s in batch.step())
        step += 1
    assert 6 not in results
    for i, source in enumerate(sources):
        if i == 6:
            continue
        (alone,) = model_beam(model, [source], beams[i], n_best=beams[i])
        assert [h.tokens for h in results[i]] == [h.tokens for h in alone]
        assert [h.score for h in results[i]] == pytest.approx([h.score for h in alone], abs=1e-5)


@pytest.mark.parametrize("beam_size", [1, 3])
def test_cached_and_uncached_translation_agree(beam_size):
    model, sources = tiny_model(seed=4), random_sources([5, 8, 3, 6], seed=4)
    opts = SearchOptions(beam_size=beam_size, max_length=MAX_LENGTH)
    cached = translate_ids(model, sources, opts, cached=True)
    uncached = translate_ids(model, sources, opts, cached=False)
    assert [h[0].tokens for h in cached] == [h[0].tokens for h in uncached]


# --- tokenizer --------------------------------------------------------------------------------------


def test_tokenizer_round_trips_text(tmp_path, sentence_pairs):
    texts = [side for pair in sentence_pairs for side in pair]
    tokenizer = Tokenizer(train_sentencepiece(texts * 4, tmp_path / "spm", vocab_size=60))
    assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.bos_id, tokenizer.eos_id) == (0, 1, 2, 3)
    unseen = ["Die Kinder trinken heißen Tee im Park.", "Where is my green book?"]
    ids = tokenizer.encode(texts + unseen)
    assert all(tokenizer.unk_id not in seq and tokenizer.eos_id not in seq for seq in ids)
    assert tokenizer.decode(ids) == texts + unseen


def test_sentences_that_leave_a_running_batch_are_replaced_by_those_at_its_end():
    """filled_order: the sentences that stay keep their places, but those past the batch's new end, which fill the
    places of those that leave; block_items: their rows, a sentence's rows side by side."""
    stays = np.array([True, False, True, True, False, True])
    order = filled_order(stays)
    assert order.tolist() == [0, 5, 2, 3]
    assert block_items(np.array([1, 4, 2, 3, 1, 2]), order).tolist() == [0, 11, 12, 5, 6, 7, 8, 9]
    assert filled_order(np.array([True, True, False])).tolist() == [0, 1]
    assert filled_order(np.array([False, False])).tolist() == []
