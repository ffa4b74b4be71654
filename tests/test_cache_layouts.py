"""Every cache layout is a decoder (core.search.Decoder: add, step, apply a StepPlan) and translates as every other.

The layouts: the step as exported (service.engine.decoder's ExportedDecoder), our CPU kernels' slot table
(SlotTableDecoder), the GPU's buckets (service.engine.graphed, uncaptured on the CPU provider),
and a fourth that this file alone writes (NumpyCaches): it implements the interface and nothing else, and passes the
same tests. The reference is the step as exported.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from core.folder import GraphIO
from core.search import Decoder, Hypothesis, RunningBatch, SearchOptions, StepPlan, search
from service.engine.config import ModelOptions
from service.engine.decoder import ExportedDecoder, SlotTableDecoder
from service.engine.graphed import BucketedDecoder, BucketStore, tokens
from service.engine.sessions import ModelSessions


class NumpyCaches:
    """A fourth layout, for this test: every cache a NumPy array of the model's max_len slots, moved by NumPy
    indexing, and the step as exported run by plain session.run (no bindings, no cache graphs)."""

    def __init__(self, sessions: ModelSessions):
        self.sessions = sessions
        self.self_kv: list[np.ndarray] = []
        self.cross_kv: list[np.ndarray] = []
        self.positions = np.zeros(0, dtype=np.int64)
        self.src_mask = np.zeros((0, 0), dtype=bool)

    def add(self, src: np.ndarray, src_mask: np.ndarray) -> None:
        s, cfg = self.sessions, self.sessions.model_config
        cross = s.encoder.run(s.cross_names, {GraphIO.SRC: src, GraphIO.SRC_MASK: src_mask})
        new_self = np.zeros((len(src), cfg.n_heads, cfg.max_len, cfg.d_head), s.cache_type)
        if not len(self.positions):
            self.cross_kv, self.src_mask = cross, src_mask
            self.self_kv = [new_self] * len(s.self_names)
        else:
            length = max(self.src_mask.shape[1], src_mask.shape[1])
            self.cross_kv = [np.concatenate([pad_source(a, length), pad_source(b, length)])
                             for a, b in zip(self.cross_kv, cross)]
            self.src_mask = np.concatenate([pad_source(self.src_mask, length), pad_source(src_mask, length)])
            self.self_kv = [np.concatenate([value, new_self]) for value in self.self_kv]
        self.positions = np.concatenate([self.positions, np.zeros(len(src), dtype=np.int64)])

    def step(self, tokens: np.ndarray, width: int, log_probs: bool = True) -> tuple[np.ndarray, np.ndarray]:
        s = self.sessions
        feeds = {GraphIO.TOKENS: tokens.astype(np.int64), GraphIO.POSITIONS: self.positions,
                 GraphIO.WIDTH: np.array([min(width, s.model_config.vocab_size)], dtype=np.int64),
                 GraphIO.SRC_MASK: self.src_mask, **dict(zip(s.self_names, self.self_kv)),
                 **dict(zip(s.cross_names, self.cross_kv))}
        outputs = s.decoder.run([GraphIO.TOP_TOKENS, GraphIO.TOP_LOGP, *s.new_self_names], feeds)
        self.self_kv = outputs[2:]
        self.positions = self.positions + 1
        return outputs[0], outputs[1]

    def apply(self, plan: StepPlan) -> None:
        self.self_kv = [value[plan.parents] for value in self.self_kv]
        self.positions = self.positions[plan.parents]
        if plan.places is not None:
            self.cross_kv = [value[plan.places] for value in self.cross_kv]
            self.src_mask = self.src_mask[plan.places]


def pad_source(x: np.ndarray, length: int) -> np.ndarray:
    """A source mask (N, S) or encoder keys/values (N, H, S, Dh) padded along the source to `length`."""
    axis = 1 if x.ndim == 2 else 2
    pads = [(0, 0)] * x.ndim
    pads[axis] = (0, length - x.shape[axis])
    return np.pad(x, pads)


@pytest.fixture(scope="module")
def exported(tiny_model_dir: Path) -> ModelSessions:
    return ModelSessions(tiny_model_dir, ModelOptions(provider="cpu", threads=1, kernels=False))


@pytest.fixture(scope="module")
def with_kernels(tiny_model_dir: Path) -> ModelSessions:
    sessions = ModelSessions(tiny_model_dir, ModelOptions(provider="cpu", threads=1))
    assert sessions.kernels, "the kernels are not built: python -m service.engine.kernels.build (make test runs it)"
    return sessions


@pytest.fixture(scope="module")
def layouts(exported: ModelSessions, with_kernels: ModelSessions) -> dict[str, Callable[[], Decoder]]:
    """A new empty decoder of each layout."""
    store = BucketStore(exported, exported.decoder, capture=False, encoder=exported.encoder)
    return {"exported": lambda: ExportedDecoder(exported), "slot table": lambda: SlotTableDecoder(with_kernels),
            "buckets": lambda: BucketedDecoder(exported, store), "numpy": lambda: NumpyCaches(exported)}


LAYOUTS = ["slot table", "buckets", "numpy"]


def sources(count: int, seed: int) -> list[list[int]]:
    """Source ids of varied lengths (3 to 24 tokens), </s> last."""
    rng = np.random.default_rng(seed)
    return [[*rng.integers(4, 90, rng.integers(3, 24)).tolist(), 2] for _ in range(count)]


def assert_same(ours: list[list[Hypothesis]], reference: list[list[Hypothesis]]) -> None:
    """The same tokens; the scores equal but for the last bits of a float32 sum (padding and other kernels change
    the order of the additions)."""
    assert tokens(ours) == tokens(reference)
    assert [h.score for hyps in ours for h in hyps] == pytest.approx(
        [h.score for hyps in reference for h in hyps], abs=1e-4)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("beam_size", [1, 4])
def test_a_batch_translates_as_the_step_as_exported(layouts, exported: ModelSessions, layout: str, beam_size: int):
    batch, opts = sources(9, seed=beam_size), SearchOptions(beam_size=beam_size, n_best=beam_size)
    assert_same(search(layouts[layout](), batch, opts, exported.model_config),
                search(layouts["exported"](), batch, opts, exported.model_config))


def run_with_joins_and_removals(decoder: Decoder, cfg) -> dict:
    """Sentences of mixed beam sizes that join a running batch (longer sources than those running) and that the
    caller removes, step by step; each sentence's hypotheses."""
    batch, done = RunningBatch(decoder, cfg), {}
    short, long = sources(3, seed=1), [[*range(4, 30), 2], [*range(30, 70), 2]]
    options = [SearchOptions(beam_size=k, n_best=k, max_length_extra=30) for k in (1, 4, 2)]
    batch.add(short, options, ["a", "b", "c"])
    for step in range(200):
        if step == 3:
            batch.add(long, options[:2], ["d", "e"])
        if step == 6:
            done |= {s.key: s.result() for s in batch.remove({"b"})}
        if step == 9:
            batch.add(short[:1], options[1:2], ["f"])
        done |= {s.key: s.result() for s in batch.step()}
        if not len(batch):
            break
    return done


@pytest.mark.parametrize("layout", LAYOUTS)
def test_joins_and_removals_mid_batch_translate_as_the_step_as_exported(layouts, exported: ModelSessions,
                                                                       layout: str):
    ours = run_with_joins_and_removals(layouts[layout](), exported.model_config)
    reference = run_with_joins_and_removals(layouts["exported"](), exported.model_config)
    assert set(ours) == set(reference) == {"a", "b", "c", "d", "e", "f"}
    assert_same([ours[key] for key in reference], list(reference.values()))


def test_a_layout_that_misapplies_a_plan_translates_otherwise(layouts, exported: ModelSessions):
    """The comparison can fail: a layout that keeps each row's own caches where a beam's row continues another's
    (it ignores the plan's parents) does not translate as the others."""

    class IgnoresParents(NumpyCaches):
        def apply(self, plan: StepPlan) -> None:  # each row its place's caches (its own where none is named)
            own = np.arange(len(plan.parents)) if plan.places is None else plan.places
            super().apply(StepPlan(own, plan.places))

    batch, opts = sources(9, seed=4), SearchOptions(beam_size=4, n_best=4)
    assert tokens(search(IgnoresParents(exported), batch, opts, exported.model_config)) != tokens(
        search(layouts["exported"](), batch, opts, exported.model_config))


def test_the_slot_table_holds_a_sentences_encoder_keys_values_once(with_kernels: ModelSessions):
    """Its rows read their sentence's encoder keys/values through cross_from: one row of them a sentence, whatever
    its beam, through joins, removals and sentences that end; the rows of sentences gone stay until they are half of
    those held (no move when one sentence of several leaves)."""
    decoder = SlotTableDecoder(with_kernels)
    batch = RunningBatch(decoder, with_kernels.model_config)
    options = [SearchOptions(beam_size=k, max_length_extra=30) for k in (4, 1, 2)]
    batch.add(sources(3, seed=2), options, ["a", "b", "c"])
    held = []
    for step in range(200):
        if step == 2:
            batch.add(sources(2, seed=3), options[:2], ["d", "e"])
        if step == 4:
            batch.remove({"a"})
        batch.step()
        if not len(batch):
            break
        held.append((decoder.cross_rows, len(batch)))
        assert decoder.cross_kv[0].shape()[0] >= decoder.cross_rows  # the rows in use, then room
        assert decoder.self_kv[0].shape()[0] >= len(decoder.positions)
        assert decoder.cache_bytes == sum(int(np.prod(v.shape())) * 4 for v in decoder.self_kv + decoder.cross_kv)
    assert held and all(sentences <= rows < 2 * sentences for rows, sentences in held)
    assert any(rows > sentences for rows, sentences in held)  # the test can tell a move left undone
    assert decoder.cache_bytes == 0  # the batch is empty: its caches are gone


def join_where_one_left(decoder: Decoder, cfg) -> tuple[dict, list[bool]]:
    """Three sentences, the first removed after a step, then a shorter one joins: each sentence's hypotheses, and
    for a decoder whose caches keep room after their rows (SlotTableDecoder), whether each cache tensor stayed
    across the join."""
    batch, opts = RunningBatch(decoder, cfg), SearchOptions(max_length_extra=30)
    batch.add([[*range(4, 30), 2], [*range(30, 56), 2], [*range(56, 82), 2]], [opts] * 3, ["a", "b", "c"])
    done = {s.key: s.result() for s in batch.step()}
    done |= {s.key: s.result() for s in batch.remove({"a"})}
    before = decoder.self_kv + decoder.cross_kv
    batch.add([[5, 6, 7, 2]], [opts], ["d"])
    kept = [after is tensor for after, tensor in zip(decoder.self_kv + decoder.cross_kv, before)]
    while len(batch):
        done |= {s.key: s.result() for s in batch.step()}
    return done, kept


def test_a_join_takes_the_rows_that_left_without_copying_the_running_rows(with_kernels: ModelSessions,
                                                                          exported: ModelSessions):
    """A sentence that joins where one left is written into the rows it left (joined_in_place): the caches keep
    their memory, and the batch translates as the step as exported, which copies the running rows."""
    ours, kept = join_where_one_left(SlotTableDecoder(with_kernels), with_kernels.model_config)
    reference, copied = join_where_one_left(ExportedDecoder(exported), exported.model_config)
    assert kept and all(kept)
    assert not any(copied)  # the test can tell a copy
    assert set(ours) == set(reference) == {"a", "b", "c", "d"}
    assert_same([ours[key] for key in reference], list(reference.values()))
