"""A decoder whose steps run in buckets of fixed shapes at fixed addresses, so that ONNX Runtime's CUDA provider can
capture each bucket's step in a CUDA graph and replay it (TRANSLATOR_CUDA_GRAPHS, on by default; its speed against
the eager decoder: BENCHMARKS.md#the-gpu-one-h200).

A bucket is the rows (sentences x beams) rounded up to a power of two, the self-attention slots to a power of two
from FIRST_SLOTS (at most the model's max_len) and the source tokens to a power of two from FIRST_SOURCE. Its
buffers live as long as the model's sessions (BucketStore), so a graph captured over them stays valid from batch to
batch: a set of self-attention caches (a second one made when a beam reorder first needs it), two sets of
cross-attention caches, and the step's inputs (tokens, positions, source mask) on the device, written in place
before every step (OrtValue.update_inplace). A step binds one self set, one cross set and a top-k width: each such
binding is one captured graph (its gpu_graph_id). Each running row has a place, a row of the bucket
(BucketedDecoder.places); the bucket's other rows are padding (token 0 at position 0, a source of one token). Each
row attends to its own caches only, so padding changes no real row, and its outputs are dropped.

Where each write goes, so that no captured address ever changes:
- the step writes its slot into the very buffers it reads (each cache output bound to its input's buffer, as
  service.engine.decoder does): ScatterND runs in place, and the graph replays on the same addresses;
- rows that leave leave their places as they are, padding from then on, and the others keep theirs: sentences that
  end move no cache (a greedy batch copies its caches only when it moves to another bucket);
- a beam reorder in which a row takes another's caches (a beam with two children) gathers the self-attention caches
  into the bucket's other self set (a gather cannot run in place; a copy back would cost a second one), each row at
  the place of the row before it at the same place within its sentence: the self sets take turns, and the encoder
  keys/values stay where they are (that place holds the row's sentence's), so a greedy batch never makes the
  second self set; a beam sentence's one row that becomes its beams after its first step is gathered the same way,
  its other rows at free places (in a bucket of as many rows), where its encoder keys/values are gathered too (into
  the other cross set);
- a batch that outgrows its bucket or shrinks to half of it (rows, slots or source) is fitted into the new bucket's
  first sets, one copy (the cache graph fit); the encoder keys/values of sentences that join are gathered with the
  running rows' into the other cross set, at the first places no running row holds (one gather, faster than an
  in-place ScatterND of the new rows: docs/decisions.md); their self-attention slots
  are not written at all (each is written by its row's step before any step reads it).
Sentences that join are encoded in buckets as well (EncoderBucket: the sentences rounded up to a power of two, their
tokens as the source above; captured as the steps are, or run eagerly where ONNX Runtime refuses, the reason
logged): the keys/values it writes are gathered into the decoder's bucket, each beam's row from its sentence's,
before the next sentence joins: at batch 1 the eager encoder is a large share of a lone sentence's time on a GPU.
Buckets pay at a few rows, where a step is mostly kernel launches, and not at many (BENCHMARKS.md#the-gpu-one-h200):
a running batch of more than TRANSLATOR_CUDA_GRAPHS_MAX_ROWS rows steps eagerly (SwitchingDecoder), and its caches
move into a bucket once it has shrunk to half as many. The buckets' buffers stay as long as the sessions (a captured
graph holds their addresses), so the store has a budget (TRANSLATOR_CUDA_GRAPHS_MEMORY_MB): a batch whose bucket
(with a second self set, where beams run) is not made yet and would not fit in it steps eagerly too, and sentences
whose encoder bucket would not fit are encoded eagerly.
On the CPU provider the same buckets, buffers and bindings run, with no capture asked for: the tests check there that
the translations are those of service.engine.decoder's eager path. One running batch at a time uses a model's store
(the engine runs one per model).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np
import onnxruntime as ort

from core.folder import GraphIO
from core.search import Hypothesis, SearchOptions, StepPlan, search
from core.slots import cache_slots
from service.engine.decoder import (
    ExportedDecoder,
    RunningRows,
    axis2_pads,
    encode,
    longest_source,
    pad_columns,
    run_graph,
)
from service.engine.sessions import ModelSessions, bind_caches

log = logging.getLogger(__name__)

FIRST_SLOTS, FIRST_SOURCE = 32, 16
PROBE_RUNS = 3  # ONNX Runtime runs a graph id once eagerly, captures it at the next run, then replays it


def bucket_size(needed: int, first: int = 1, most: int | None = None) -> int:
    """The smallest of first, 2 x first, 4 x first, ... that holds `needed`, at most `most`."""
    size = first
    while size < needed:
        size *= 2
    return size if most is None else min(size, most)


@dataclass(frozen=True)
class Shape:
    rows: int
    slots: int
    source: int


def bucket_shape(rows: int, positions: int, source: int, max_len: int) -> Shape:
    """The bucket of a batch of `rows` rows whose caches must hold `positions` positions, over sources of `source`
    tokens (padding included)."""
    return Shape(bucket_size(rows), bucket_size(positions, FIRST_SLOTS, max_len), bucket_size(source, FIRST_SOURCE))


def row_position_bytes(model: ModelSessions) -> int:
    """The memory of one row's keys and values at one position, every layer's."""
    cfg = model.model_config
    return len(model.self_names) * cfg.n_heads * cfg.d_head * np.dtype(model.cache_type).itemsize


def bucket_bytes(model: ModelSessions, shape: Shape, self_sets: int = 1) -> int:
    """The memory of a bucket's caches: this many sets of self-attention caches (beams need two) and two of
    cross-attention caches."""
    return row_position_bytes(model) * shape.rows * (self_sets * shape.slots + 2 * shape.source)


def encoder_key(model: ModelSessions, sentences: int, source: int) -> tuple[int, int]:
    """The rows and source tokens of the encoder bucket of this many sentences of this many tokens."""
    return bucket_size(sentences), bucket_size(source, FIRST_SOURCE, model.model_config.max_len)


def encoder_bucket_bytes(model: ModelSessions, key: tuple[int, int]) -> int:
    """The memory of an encoder bucket's keys/values (rows and source tokens: its key)."""
    return row_position_bytes(model) * key[0] * key[1]


@dataclass
class BucketStep:
    """A bound step of one bucket: its self and cross sets and its width, the top-k buffers it writes, and the run
    options that name its graph (None when no capture is asked for)."""

    binding: ort.IOBinding
    top_tokens: ort.OrtValue
    top_logp: ort.OrtValue
    run_options: ort.RunOptions | None


class Bucket:
    """A bucket's buffers: its sets of self-attention caches (one; a second once a beam reorder needs it), two of
    cross-attention caches, the step's inputs, and its bound steps."""

    def __init__(self, store: BucketStore, shape: Shape):
        model, self.store, self.shape = store.model, store, shape
        self.self_sets = [self._zeros(shape.slots, model.self_names)]
        self.cross_sets = [self._zeros(shape.source, model.cross_names) for _ in range(2)]
        # the step's inputs on the host, the padding rows' after the batch's, copied to the device before each step
        self.host_tokens = np.zeros(shape.rows, np.int64)
        self.host_positions = np.zeros(shape.rows, np.int64)
        self.tokens = ort.OrtValue.ortvalue_from_numpy(np.zeros(shape.rows, np.int64), model.device, 0)
        self.positions = ort.OrtValue.ortvalue_from_numpy(np.zeros(shape.rows, np.int64), model.device, 0)
        self.src_mask = ort.OrtValue.ortvalue_from_numpy(np.zeros((shape.rows, shape.source), bool), model.device, 0)
        self.written: tuple[np.ndarray, np.ndarray] | None = None  # the source mask and places src_mask holds now
        self.steps: dict[tuple[int, int, int], BucketStep] = {}

    def _zeros(self, length: int, names: list[str]) -> list[ort.OrtValue]:
        """A set of caches of this many positions, zeros: a tensor for each of these names (the step's inputs)."""
        model, cfg = self.store.model, self.store.model.model_config
        shape = self.shape.rows, cfg.n_heads, length, cfg.d_head
        return [ort.OrtValue.ortvalue_from_numpy(np.zeros(shape, model.cache_type), model.device, 0) for _ in names]

    @property
    def bytes(self) -> int:
        return bucket_bytes(self.store.model, self.shape, len(self.self_sets))

    def self_caches(self, index: int) -> list[ort.OrtValue]:
        """Self set `index` (0 or 1), the second made the first time it is asked for."""
        if index == len(self.self_sets):
            self.self_sets.append(self._zeros(self.shape.slots, self.store.model.self_names))
        return self.self_sets[index]

    def write(self, tokens: np.ndarray, positions: np.ndarray, src_mask: np.ndarray, places: np.ndarray) -> None:
        """The step's inputs into their buffers, each row's at its place and the padding rows' (token 0 at position 0)
        at the others. The source mask only when it or the places are other arrays than those written last: a
        decoder replaces them when rows join or leave and never changes one in place, so most steps copy two small
        vectors alone."""
        for host, value, device in ((self.host_tokens, tokens, self.tokens),
                                    (self.host_positions, positions, self.positions)):
            host.fill(0)
            host[places] = value
            device.update_inplace(host)
        if self.written is None or src_mask is not self.written[0] or places is not self.written[1]:
            padded_mask = np.zeros((self.shape.rows, self.shape.source), bool)
            padded_mask[:, 0] = True  # a padding row attends to one source token: no row of -inf alone
            padded_mask[places, : src_mask.shape[1]] = src_mask
            self.src_mask.update_inplace(padded_mask)
            self.written = src_mask, places

    def step(self, self_set: int, cross_set: int, width: int) -> BucketStep:
        """The step over these sets with this top-k width, bound the first time it is asked for."""
        key = self_set, cross_set, width
        if key not in self.steps:
            self.steps[key] = self.store.bind_step(self, *key)
        return self.steps[key]


class EncoderBucket:
    """The encoder over sentences padded to a fixed number of rows and source tokens, every input and output at an
    address of its own, so that its run can be captured: the encoder keys/values it writes are read (fitted into a
    bucket) before the next run. A padding row is a source of one token; a row's padded tokens are masked."""

    def __init__(self, store: BucketStore, rows: int, source: int):
        model = store.model
        cfg = model.model_config
        self.pad_id = cfg.pad_id
        self.host_src = np.zeros((rows, source), np.int64)
        self.host_mask = np.zeros((rows, source), bool)
        self.src = ort.OrtValue.ortvalue_from_numpy(np.zeros((rows, source), np.int64), model.device, 0)
        self.src_mask = ort.OrtValue.ortvalue_from_numpy(np.zeros((rows, source), bool), model.device, 0)
        self.cross_kv = [ort.OrtValue.ortvalue_from_shape_and_type((rows, cfg.n_heads, source, cfg.d_head),
                                                                   model.cache_type, model.device, 0)
                         for _ in model.cross_names]
        self.binding = store.encoder.io_binding()
        self.binding.bind_ortvalue_input(GraphIO.SRC, self.src)
        self.binding.bind_ortvalue_input(GraphIO.SRC_MASK, self.src_mask)
        for name, value in zip(model.cross_names, self.cross_kv):
            self.binding.bind_ortvalue_output(name, value)
        self.run_options = store.graph_options()

    def run(self, encoder: ort.InferenceSession, src: np.ndarray, src_mask: np.ndarray) -> list[ort.OrtValue]:
        """The encoder keys/values of sentences src (N, S), one row each, in this bucket's rows and source tokens."""
        n, length = src.shape
        self.host_src.fill(self.pad_id)
        self.host_src[:n, :length] = src
        self.host_mask.fill(False)
        self.host_mask[:n, :length] = src_mask
        self.host_mask[n:, 0] = True
        self.src.update_inplace(self.host_src)
        self.src_mask.update_inplace(self.host_mask)
        encoder.run_with_iobinding(self.binding, self.run_options)
        return self.cross_kv


class BucketStore:
    """A model's buckets, made as batches need them and kept with their bindings (and captured graphs), within a
    budget of bytes for their caches (None: no bound). With an encoder session, sentences that join are encoded in
    buckets too (EncoderBucket); without, eagerly."""

    def __init__(self, model: ModelSessions, decoder: ort.InferenceSession, capture: bool, budget: int | None = None,
                 encoder: ort.InferenceSession | None = None):
        if model.kernels:  # never so in the service: our kernels are the CPU provider's, buckets the CUDA one's
            raise ValueError("buckets run the decoder step as exported; this model's step runs our kernels, whose "
                             "caches' rows are read through a slot table that buckets do not keep")
        self.model, self.decoder, self.capture, self.budget = model, decoder, capture, budget
        self.encoder = encoder
        self.buckets: dict[Shape, Bucket] = {}
        self.encoder_buckets: dict[tuple[int, int], EncoderBucket] = {}  # by rows and source tokens
        self.graphs = 0  # gpu_graph_ids given so far

    @property
    def bytes(self) -> int:
        """The memory of the buckets' caches and the encoder buckets' keys/values."""
        return (sum(bucket.bytes for bucket in self.buckets.values())
                + sum(encoder_bucket_bytes(self.model, key) for key in self.encoder_buckets))

    def graph_options(self) -> ort.RunOptions | None:
        """The run options that name a graph of its own (a gpu_graph_id) when capturing, else None."""
        if not self.capture:
            return None
        options = ort.RunOptions()
        options.add_run_config_entry("gpu_graph_id", str(self.graphs))
        self.graphs += 1
        return options

    def encode(self, src: np.ndarray, src_mask: np.ndarray) -> list[ort.OrtValue]:
        """The encoder keys/values of sentences src (N, S), one row each: in an encoder bucket (rows and source
        tokens padded, as long as the next encode) where the store has an encoder session and the bucket is made or
        fits in the budget, else eagerly."""
        key = encoder_key(self.model, *src.shape)
        if self.encoder is None or not (key in self.encoder_buckets
                                        or self._fits(encoder_bucket_bytes(self.model, key))):
            return encode(self.model, src, src_mask)
        return self.encoder_bucket(*src.shape).run(self.encoder, src, src_mask)

    def encode_eagerly(self) -> None:
        """No encoder buckets from now on: those made go, and their bytes with them."""
        self.encoder, self.encoder_buckets = None, {}

    def encoder_bucket(self, sentences: int, source: int) -> EncoderBucket:
        """The encoder bucket of this many sentences of this many tokens, made the first time it is asked for."""
        key = encoder_key(self.model, sentences, source)
        if key not in self.encoder_buckets:
            self.encoder_buckets[key] = EncoderBucket(self, *key)
        return self.encoder_buckets[key]

    def affords(self, shape: Shape, beams: bool) -> bool:
        """Whether the bucket of this shape is made with the self sets a batch needs (two where beams run), or what
        it lacks fits in what is left of the budget."""
        sets, bucket = 2 if beams else 1, self.buckets.get(shape)
        if bucket is not None and len(bucket.self_sets) >= sets:  # most steps: the running batch's own bucket
            return True
        return self._fits(bucket_bytes(self.model, shape, sets) - (bucket.bytes if bucket else 0))

    def _fits(self, size: int) -> bool:
        """Whether this many more bytes fit in what is left of the budget."""
        return self.budget is None or self.bytes + size <= self.budget

    def bucket(self, shape: Shape) -> Bucket:
        if shape not in self.buckets:
            self.buckets[shape] = Bucket(self, shape)
        return self.buckets[shape]

    def bind_step(self, bucket: Bucket, self_set: int, cross_set: int, width: int) -> BucketStep:
        """A step's binding: every input and output at an address of the bucket's, the width a host value (TopK
        reads its k on the host), and, when capturing, a graph id of its own."""
        model, rows = self.model, bucket.shape.rows
        binding = self.decoder.io_binding()
        bind_caches(model, binding, bucket.self_sets[self_set], bucket.cross_sets[cross_set])
        for name, value in ((GraphIO.TOKENS, bucket.tokens), (GraphIO.POSITIONS, bucket.positions),
                            (GraphIO.SRC_MASK, bucket.src_mask),
                            (GraphIO.WIDTH, ort.OrtValue.ortvalue_from_numpy(np.array([width], np.int64)))):
            binding.bind_ortvalue_input(name, value)
        top_tokens = ort.OrtValue.ortvalue_from_shape_and_type([rows, width], np.int64, model.device, 0)
        top_logp = ort.OrtValue.ortvalue_from_shape_and_type([rows, width], np.float32, model.device, 0)
        binding.bind_ortvalue_output(GraphIO.TOP_TOKENS, top_tokens)
        binding.bind_ortvalue_output(GraphIO.TOP_LOGP, top_logp)
        return BucketStep(binding, top_tokens, top_logp, self.graph_options())

    def run(self, step: BucketStep) -> tuple[np.ndarray, np.ndarray]:
        """Run a bound step: the top tokens and log-probabilities of every row of its bucket."""
        self.decoder.run_with_iobinding(step.binding, step.run_options)
        return step.top_tokens.numpy(), step.top_logp.numpy()


class BucketedDecoder:
    """A decoder (core.search.Decoder) over a BucketStore: each running row at its place in its bucket's buffers."""

    def __init__(self, model: ModelSessions, store: BucketStore):
        self.model, self.store = model, store
        self.steps = 0
        self.encode_seconds = 0.0
        self._empty()

    def _empty(self) -> None:
        self.positions = np.zeros(0, dtype=np.int64)  # each row's next position
        self.src_mask = np.zeros((0, 0), dtype=bool)  # cut to the longest source, as ExportedDecoder's
        self.places = np.zeros(0, dtype=np.int64)  # each row's row of the bucket, where its caches are
        self.current: Bucket | None = None  # the bucket the rows are in, and which of its sets hold them
        self.self_set = self.cross_set = 0

    def _shape(self) -> Shape:
        """The bucket the rows need now."""
        return bucket_shape(len(self.positions), int(self.positions.max()) + 1, self.src_mask.shape[1],
                            self.model.model_config.max_len)

    def _move(self, shape: Shape) -> Bucket:
        """The bucket of this shape, the running rows (self.places) of the current one fitted into its first sets."""
        current = self.current
        if current is None:
            return self._fill(shape, [], [], self.places)
        if current.shape == shape:
            return current
        return self._fill(shape, current.self_sets[self.self_set], current.cross_sets[self.cross_set], self.places)

    def _fill(self, shape: Shape, self_kv: list[ort.OrtValue], cross_kv: list[ort.OrtValue],
              rows: np.ndarray) -> Bucket:
        """The bucket of this shape made the current one, these rows of these caches fitted into its first sets (one
        copy), at places 0, 1, ..."""
        into = self.store.bucket(shape)
        if len(rows):
            padded = pad_rows(rows, shape.rows)
            self._fit(self_kv, padded, shape.slots, into.self_sets[0])
            self._fit(cross_kv, padded, shape.source, into.cross_sets[0])
        self.current, self.self_set, self.cross_set = into, 0, 0
        self.places = np.arange(len(rows))
        return into

    def _fit(self, values: list[ort.OrtValue], rows: np.ndarray, length: int,
             into: list[ort.OrtValue] | None) -> list[ort.OrtValue]:
        """into_i = values_i[rows], grown with zeros or cut to `length` along axis 2 (new tensors where `into` is
        None): with the same length a plain gather (the select graph)."""
        t, now = self.model, values[0].shape()[2]
        if now == length:
            return run_graph(t, t.select, "x", values, {"rows": rows}, into=into)
        return run_graph(t, t.fit, "x", values, {"rows": rows, "pads": axis2_pads(length - now)}, into=into)

    def add(self, src: np.ndarray, src_mask: np.ndarray) -> None:
        """The new rows, a sentence each, after the running ones, at the first places no running row holds. Their
        encoder keys/values go into the bucket's other cross set with the running rows' (one gather; a join first
        where rows are running). Their self-attention slots are left as they are: a row at position p writes slot p
        before it reads slots 0..p, so no slot is read before this sentence wrote it. (Writing zeros there cost a
        large share of a lone sentence's time on a GPU: docs/decisions.md.)"""
        started = time.perf_counter()
        t = self.model
        rows = np.arange(len(src))  # each new row's row of cross_kv below
        length = max(self.src_mask.shape[1], src_mask.shape[1])
        self.src_mask = np.concatenate([pad_columns(self.src_mask, length), pad_columns(src_mask, length)])
        self.positions = np.concatenate([self.positions, np.zeros(len(rows), dtype=np.int64)])
        shape = self._shape()
        bucket = self._move(shape)  # before the encoder bucket: what the budget leaves goes to the steps first
        cross_kv = self.store.encode(src, src_mask)  # a row per sentence
        joining = free_places(self.places, len(rows), shape.rows)
        if len(self.places):  # each place keeps its row, but the joining rows' places take the new ones
            cross_kv = run_graph(t, t.join, "a", bucket.cross_sets[self.cross_set],
                                 {"pads_b": axis2_pads(shape.source - cross_kv[0].shape()[2])}, second=("b", cross_kv))
            order = np.arange(shape.rows)
            order[joining] = shape.rows + rows
        else:
            order = pad_rows(rows, shape.rows)
        self.places = np.concatenate([self.places, joining])
        self.cross_set = 1 - self.cross_set
        self._fit(cross_kv, order, shape.source, bucket.cross_sets[self.cross_set])
        self.encode_seconds += time.perf_counter() - started

    def step(self, tokens: np.ndarray, width: int, log_probs: bool = True) -> tuple[np.ndarray, np.ndarray]:
        bucket = self._move(self._shape())
        bucket.write(tokens, self.positions, self.src_mask, self.places)
        step = bucket.step(self.self_set, self.cross_set, min(width, self.model.model_config.vocab_size))
        top_tokens, top_logp = self.store.run(step)
        self.positions += 1
        self.steps += 1
        return top_tokens[self.places], top_logp[self.places]  # copies: the next step writes into these arrays

    def hand_over(self) -> RunningRows:
        """The running rows, out of their bucket (one copy), for another decoder to go on with; this one is left
        empty."""
        bucket = self.current
        slots = cache_slots(int(self.positions.max()) + 1, self.model.model_config.max_len)
        running = RunningRows(self._fit(bucket.self_sets[self.self_set], self.places, slots, None),
                              self._fit(bucket.cross_sets[self.cross_set], self.places, self.src_mask.shape[1], None),
                              self.positions, self.src_mask)
        self._empty()
        return running

    def take_over(self, rows: RunningRows) -> None:
        """Go on with rows another decoder ran, in place of none: fitted into their bucket (one copy)."""
        self.positions, self.src_mask = rows.positions.copy(), rows.src_mask
        self._fill(self._shape(), rows.self_kv, rows.cross_kv, np.arange(len(self.positions)))

    def apply(self, plan: StepPlan) -> None:
        """Rows that each keep their own caches (sentences leaving, a reorder) keep their places; where some row
        takes another's (a beam's two children, a beam's first row its beams), every row's self-attention caches
        are gathered into the bucket's other self set, in a bucket of as many rows."""
        rows, cross_rows = plan.parents, plan.places
        if not len(rows):
            self._empty()
            return
        if len(rows) > self.current.shape.rows:  # beams grown from their first rows: a bucket that holds them
            self._move(bucket_shape(len(rows), int(self.positions.max()) + 1, self.src_mask.shape[1],
                                    self.model.model_config.max_len))
        if len(np.unique(rows)) == len(rows):  # a sentence's rows read the same encoder keys/values: any of them
            self.places = self.places[rows]
        else:
            self._gather(rows, cross_rows)
        self.positions = self.positions[rows]
        if cross_rows is not None:
            mask = self.src_mask[cross_rows]
            self.src_mask = mask[:, : longest_source(mask)]

    def _gather(self, rows: np.ndarray, cross_rows: np.ndarray | None) -> None:
        """The self-attention caches of these rows into the other self set, each new row at the place of the row
        before it at the same place within its sentence (its plan's place; where no sentence left, the same row): that
        place holds its sentence's encoder keys/values, so they stay where they are. The rows a beam grew to past its
        first row (their plan's place that row's) take free places, and every place's encoder keys/values are
        gathered into the other cross set too, theirs from their sentence's."""
        bucket = self.current
        places = self.places if cross_rows is None else self.places[cross_rows]
        first = np.zeros(len(places), dtype=bool)
        first[np.unique(places, return_index=True)[1]] = True
        if not first.all():  # grown rows
            places = places.copy()
            places[~first] = free_places(places[first], int(np.count_nonzero(~first)), bucket.shape.rows)
            order = np.arange(bucket.shape.rows)
            order[places] = self.places[cross_rows]
            other = 1 - self.cross_set
            self._fit(bucket.cross_sets[self.cross_set], order, bucket.shape.source, bucket.cross_sets[other])
            self.cross_set = other
        order = np.arange(bucket.shape.rows)  # each place's row of the set before; a padding place's own
        order[places] = self.places[rows]
        other = 1 - self.self_set
        self._fit(bucket.self_sets[self.self_set], order, bucket.shape.slots, bucket.self_caches(other))
        self.self_set, self.places = other, places


class SwitchingDecoder:
    """A decoder (core.search.Decoder) that steps a running batch of at most `most_rows` rows in buckets
    (BucketedDecoder, captured) and a larger one eagerly (ExportedDecoder), moving the caches across (one copy) when the
    batch crosses: to the eager decoder as soon as it holds more rows, back to the buckets once it holds half as many
    or fewer, so that a batch near the bound does not move at every join and leave. A batch whose bucket the store
    cannot afford steps eagerly as well."""

    def __init__(self, model: ModelSessions, store: BucketStore, most_rows: int):
        self.bucketed, self.eager = BucketedDecoder(model, store), ExportedDecoder(model)
        self.active: BucketedDecoder | ExportedDecoder = self.bucketed
        self.store, self.max_len = store, model.model_config.max_len
        self.most_rows = most_rows

    @property
    def steps(self) -> int:
        return self.bucketed.steps + self.eager.steps

    @property
    def encode_seconds(self) -> float:
        return self.bucketed.encode_seconds + self.eager.encode_seconds

    @property
    def cache_bytes(self) -> int:
        """The eager decoder's caches, and every bucket's (made once, kept)."""
        return self.eager.cache_bytes + self.store.bytes()

    def add(self, src: np.ndarray, src_mask: np.ndarray) -> None:
        running = self.active
        self._fit_for(len(running.positions) + len(src), int(running.positions.max(initial=0)) + 1,
                      max(running.src_mask.shape[1], src_mask.shape[1]), False)
        self.active.add(src, src_mask)

    def step(self, tokens: np.ndarray, width: int, log_probs: bool = True) -> tuple[np.ndarray, np.ndarray]:
        running = self.active
        self._fit_for(len(tokens), int(running.positions.max()) + 1, running.src_mask.shape[1], width > 1)
        return self.active.step(tokens, width, log_probs)

    def apply(self, plan: StepPlan) -> None:
        running = self.active
        if len(plan.parents) > len(running.positions):  # beams grown from their first rows: a decoder for them all
            self._fit_for(len(plan.parents), int(running.positions.max()) + 1, running.src_mask.shape[1], True)
        self.active.apply(plan)

    def _fit_for(self, rows: int, positions: int, source: int, beams: bool) -> None:
        """The decoder for a batch of this many rows, positions and source tokens (with beams or not), the running
        rows handed over to it."""
        affordable = self.store.affords(bucket_shape(rows, positions, source, self.max_len), beams)
        if self.active is self.bucketed and (rows > self.most_rows or not affordable):
            self._switch_to(self.eager)
        elif self.active is self.eager and rows <= self.most_rows // 2 and affordable:
            self._switch_to(self.bucketed)

    def _switch_to(self, other: BucketedDecoder | ExportedDecoder) -> None:
        if len(self.active.positions):
            other.take_over(self.active.hand_over())
        self.active = other


def free_places(places: np.ndarray, count: int, size: int) -> np.ndarray:
    """The first `count` rows of a bucket of `size` rows that are not among `places`."""
    held = np.zeros(size, dtype=bool)
    held[places] = True
    return np.flatnonzero(~held)[:count]


def pad_rows(rows: np.ndarray, size: int) -> np.ndarray:
    """Row indices for a bucket of `size` rows: `rows`, then row 0 for each padding row."""
    padded = np.zeros(size, np.int64)
    padded[: len(rows)] = rows
    return padded


def captured_store(model: ModelSessions, budget: int | None) -> BucketStore | None:
    """The store whose steps (and, where it can, encoder runs) ONNX Runtime captures in CUDA graphs, or None, its
    reason logged, where it cannot: not on the CUDA provider, a session that refuses capture, or a probe translation
    that differs from the eager decoder's. An encoder that cannot be captured runs eagerly, its reason logged. The
    buckets take at most `budget` bytes (None: no bound)."""
    if not model.on_gpu:
        log.info("TRANSLATOR_CUDA_GRAPHS: not used, ONNX Runtime runs on %s (CUDA graphs need the CUDA provider); "
                 "the eager decoder runs", model.provider)
        return None
    sentence = [[*range(4, min(model.model_config.vocab_size, 10)), model.model_config.eos_id]]
    opts = SearchOptions(max_length=4)

    def probe(store: BucketStore, eager: list, otherwise: str) -> None:
        """Translate the probe sentence in the store's buckets (often enough to capture them) as the eager decoder
        did (eager), or raise RuntimeError(otherwise)."""
        for _ in range(PROBE_RUNS):
            if tokens(search(BucketedDecoder(model, store), sentence, opts, model.model_config)) != eager:
                raise RuntimeError(otherwise)

    try:
        eager = tokens(search(ExportedDecoder(model), sentence, opts, model.model_config))
        store = BucketStore(model, model.graphed_decoder(), capture=True, budget=budget)
        probe(store, eager, "the captured step translates otherwise than the eager one")
    except Exception as error:  # noqa: BLE001 - ONNX Runtime refuses with plain RuntimeErrors of many kinds
        log.warning("TRANSLATOR_CUDA_GRAPHS: not used, capture refused (%s); the eager decoder runs", error)
        return None
    try:
        store.encoder = model.graphed_encoder()
        probe(store, eager, "the captured encoder translates otherwise than the eager one")
    except Exception as error:  # noqa: BLE001 - as above
        log.warning("TRANSLATOR_CUDA_GRAPHS: the encoder runs eagerly, its capture refused (%s)", error)
        store.encode_eagerly()
    log.info("TRANSLATOR_CUDA_GRAPHS: the decoder step runs in CUDA graphs, one per bucket; the encoder %s",
             "too" if store.encoder is not None else "eagerly")
    return store


def tokens(hypotheses: list[list[Hypothesis]]) -> list[list[list[int]]]:
    """The tokens of each sentence's hypotheses: what must be the same in a bucket as outside one (the padding
    changes the order of the float sums, so the scores may differ in their last bits)."""
    return [[h.tokens for h in hyps] for hyps in hypotheses]
