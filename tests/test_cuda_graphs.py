"""TRANSLATOR_CUDA_GRAPHS's bucketed decoder (service.engine.graphed) on the CPU provider, where everything but the
capture runs: its translations are the eager decoder's, greedy and beam, as rows join, leave and outgrow their
buckets; and where capture cannot be used, one logged reason and the eager decoder."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
from test_cache_layouts import run_with_joins_and_removals, sources

from core.search import Hypothesis, RunningBatch, SearchOptions, StepPlan, pad_batch, search
from service.engine import graphed
from service.engine.config import ModelOptions
from service.engine.decoder import EagerDecoder, ExportedDecoder
from service.engine.graphed import (
    FIRST_SLOTS,
    BucketedDecoder,
    BucketStore,
    Shape,
    SwitchingDecoder,
    bucket_bytes,
    bucket_shape,
    bucket_size,
    encoder_key,
    row_position_bytes,
    tokens,
)
from service.engine.runner import ModelRunner
from service.engine.sessions import ModelSessions


@pytest.fixture(scope="module")
def model(tiny_model_dir: Path) -> ModelSessions:
    """The sessions as a GPU has them, on the CPU provider: the step as exported (our kernels are the CPU's)."""
    return ModelSessions(tiny_model_dir, ModelOptions(provider="cpu", threads=1, kernels=False))


def test_buckets_refuse_a_step_with_our_kernels(tiny_model_dir: Path):
    model = ModelSessions(tiny_model_dir, ModelOptions(provider="cpu", threads=1))
    assert model.kernels
    with pytest.raises(ValueError, match="slot table"):
        BucketStore(model, model.decoder, capture=False)


def assert_same(ours: list[list[Hypothesis]], eager: list[list[Hypothesis]]) -> None:
    """The same hypotheses in the same order, their scores equal but for the last bits of a float32 sum (padded
    slots and sources change the order of the additions)."""
    assert tokens(ours) == tokens(eager)
    assert [h.score for hyps in ours for h in hyps] == pytest.approx([h.score for hyps in eager for h in hyps],
                                                                     abs=1e-5)


def test_bucket_sizes():
    assert [bucket_size(n) for n in (1, 2, 3, 5, 64, 65)] == [1, 2, 4, 8, 64, 128]
    assert [bucket_size(n, 32, 100) for n in (1, 32, 33, 65, 99)] == [32, 32, 64, 100, 100]


@pytest.mark.parametrize("encoder", ["eager", "buckets"])
@pytest.mark.parametrize("beam_size", [1, 4])
@pytest.mark.parametrize("count", [1, 3, 9])
def test_translations_are_the_eager_decoders(model: ModelSessions, beam_size: int, count: int, encoder: str):
    """Sentences end at different steps (rows leave mid-batch, the row bucket shrinks) and run past FIRST_SLOTS
    positions (the slot bucket grows): every hypothesis and score as the eager decoder's, with the sentences encoded
    eagerly or in encoder buckets (padded rows and source)."""
    batch = sources(count, seed=count)
    opts = SearchOptions(beam_size=beam_size, n_best=beam_size, max_length_extra=40)
    store = BucketStore(model, model.decoder, capture=False, encoder=model.encoder if encoder == "buckets" else None)
    ours, eager = BucketedDecoder(model, store), ExportedDecoder(model)
    assert_same(search(ours, batch, opts, model.model_config), search(eager, batch, opts, model.model_config))
    assert ours.steps == eager.steps > FIRST_SLOTS
    slots = {shape.slots for shape in store.buckets}
    assert {FIRST_SLOTS, 2 * FIRST_SLOTS} <= slots
    if count > 1:
        assert len({shape.rows for shape in store.buckets}) > 1  # rows left: a smaller bucket


@pytest.mark.parametrize("encoder", ["eager", "buckets"])
def test_joins_and_removals_mid_batch_are_the_eager_decoders(model: ModelSessions, encoder: str):
    """A running batch that sentences join (longer sources than those running: the source bucket grows) and that
    the caller removes sentences from, of mixed beam sizes, step by step as the eager decoder's."""
    store = BucketStore(model, model.decoder, capture=False, encoder=model.encoder if encoder == "buckets" else None)
    ours = run_with_joins_and_removals(BucketedDecoder(model, store), model.model_config)
    eager = run_with_joins_and_removals(ExportedDecoder(model), model.model_config)
    assert set(ours) == set(eager) == {"a", "b", "c", "d", "e", "f"}
    assert_same([ours[key] for key in eager], list(eager.values()))
    assert len({shape.source for shape in store.buckets}) > 1
    if encoder == "buckets":  # (rows, source): 3 sentences of up to 24 tokens, then 2 of 27 and 41, then 1 short
        assert set(store.encoder_buckets) == {(4, 32), (2, 64), (1, 16)}


def test_the_most_rows_setting_bounds_the_model_decoders(tiny_model_dir: Path):
    """TRANSLATOR_CUDA_GRAPHS_MAX_ROWS reaches every decoder the model makes for a running batch (here with buckets
    made on the CPU provider, as a GPU would have them)."""
    runner = ModelRunner(tiny_model_dir, ModelOptions(provider="cpu", threads=1, kernels=False, cuda_graphs_max_rows=8))
    runner.buckets = BucketStore(runner.sessions, runner.sessions.decoder, capture=False)
    decoder = runner.new_decoder()
    assert isinstance(decoder, SwitchingDecoder) and decoder.most_rows == 8


@pytest.mark.parametrize("beam_size", [1, 4])
def test_a_batch_that_crosses_the_bound_of_captured_rows_translates_as_the_eager_decoder(model: ModelSessions,
                                                                                        beam_size: int):
    """SwitchingDecoder with a bound of 4 sentences' rows: 9 sentences start eagerly, move into buckets once 2 or
    fewer are left, and 6 that join then move them back: every hypothesis and score as the eager decoder's."""
    store = BucketStore(model, model.decoder, capture=False)
    switching = SwitchingDecoder(model, store, most_rows=4 * beam_size)
    batches = [RunningBatch(switching, model.model_config), RunningBatch(ExportedDecoder(model), model.model_config)]
    opts = SearchOptions(beam_size=beam_size, n_best=beam_size, max_length_extra=30)
    first, later = sources(9, seed=beam_size), sources(6, seed=10 + beam_size)
    finished: list[dict] = [{}, {}]
    moves = []
    for batch, done in zip(batches, finished):
        batch.add(first, [opts] * len(first), list(range(9)))
        joined = False
        for _ in range(300):
            if not joined and len(batch) <= 1:
                batch.add(later, [opts] * len(later), list(range(9, 15)))
                joined = True
            done |= {s.key: s.result() for s in batch.step()}
            if batch.decoder is switching and (not moves or moves[-1] is not switching.active):
                moves.append(switching.active)
            if not len(batch):
                break
    assert sorted(finished[0]) == sorted(finished[1]) == list(range(15))
    assert_same([finished[0][key] for key in sorted(finished[0])], [finished[1][key] for key in sorted(finished[1])])
    assert moves[:3] == [switching.eager, switching.bucketed, switching.eager]


def test_a_batch_whose_bucket_the_budget_cannot_afford_steps_eagerly(model: ModelSessions):
    """A store that affords the batch's first bucket alone: when its rows pass FIRST_SLOTS positions, the batch moves
    to the eager decoder, and stays there (a smaller bucket of more slots would not fit either); translations as the
    eager decoder's, and the buckets within the budget."""
    batch = sources(3, seed=3)
    first = bucket_shape(len(batch), 1, max(map(len, batch)), model.model_config.max_len)
    store = BucketStore(model, model.decoder, capture=False, budget=bucket_bytes(model, first))
    switching = SwitchingDecoder(model, store, model.options.cuda_graphs_max_rows)
    opts = SearchOptions(max_length_extra=40)
    moves = []
    running = RunningBatch(switching, model.model_config)
    running.add(batch, [opts] * len(batch), [0, 1, 2])
    finished: dict = {}
    while len(running):
        finished |= {s.key: s.result() for s in running.step()}
        if not moves or moves[-1] is not switching.active:
            moves.append(switching.active)
    assert_same([finished[key] for key in range(3)], search(ExportedDecoder(model), batch, opts, model.model_config))
    assert moves == [switching.bucketed, switching.eager]
    assert list(store.buckets) == [first] and store.bytes == store.budget


def test_encoder_buckets_count_in_the_budget_and_encode_eagerly_beyond_it(model: ModelSessions):
    """A budget that holds the batch's bucket alone: its sentences are encoded eagerly; one that holds the encoder
    bucket too: in it. Translations as the eager decoder's either way, and the bytes within the budget."""
    batch, opts, cfg = sources(3, seed=3), SearchOptions(max_length=8), model.model_config
    longest = max(map(len, batch))
    first, key = bucket_shape(len(batch), 1, longest, cfg.max_len), encoder_key(model, len(batch), longest)
    for extra, made in ((0, []), (row_position_bytes(model) * key[0] * key[1], [key])):
        store = BucketStore(model, model.decoder, capture=False, budget=bucket_bytes(model, first) + extra,
                            encoder=model.encoder)
        ours = search(BucketedDecoder(model, store), batch, opts, cfg)
        assert_same(ours, search(ExportedDecoder(model), batch, opts, cfg))
        assert list(store.encoder_buckets) == made and store.bytes == store.budget


def caches(bucket: graphed.Bucket) -> list:
    """Every cache tensor of a bucket."""
    return [v for sets in (bucket.self_sets, bucket.cross_sets) for values in sets for v in values]


def test_a_buckets_bytes_are_its_caches(model: ModelSessions):
    """One self set and the cross caches; the second self set counted once made."""
    store = BucketStore(model, model.decoder, capture=False)
    bucket = store.bucket(Shape(rows=4, slots=32, source=16))
    assert store.bytes == bucket_bytes(model, bucket.shape) == sum(4 * np.prod(v.shape()) for v in caches(bucket))
    bucket.self_caches(1)
    assert store.bytes == bucket_bytes(model, bucket.shape, 2) == sum(4 * np.prod(v.shape()) for v in caches(bucket))


@pytest.mark.parametrize("beam_size,sets", [(1, {1}), (4, {1, 2})])
def test_a_second_self_set_is_made_where_beams_reorder_alone(model: ModelSessions, beam_size: int, sets: set[int]):
    """Greedy, never; with beams, in every bucket but the first step's (a row a sentence, which no beam reorders)."""
    store = BucketStore(model, model.decoder, capture=False)
    search(BucketedDecoder(model, store), sources(3, seed=4), SearchOptions(beam_size=beam_size, max_length=12),
           model.model_config)
    made = [len(bucket.self_sets) for bucket in store.buckets.values()]  # in the order the buckets were made
    assert set(made) == sets and made[0] == 1


def test_a_beam_batch_whose_second_self_set_the_budget_cannot_afford_steps_eagerly(model: ModelSessions):
    """A budget that holds the batch's bucket with one self set: greedy, the batch steps in it; with beams (which
    need a second), eagerly once its first step has grown its beams, and no second set is made. Translations as the
    eager decoder's."""
    batch, cfg = sources(2, seed=9), model.model_config
    for beam_size, active in ((1, "bucketed"), (4, "eager")):
        first = bucket_shape(len(batch) * beam_size, 1, max(map(len, batch)), cfg.max_len)
        store = BucketStore(model, model.decoder, capture=False, budget=bucket_bytes(model, first))
        switching = SwitchingDecoder(model, store, model.options.cuda_graphs_max_rows)
        opts = SearchOptions(beam_size=beam_size, max_length=6)
        running = RunningBatch(switching, cfg)
        running.add(batch, [opts] * len(batch), [0, 1])
        running.step()
        assert switching.active is getattr(switching, active)
        finished = {}
        while len(running):
            finished |= {s.key: s.result() for s in running.step()}
        assert_same([finished[0], finished[1]], search(ExportedDecoder(model), batch, opts, cfg))
        assert store.bytes <= store.budget and all(len(b.self_sets) == 1 for b in store.buckets.values())


def test_buckets_are_kept_from_batch_to_batch(model: ModelSessions):
    """A second batch of the same shapes runs over the very buffers (and bindings) of the first: a captured graph
    stays valid."""
    store = BucketStore(model, model.decoder, capture=False)
    batch, opts = sources(2, seed=5), SearchOptions(max_length=8)
    search(BucketedDecoder(model, store), batch, opts, model.model_config)
    buffers = {shape: (id(b), dict(b.steps)) for shape, b in store.buckets.items()}
    again = search(BucketedDecoder(model, store), batch, opts, model.model_config)
    assert_same(again, search(ExportedDecoder(model), batch, opts, model.model_config))
    assert {shape: (id(b), dict(b.steps)) for shape, b in store.buckets.items()} == buffers


def test_slots_left_from_earlier_batches_are_never_read(model: ModelSessions):
    """add leaves a new row's self-attention slots as they were: with every buffer of the buckets filled with
    large values first, a batch translates as the eager decoder, whose new caches are zeros."""
    store = BucketStore(model, model.decoder, capture=False)
    batch, opts = sources(3, seed=7), SearchOptions(beam_size=2, n_best=2, max_length_extra=40)
    search(BucketedDecoder(model, store), batch, opts, model.model_config)
    rng = np.random.default_rng(0)
    for bucket in store.buckets.values():
        for value in caches(bucket):
            value.update_inplace(rng.normal(0, 100, value.shape()).astype(np.float32))
    assert_same(search(BucketedDecoder(model, store), batch, opts, model.model_config),
                search(ExportedDecoder(model), batch, opts, model.model_config))


def test_setting_off_runs_the_eager_decoder(tiny_model_dir: Path, caplog):
    with caplog.at_level(logging.INFO, logger=graphed.__name__):
        runner = ModelRunner(tiny_model_dir, ModelOptions(provider="cpu", threads=1, cuda_graphs=False))
    assert runner.buckets is None and isinstance(runner.new_decoder(), EagerDecoder) and not caplog.records


def test_without_cuda_the_setting_on_by_default_says_why_and_the_eager_decoder_runs(tiny_model_dir: Path, caplog):
    """On the CPU the setting (on by default) has nothing to do: one line at INFO, not a warning."""
    with caplog.at_level(logging.INFO, logger=graphed.__name__):
        runner = ModelRunner(tiny_model_dir, ModelOptions(provider="cpu", threads=1))
    assert runner.buckets is None and isinstance(runner.new_decoder(), EagerDecoder)
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [(
        logging.INFO, "TRANSLATOR_CUDA_GRAPHS: not used, ONNX Runtime runs on CPUExecutionProvider (CUDA graphs need "
        "the CUDA provider); the eager decoder runs")]


def test_a_refused_capture_logs_why_and_the_eager_decoder_runs(model: ModelSessions, monkeypatch, caplog):
    """ONNX Runtime refusing the capture (here: the session that asks for it failing to start) is one logged line."""
    def refuse() -> None:
        raise RuntimeError("all nodes must be on the CUDA provider")

    monkeypatch.setattr(model, "on_gpu", True)
    monkeypatch.setattr(model, "graphed_decoder", refuse)
    with caplog.at_level(logging.WARNING, logger=graphed.__name__):
        assert graphed.captured_store(model, budget=None) is None
    assert [r.getMessage() for r in caplog.records] == [
        "TRANSLATOR_CUDA_GRAPHS: not used, capture refused (all nodes must be on the CUDA provider); the eager "
        "decoder runs"]


def test_an_encoder_that_cannot_be_captured_runs_eagerly_beside_captured_steps(model: ModelSessions, monkeypatch,
                                                                             caplog):
    """The encoder's capture refused: one logged line, and the steps still run in buckets."""
    def refuse() -> None:
        raise RuntimeError("a node on the CPU")

    monkeypatch.setattr(model, "on_gpu", True)
    monkeypatch.setattr(model, "graphed_decoder", lambda: model.decoder)
    monkeypatch.setattr(model, "graphed_encoder", refuse)
    with caplog.at_level(logging.INFO, logger=graphed.__name__):
        store = graphed.captured_store(model, budget=None)
    assert store is not None and store.encoder is None and store.capture
    assert [r.getMessage() for r in caplog.records] == [
        "TRANSLATOR_CUDA_GRAPHS: the encoder runs eagerly, its capture refused (a node on the CPU)",
        "TRANSLATOR_CUDA_GRAPHS: the decoder step runs in CUDA graphs, one per bucket; the encoder eagerly"]


def test_a_captured_encoder_that_translates_otherwise_is_refused(model: ModelSessions, monkeypatch, caplog):
    """An encoder whose buckets give other keys/values than the eager encoder's is not used; the steps' buckets
    are."""
    monkeypatch.setattr(model, "on_gpu", True)
    monkeypatch.setattr(model, "graphed_decoder", lambda: model.decoder)
    monkeypatch.setattr(model, "graphed_encoder", lambda: model.encoder)
    right, rng = graphed.EncoderBucket.run, np.random.default_rng(0)

    def wrong(bucket, encoder, src, src_mask):
        keys_values = right(bucket, encoder, src, src_mask)
        for value in keys_values:  # not the keys/values of this source
            value.update_inplace(rng.normal(0, 100, value.shape()).astype(np.float32))
        return keys_values

    monkeypatch.setattr(graphed.EncoderBucket, "run", wrong)
    with caplog.at_level(logging.INFO, logger=graphed.__name__):
        store = graphed.captured_store(model, budget=None)
    assert store is not None and store.encoder is None and not store.encoder_buckets
    assert store.bytes == sum(bucket_bytes(model, shape) for shape in store.buckets)  # the encoder's buckets gone
    assert "the captured encoder translates otherwise than the eager one" in caplog.records[0].getMessage()
    assert caplog.records[-1].getMessage().endswith("the encoder eagerly")


def test_a_probe_that_translates_otherwise_is_refused(model: ModelSessions, monkeypatch, caplog):
    """A store whose steps give other outputs than the eager decoder's is not used."""
    monkeypatch.setattr(model, "on_gpu", True)
    monkeypatch.setattr(model, "graphed_decoder", lambda: model.decoder)
    right = BucketStore.run

    def wrong(store: BucketStore, step) -> tuple[np.ndarray, np.ndarray]:
        top_tokens, top_logp = right(store, step)
        return top_tokens % 80 + 5, top_logp  # other tokens, none of them </s>

    monkeypatch.setattr(BucketStore, "run", wrong)
    with caplog.at_level(logging.WARNING, logger=graphed.__name__):
        assert graphed.captured_store(model, budget=None) is None
    assert "translates otherwise than the eager one" in caplog.records[0].getMessage()


def test_an_encoder_bucket_pads_rows_and_source_and_changes_no_real_row(model: ModelSessions):
    """Three sentences of up to 11 tokens in an encoder bucket of 4 rows and 16 tokens: each sentence's keys/values
    at its real tokens as the eager encoder's."""
    store = BucketStore(model, model.decoder, capture=False, encoder=model.encoder)
    src, mask = pad_batch([[*range(5, 15), 2], [7, 8, 2], [9] * 6 + [2]], model.model_config.pad_id)
    bucketed = [v.numpy() for v in store.encode(src, mask)]
    eager = [v.numpy() for v in graphed.encode(model, src, mask)]
    assert list(store.encoder_buckets) == [(4, 16)]
    for ours, theirs in zip(bucketed, eager):
        assert ours.shape[0] == 4 and ours.shape[2] == 16
        for row, length in enumerate(mask.sum(axis=1)):
            np.testing.assert_allclose(ours[row, :, :length], theirs[row, :, :length], atol=1e-5)


def test_padding_rows_change_no_real_row(model: ModelSessions):
    """One sentence in a bucket of 4 rows and in one of 1: the same step outputs."""
    store = BucketStore(model, model.decoder, capture=False)
    ours = BucketedDecoder(model, store)
    ours.add(np.array([[5, 6, 7, 2]]), np.array([[True] * 4]))
    ours.apply(StepPlan(np.zeros(3, np.int64), np.zeros(3, np.int64)))  # three beams' rows
    wide = ours.step(np.array([1, 1, 1]), 4)
    assert ours.current.shape == Shape(rows=4, slots=FIRST_SLOTS, source=16)
    ours.apply(StepPlan(np.array([0]), np.array([0])))
    eager = ExportedDecoder(model)
    eager.add(np.array([[5, 6, 7, 2]]), np.array([[True] * 4]))
    first = eager.step(np.array([1]), 4)
    np.testing.assert_array_equal(wide[0][:1], first[0])
    np.testing.assert_array_equal(ours.step(wide[0][:1, 0], 4)[0], eager.step(first[0][:, 0], 4)[0])


def test_rows_that_leave_a_bucket_move_no_cache(model: ModelSessions, monkeypatch):
    """Greedy sentences that end leave their places as padding: no cache is copied until the batch moves to a smaller
    bucket, and sentences that join later take the freed places; translations as the eager decoder's."""
    store = BucketStore(model, model.decoder, capture=False)
    ours = BucketedDecoder(model, store)
    copies, moves = [], []
    gather, fill = BucketedDecoder._gather, BucketedDecoder._fill
    monkeypatch.setattr(BucketedDecoder, "_gather", lambda self, *args: copies.append(args) or gather(self, *args))
    monkeypatch.setattr(BucketedDecoder, "_fill", lambda self, shape, *args: moves.append(shape)
                        or fill(self, shape, *args))
    batches = [RunningBatch(ours, model.model_config), RunningBatch(ExportedDecoder(model), model.model_config)]
    opts = SearchOptions(max_length_extra=30)
    first, later = sources(8, seed=21), sources(3, seed=22)
    finished: list[dict] = [{}, {}]
    holes = []
    for batch, done in zip(batches, finished):
        batch.add(first, [opts] * 8, list(range(8)))
        joined = False
        while len(batch):
            if not joined and len(batch) in (5, 6):  # the bucket of 8 rows holds the joining sentences
                joining = 8 - len(batch)
                if batch.decoder is ours:
                    holes.append(sorted(set(range(8)) - set(ours.places.tolist())))
                    moved = len(moves)
                batch.add(later[:joining], [opts] * joining, list(range(8, 8 + joining)))
                if batch.decoder is ours:
                    holes.append(sorted(ours.places[-joining:].tolist()))
                    assert len(moves) == moved  # the same bucket
                joined = True
            done |= {s.key: s.result() for s in batch.step()}
    assert sorted(finished[0]) == sorted(finished[1])
    assert_same([finished[0][k] for k in sorted(finished[0])], [finished[1][k] for k in sorted(finished[1])])
    assert not copies  # no beam: every row keeps its own caches
    assert holes[1] == holes[0] != list(range(8 - len(holes[0]), 8))  # the joining rows in the places freed
    rows = [shape.rows for shape in moves]  # a move when the slots grow, or the rows fit a smaller bucket
    assert rows == sorted(rows, reverse=True) and rows[-1] == 1


def test_a_beam_reorder_after_rows_left_gathers_from_their_places(model: ModelSessions):
    """Rows at scattered places (a sentence left a hole), then a reorder in which a row takes another's caches: the
    gather reads each row's self-attention caches at its place and writes them at the places the sentence's rows
    held (where its encoder keys/values stay); the steps' outputs as the eager decoder's."""
    ours = BucketedDecoder(model, BucketStore(model, model.decoder, capture=False))
    eager = ExportedDecoder(model)
    src, mask = pad_batch(sources(3, seed=31), model.model_config.pad_id)
    outputs = []
    for decoder in (ours, eager):
        decoder.add(src, mask)
        decoder.apply(StepPlan(rows := np.array([0, 0, 1, 2, 2, 2]), rows))  # the beams' rows: a a b c c c
        steps = [decoder.step(np.ones(6, np.int64), 4)]
        if decoder is ours:  # grown: the first rows where they were, the others at free places of a larger bucket
            grown = ours.places.copy()
            assert grown[[0, 2, 3]].tolist() == [0, 1, 2] and sorted(grown) == list(range(6))
        decoder.apply(StepPlan(np.array([0, 1, 3, 4, 5]), np.array([0, 1, 3, 4, 5])))  # b leaves
        steps.append(decoder.step(steps[-1][0][[0, 1, 3, 4, 5], 0], 4))
        if decoder is ours:
            assert ours.places.tolist() == grown[[0, 1, 3, 4, 5]].tolist() and ours.current.shape.rows == 8
            cross_set, cross = ours.cross_set, [v.numpy().copy() for v in ours.current.cross_sets[ours.cross_set]]
            self_set = ours.self_set
        # a's second row has two children; c's rows change places
        decoder.apply(StepPlan(np.array([1, 1, 3, 2, 4]), None))
        steps.append(decoder.step(steps[-1][0][[1, 1, 3, 2, 4], 1], 4))
        outputs.append(steps)
        if decoder is ours:
            assert ours.places.tolist() == grown[[0, 1, 3, 4, 5]].tolist() and ours.current.shape.rows == 8
            assert ours.self_set == 1 - self_set and ours.cross_set == cross_set  # the encoder keys/values stayed
            for value, before in zip(ours.current.cross_sets[cross_set], cross):
                np.testing.assert_array_equal(value.numpy(), before)
    for (ours_tokens, ours_logp), (eager_tokens, eager_logp) in zip(*outputs):
        np.testing.assert_array_equal(ours_tokens, eager_tokens)
        np.testing.assert_allclose(ours_logp, eager_logp, atol=1e-5)
