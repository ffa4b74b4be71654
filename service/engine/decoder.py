"""The eager decoders of a running batch over ONNX Runtime: their caches stay where ONNX Runtime runs between steps.

Each is a core.search.Decoder (add, step, apply a StepPlan) over a model's sessions (service.engine.sessions), one
per cache layout; the caches live in OrtValues on the device, grown by slots (core.slots) as the rows need:
    ExportedDecoder   the step as exported, each row reading its own caches: a StepPlan moves the caches' rows
                      through the cache graphs (service.engine.cache_graphs)
    SlotTableDecoder  the step with our kernels (the CPU's, service.engine.kernels), each row reading its slots
                      where a slot table says: a beam reorder reorders the table, and sentences that leave move
                      their rows within the caches' own memory, whose rows after the batch's are room to join into
eager_decoder() picks the one the sessions' step runs; the GPU's buckets are service.engine.graphed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import onnxruntime as ort

from core.folder import NUMPY_TYPES, GraphIO
from core.search import StepPlan
from core.slots import FEW_ROWS, cache_slots, grown_slots
from service.engine.kernels import CROSS_FROM, SLOT_ROWS
from service.engine.sessions import ModelSessions, bind_caches

# The slot table the step gets while every row reads its own slots (a greedy batch always): empty, so that the
# kernel reads each row's slots side by side, with no table to look up
NO_TABLE = np.zeros((0, 0), dtype=np.int64)
# The rows the cross-attention kernel reads the encoder keys/values of while each row reads its own (a greedy batch)
NO_CROSS = np.zeros(0, dtype=np.int64)

# The padded source tokens the encoder runs on at a time on the CPU (encode): its activations' memory is bounded by
# them rather than by the batch, and a run's activations stay in the core's cache (runs of 64 tokens measured faster
# than of 128 to 1,024: docs/decisions.md)
ENCODE_TOKENS = 64

# The first self-attention cache's slots with our kernels at a few rows: a growth (a copy of the cache, its bindings
# anew) costs more there than slots no step reads (docs/decisions.md)
KERNELS_FIRST_SLOTS = 32


@dataclass
class RunningRows:
    """A running batch's rows as one decoder hands them to another: their caches, exactly the rows' (their self-
    attention slots at least every position), each row's next position, and the source mask."""

    self_kv: list[ort.OrtValue]
    cross_kv: list[ort.OrtValue]
    positions: np.ndarray
    src_mask: np.ndarray


@dataclass
class StepBinding:
    """A decoder step's binding of one set of caches, and the host arrays it binds as they were last bound."""

    binding: ort.IOBinding
    caches: list[ort.OrtValue]  # held, so that no other tensor can take their memory or their ids
    bound: dict[str, np.ndarray] = field(default_factory=dict)  # by name
    host_arrays: int = -1  # EagerDecoder.host_arrays when they were bound


class EagerDecoder:
    """What both eager layouts share: caches on the device, grown by slots, and a step bound to them.

    The caches stay on the device (GPU memory on CUDA); each decoder step's cache outputs are bound to the very
    buffers of its cache inputs, so the step writes its slot in place. The cache graphs (service.engine.cache_graphs)
    append and grow them there. Nothing but the tokens, the positions and the top-k crosses to NumPy, and on the CPU
    ONNX Runtime's allocator reuses the caches' memory from step to step, where NumPy would allocate (and fault in)
    fresh pages. The host's inputs (tokens, positions, width, source mask) and the top-k outputs are NumPy arrays
    bound over their own memory (bind_cpu_input; an OrtValue for an output), once, and written in place; a GPU
    session copies a host input when it is bound, so there those written in place are bound again before every
    step (the top-k it copies back at every run).
    A layout says how a StepPlan moves the rows (apply), what the first cache of a batch is (_first_cache), and
    what else its step reads (_layout_reads).
    """

    def __init__(self, model: ModelSessions):
        self.model = model
        self.steps = 0
        self.encode_seconds = 0.0
        self.host_arrays = 0  # counts the times a host array that the step binds was replaced: it is bound again
        self.self_kv: list[ort.OrtValue] = []
        self.cross_kv: list[ort.OrtValue] = []
        self._empty()

    def _empty(self) -> None:
        """No rows: no caches, and no binding that holds their memory; the next add starts afresh."""
        self._set_cross_kv([], 0)
        self._replace(
            positions=np.zeros(0, dtype=np.int64),  # each row's next position; a step reads it where it is
            src_mask=np.zeros((0, 0), dtype=bool),
            tokens=np.zeros(0, dtype=np.int64),  # the step's tokens, written in place
            width=np.zeros(1, dtype=np.int64),
            top_tokens=np.zeros((0, 0), dtype=np.int64),  # the arrays the step writes its top-k into
            top_logp=np.zeros((0, 0), dtype=np.float32),
        )
        self._set_self_kv([])

    def _set_self_kv(self, values: list[ort.OrtValue]) -> None:
        """New buffers for the self-attention caches (the rows' first: a join in place gives the same, and changes
        nothing); the bindings of the old ones go. The bindings are kept from step to step and made again only for
        new buffers: binding a dozen tensors at every step is costly."""
        if values is self.self_kv:
            return
        self.self_kv = values
        self.slots = values[0].shape()[2] if values else 0
        self._let_go()

    def _set_cross_kv(self, values: list[ort.OrtValue], rows: int | None = None) -> None:
        """The encoder keys/values, their first `rows` in use (all where None); the bindings of old buffers go."""
        self.cross_rows = shape_of(values[0])[0] if rows is None else rows
        if values is not self.cross_kv:
            self.cross_kv = values
            self._let_go()

    def _replace(self, **arrays: np.ndarray) -> None:
        """Replace host arrays that the step reads or writes (positions, src_mask, tokens, width, top_tokens,
        top_logp, and the layout's own): every binding binds them again."""
        for name, array in arrays.items():
            setattr(self, name, array)
        self.host_arrays += 1
        if "positions" in arrays:
            self._count_needed()

    def _count_needed(self) -> None:
        """The slots the rows' next step needs, kept with the positions (a step adds one to both): a step tests it
        without a NumPy call."""
        self.needed = int(self.positions.max(initial=-1)) + 1

    def add(self, src: np.ndarray, src_mask: np.ndarray) -> None:
        started = time.perf_counter()
        t = self.model
        cross_kv = encode(t, src, src_mask)
        running, running_cross, new = len(self.positions), self.cross_rows, len(src)
        if not running:
            self._set_cross_kv(cross_kv)
            self._replace(src_mask=src_mask)
            self._set_self_kv(self._first_cache(new))
        else:  # the new rows after the running ones, the encoder outputs padded to the longer source
            length = max(self.src_mask.shape[1], src_mask.shape[1])
            if length > self.src_mask.shape[1]:  # rarely: most joins pad only the newcomers
                self._set_cross_kv(self._resize(self.cross_kv, length, running_cross))
            self._set_cross_kv(self._join(self.cross_kv, running_cross, cross_kv, length - src_mask.shape[1]),
                               running_cross + new)
            self._replace(src_mask=np.concatenate([pad_columns(self.src_mask, length), pad_columns(src_mask, length)]))
            self._add_rows(running, new)
        self._joined(running, running_cross, new)
        self._replace(positions=np.concatenate([self.positions, np.zeros(new, dtype=np.int64)]))
        self.encode_seconds += time.perf_counter() - started

    def _add_rows(self, running: int, new: int) -> None:
        """Self-attention caches for `new` rows after the first `running` (whose slots are zeros until written)."""
        t, cfg = self.model, self.model.model_config
        empty = np.zeros((new, cfg.n_heads, 0, cfg.d_head), t.cache_type)
        self._set_self_kv(self._join(self.self_kv, running, [empty] * len(self.self_kv), self.slots))

    @property
    def cache_bytes(self) -> int:
        """The memory the caches hold (a view's whole tensor)."""
        return held_bytes([*self.self_kv, *self.cross_kv])

    def _joined(self, running: int, running_cross: int, new: int) -> None:
        """After an add: `new` rows, a sentence each, joined after `running` rows, their encoder keys/values after
        `running_cross` rows of them."""

    def _first_cache(self, rows: int) -> list[ort.OrtValue]:
        """The self-attention cache of a batch's first rows."""
        raise NotImplementedError

    def _layout_reads(self) -> dict[str, np.ndarray]:
        """The host arrays the layout's step reads besides the tokens, positions, width and source mask."""
        return {}

    def _width(self, width: int, log_probs: bool) -> int:
        """The step's width input: the exported step's TopK computes the log-probabilities whatever it is asked."""
        return width

    def step(self, tokens: np.ndarray, width: int, log_probs: bool = True) -> tuple[np.ndarray, np.ndarray]:
        t = self.model
        if self.needed > self.slots:
            slots = grown_slots(self.needed, self.slots, len(tokens), t.model_config.max_len)
            self._set_self_kv(self._resize(self.self_kv, slots, len(tokens)))
        width = min(width, t.model_config.vocab_size)
        if self.top_tokens.shape != (len(tokens), width):
            self._replace(tokens=np.empty(len(tokens), dtype=np.int64),
                          top_tokens=np.empty((len(tokens), width), dtype=np.int64),
                          top_logp=np.empty((len(tokens), width), dtype=np.float32))
        self.width[0] = self._width(width, log_probs)
        self.tokens[:] = tokens
        t.decoder.run_with_iobinding(self._binding(), t.run_options)
        self.positions += 1
        self.needed += 1
        self.steps += 1
        return self.top_tokens.copy(), self.top_logp.copy()  # the next step writes into these arrays

    def _binding(self) -> ort.IOBinding:
        """The step's binding of the current caches, with the host's arrays bound again where they were replaced.
        Each cache output is bound to the buffer of its input: the step writes its slot in place, with no copy of
        the cache and no new memory."""
        t = self.model
        key = id(self.self_kv[0]), id(self.cross_kv[0])
        step = self.step_bindings.get(key)
        if step is None:
            binding = t.decoder.io_binding()
            bind_caches(t, binding, self.self_kv, self.cross_kv)
            step = self.step_bindings[key] = StepBinding(binding, [*self.self_kv, *self.cross_kv])
        if step.host_arrays != self.host_arrays:
            reads = {GraphIO.TOKENS: self.tokens, GraphIO.POSITIONS: self.positions, GraphIO.WIDTH: self.width,
                     GraphIO.SRC_MASK: self.src_mask, **self._layout_reads()}
            writes = {GraphIO.TOP_TOKENS: self.top_tokens, GraphIO.TOP_LOGP: self.top_logp}
            for name, array in reads.items():
                if step.bound.get(name) is not array:  # over the array's memory on the CPU
                    step.binding.bind_cpu_input(name, array)
            for name, array in writes.items():
                if step.bound.get(name) is not array:  # an OrtValue over the array's memory
                    step.binding.bind_ortvalue_output(name, ort.OrtValue.ortvalue_from_numpy(array))
            step.bound, step.host_arrays = {**reads, **writes}, self.host_arrays
        if t.copies_bound_inputs:
            for name, array in ((GraphIO.TOKENS, self.tokens), (GraphIO.POSITIONS, self.positions),
                                (GraphIO.WIDTH, self.width)):
                step.binding.bind_cpu_input(name, array)
        return step.binding

    def apply(self, plan: StepPlan) -> None:
        raise NotImplementedError

    def _shrink(self) -> None:
        """After sentences left: cut the encoder keys/values to the longest source left and the self-attention
        cache to the slots the rows left need, so that a long sentence does not slow the batch once it is gone."""
        longest = longest_source(self.src_mask)
        if self._cuts(longest, self.src_mask.shape[1]):
            self._set_cross_kv(self._resize(self.cross_kv, longest, self.cross_rows))
            self._replace(src_mask=np.ascontiguousarray(self.src_mask[:, :longest]))
        slots = self._slots_needed()
        if self._cuts(slots, self.slots):
            self._set_self_kv(self._resize(self.self_kv, slots, len(self.positions)))

    def _cuts(self, needed: int, held: int) -> bool:
        """Whether _shrink cuts a cache's axis that holds `held` to the `needed` the rows left need: always where
        it holds more, since the step reads all of it."""
        return needed < held

    def _slots_needed(self) -> int:
        """The self-attention slots the rows need."""
        return cache_slots(self.needed, self.model.model_config.max_len)

    def _resize(self, values: list[ort.OrtValue], length: int, rows: int) -> list[ort.OrtValue]:
        """The first `rows` of values padded with zeros or cut to `length` along axis 2, in new tensors: a join
        onto no rows, its pad negative to cut."""
        _, h, now, dh = shape_of(values[0])
        none = np.zeros((0, h, length, dh), self.model.cache_type)
        return self._join([none] * len(values), 0, values, length - now, rows)

    def _join(self, a: list, a_rows: int, b: list, b_short: int, b_rows: int | None = None) -> list[ort.OrtValue]:
        """concat(a_i[:a_rows], b_i[:b_rows]) along the rows, b_i padded with zeros along axis 2 by `b_short` (0
        when it has a_i's length already): new tensors, or a itself where its tensors have room for b_i's rows
        after their first a_rows, written there (joined_in_place; the rows of sentences that left). a_i is not
        padded: its copy into the result is the only one (a join is one copy of the running batch's caches). On
        the CPU the tensors are joined one at a time, each pair let go (the lists emptied) before the next is made,
        so that a join holds one cache tensor twice, not the whole cache. On the GPU the caches hold exactly their
        rows (ExportedDecoder's)."""
        if self.model.on_gpu:  # one run of the join graph: ONNX Runtime's arena keeps what the old ones held
            joined = run_graph(self.model, self.model.join, "a", a, {"pads_b": axis2_pads(b_short)}, second=("b", b))
            a.clear()
            b.clear()
            return joined
        if joined_in_place(a, a_rows, b):
            return a
        self._let_go()
        joined = []
        while a:
            a_i, b_i = a.pop(0), b.pop(0)
            joined.append(joined_on_cpu(host_array(a_i)[:a_rows], host_array(b_i)[:b_rows], self.model.cache_type))
        return joined

    def _let_go(self) -> None:
        """Drop what holds the caches' tensors besides self_kv and cross_kv: the step's bindings."""
        # by the ids of the first tensors they bind (self-attention, then cross-attention)
        self.step_bindings: dict[tuple[int, int], StepBinding] = {}


class ExportedDecoder(EagerDecoder):
    """The step as exported: each row reads its own caches, so a StepPlan gathers the caches' rows (the select cache
    graph). A beam reorder that keeps every row writes into spare buffers of the caches' shapes, which then change
    places with the caches: two sets of buffers take turns, each with its step and reorder bindings."""

    def _let_go(self) -> None:
        super()._let_go()
        self.spare: list[ort.OrtValue] = []
        self.reorder_bindings: dict[int, tuple[list[ort.OrtValue], ort.IOBinding]] = {}

    def hand_over(self) -> RunningRows:
        """The running rows, for another decoder to go on with; this one is left empty."""
        rows = RunningRows(self.self_kv, self.cross_kv, self.positions, self.src_mask)
        self._empty()
        return rows

    def take_over(self, rows: RunningRows) -> None:
        """Go on with rows another decoder ran, in place of none."""
        self._set_cross_kv(rows.cross_kv)
        self._replace(positions=rows.positions.copy(), src_mask=rows.src_mask)
        self._set_self_kv(rows.self_kv)

    @property
    def cache_bytes(self) -> int:
        return super().cache_bytes + held_bytes(self.spare)

    def _first_cache(self, rows: int) -> list[ort.OrtValue]:
        """cache_slots(1) slots of zeros: the exported step reads every slot (those after a row's position masked,
        which a NaN would not survive)."""
        t, cfg = self.model, self.model.model_config
        empty = np.zeros((rows, cfg.n_heads, 0, cfg.d_head), t.cache_type)
        return self._resize([empty] * len(t.self_names), cache_slots(1, cfg.max_len), rows)

    def apply(self, plan: StepPlan) -> None:
        rows, places = plan.parents.astype(np.int64), plan.places
        if not len(rows):
            self._empty()
            return
        t = self.model
        if places is None and len(rows) == len(self.positions):
            self._reorder(rows)
        else:
            self._set_self_kv(run_graph(t, t.select, "x", self.self_kv, {"rows": rows}))
            self._replace(positions=self.positions[rows])
        if places is not None:
            self._set_cross_kv(run_graph(t, t.select, "x", self.cross_kv, {"rows": places.astype(np.int64)}))
            self._replace(src_mask=self.src_mask[places])
            self._shrink()

    def _reorder(self, rows: np.ndarray) -> None:
        """A beam reorder of every row: the self-attention caches' rows in a new order, written into the spare
        buffers, which then take the caches' place."""
        t = self.model
        if not self.spare:
            self.spare = [ort.OrtValue.ortvalue_from_shape_and_type(v.shape(), t.cache_type, t.device)
                          for v in self.self_kv]
        _, binding = self.reorder_bindings.get(id(self.self_kv[0]), (None, None))
        if binding is None:
            binding = t.select.io_binding()
            for i, (value, into) in enumerate(zip(self.self_kv, self.spare)):
                binding.bind_ortvalue_input(f"x_{i}", value)
                binding.bind_ortvalue_output(f"y_{i}", into)
            self.reorder_bindings[id(self.self_kv[0])] = [*self.self_kv, *self.spare], binding
        binding.bind_cpu_input("rows", rows)
        t.select.run_with_iobinding(binding, t.run_options)
        self.self_kv, self.spare = self.spare, self.self_kv
        self.positions[:] = self.positions[rows]  # in place: the step bindings read it there
        self._count_needed()


class SlotTableDecoder(EagerDecoder):
    """The step with our kernels, which read each slot of a row where the slot table (slot_rows, a host array the
    step reads) says, and the encoder keys/values of a row from its sentence's row of them (cross_from): the caches
    hold them once a sentence, not once a beam row.

    A beam reorder reorders the table's rows, and no cache is touched: a row that takes another parent reads the
    parent's slots where they are, and writes its next slot in its own row. When sentences leave, each sentence's
    rows move to its new place (the plan's places; core.search fills a batch's holes from its end, so few move),
    within the caches' own memory, of a self-attention cache row only the slots written; the table follows them.
    The caches stay the same tensors, bound as they were: the step reads their first rows, one a row of the batch,
    and the rows after those are room that sentences joining take (joined_in_place). The encoder keys/values of the
    sentences that stay do not move then: cross_from names their rows where they are, until the rows read half of
    the cross_rows in use or fewer, or sentences join (_move_cross). Invariant: a row's slots from its position on
    are its own.
    """

    def _empty(self) -> None:
        self.slot_rows = np.zeros((0, 0), dtype=np.int64)  # where each row's slots are
        self.cross_from = NO_CROSS  # the row of the encoder keys/values each row reads: its sentence's (_cross_from)
        self.shared_slots = False  # whether some row reads slots of another row (else the step gets NO_TABLE)
        super()._empty()

    def _let_go(self) -> None:
        super()._let_go()
        # the move graph's, in place, by the id of the first tensor they bind, with the tensors (held: their ids)
        self.move_bindings: dict[int, tuple[list[ort.OrtValue], ort.IOBinding]] = {}

    def _set_self_kv(self, values: list[ort.OrtValue]) -> None:
        super()._set_self_kv(values)
        self._fit_slot_rows(len(self.slot_rows))

    def _fit_slot_rows(self, rows: int) -> None:
        """The slot table at `rows` rows and the caches' slots: the rows and slots it gains hold their own (rows
        joined; slots grown, or cut)."""
        if self.slot_rows.shape == (rows, self.slots):
            return
        table = own_slots(rows, self.slots)
        kept_rows, kept_slots = min(rows, len(self.slot_rows)), min(self.slots, self.slot_rows.shape[1])
        table[:kept_rows, :kept_slots] = self.slot_rows[:kept_rows, :kept_slots]
        self._replace(slot_rows=table)

    def _first_cache(self, rows: int) -> list[ort.OrtValue]:
        """Memory allocated and left as it is: our kernels read no slot before they write it. Rows for FEW_ROWS at
        least: a beam sentence's row becomes its beams after its first step, into that room rather than into new
        caches (and the step's bindings anew); memory no row writes takes no page."""
        t, cfg = self.model, self.model.model_config
        shape = (max(rows, FEW_ROWS), cfg.n_heads, self._first_slots(rows), cfg.d_head)
        return [cpu_tensor(shape, np.float32) for _ in t.self_names]

    def _first_slots(self, rows: int) -> int:
        """A batch's first slots: at FEW_ROWS rows or fewer, KERNELS_FIRST_SLOTS, which most sentences do not
        outgrow."""
        return cache_slots(KERNELS_FIRST_SLOTS if rows <= FEW_ROWS else 1, self.model.model_config.max_len)

    def _cuts(self, needed: int, held: int) -> bool:
        """Only once the rows need half of it or less: our kernels read no slot past a row's position, nor source
        past its sentence's last token, so a cut saves memory alone, and a cache that keeps its rows' memory takes
        the next sentences to join into the rows that left (joined_in_place), where a cut copies every row."""
        return needed <= held // 2

    def _slots_needed(self) -> int:
        """Never fewer than a batch's first slots (which a cut would only make it grow back to)."""
        return max(super()._slots_needed(), self._first_slots(len(self.positions)))

    def add(self, src: np.ndarray, src_mask: np.ndarray) -> None:
        if len(self.positions):  # the joiners take the place of sentences that left (joined_in_place)
            self._move_cross(self._cross_rows_read(), now=True)
        super().add(src, src_mask)

    def _joined(self, running: int, running_cross: int, new: int) -> None:
        """The new rows' slots are their own, and each reads its sentence's keys/values, joined after
        running_cross rows of them."""
        self._fit_slot_rows(running + new)
        self._cross_from(np.concatenate([self._cross_rows_read(), running_cross + np.arange(new)]))

    def _layout_reads(self) -> dict[str, np.ndarray]:
        return {SLOT_ROWS: self.slot_rows if self.shared_slots else NO_TABLE, CROSS_FROM: self.cross_from}

    def _width(self, width: int, log_probs: bool) -> int:
        """Negative where no log-probability is read: our top-k kernel then skips the vocabulary's log-sum-exp."""
        return width if log_probs else -width

    def apply(self, plan: StepPlan) -> None:
        rows, places = plan.parents.astype(np.int64), plan.places
        if not len(rows):
            self._empty()
            return
        if len(rows) > self.self_kv[0].shape()[0]:  # beams grown from their first rows: room for them
            self._add_rows(len(self.positions), len(rows) - len(self.positions))
        if places is not None:  # the rows move to their places: a sentence's slots stay within its rows
            places = places.astype(np.int64)
            self._move(self.self_kv, places, self.positions)
            self._move_cross(self._cross_rows_read()[places])
        positions = self.positions[rows]
        table, shared = self._table(rows, places, positions)
        if len(rows) == len(self.positions):
            self.positions[:], self.slot_rows[:] = positions, table  # in place: the step bindings read them there
            self._count_needed()
        else:
            self._replace(positions=positions, slot_rows=table)
        if shared != self.shared_slots:  # the step binds the table, or NO_TABLE, afresh
            self.shared_slots = shared
            self.host_arrays += 1
        if places is not None:
            self._replace(src_mask=self.src_mask[places])
            self._shrink()

    def _table(self, rows: np.ndarray, places: np.ndarray | None, positions: np.ndarray) -> tuple[np.ndarray, bool]:
        """The slot table after a plan (rows the parents, places where the rows moved to), given the rows' positions
        then; and whether some row reads slots of another."""
        if not self.shared_slots and places is not None and np.array_equal(rows, places):
            # each row its own parent, its slots its own: in its new place (a grown beam's, copies of its first row)
            held = len(rows) <= len(self.slot_rows)
            return self.slot_rows[: len(rows)] if held else own_slots(len(rows), self.slots), False
        table = self.slot_rows[rows]
        if places is not None:
            moved_to = np.zeros(len(self.positions), dtype=np.int64)  # each old row's new place (0: a row that left,
            moved_to[places] = np.arange(len(places))  # which no slot of a row left reads)
            table = moved_to[table]
        own = np.arange(len(rows))[:, None]
        table = np.where(np.arange(self.slots) < positions[:, None], table, own)
        return table, bool((table != own).any())

    def _cross_rows_read(self) -> np.ndarray:
        """The row of the encoder keys/values each row reads."""
        return self.cross_from if len(self.cross_from) else np.arange(len(self.positions))

    def _cross_from(self, rows: np.ndarray) -> None:
        """Each row reads the encoder keys/values of these rows: its sentence's. NO_CROSS where each row reads its
        own (a row a sentence, every row of the tensors read)."""
        own = len(rows) == self.cross_kv[0].shape()[0] and not (rows != np.arange(len(rows))).any()
        self._replace(cross_from=NO_CROSS if own else rows)

    def _move_cross(self, read: np.ndarray, now: bool = False) -> None:
        """After sentences left, or `now`: the rows read the encoder keys/values of rows `read` (a row each, in the
        rows' new order). Those stay where they are until the rows read few enough of the cross_rows in use
        (_cuts, as for a cut): a move copies every sentence's that stays, to give its place to sentences that join.
        Then, and `now`, the ones read move to the first rows, in the order the rows first read them."""
        held = self.cross_rows
        used = np.zeros(held, dtype=bool)
        used[read] = True
        kept = int(np.count_nonzero(used))
        if kept == held or not (now or self._cuts(kept, held)):
            self._cross_from(read)
            return
        _, first = np.unique(read, return_index=True)
        order = read[np.sort(first)]  # the sentences left, in the order of their first rows
        new_row = np.zeros(held, dtype=np.int64)
        new_row[order] = np.arange(len(order))
        self._move(self.cross_kv, order, np.full(held, self.src_mask.shape[1], dtype=np.int64))  # the kernel reads all
        self.cross_rows = len(order)
        self._cross_from(new_row[read])

    def _move(self, values: list[ort.OrtValue], rows: np.ndarray, lengths: np.ndarray) -> None:
        """values[i][:M] = values[i][rows] in place (the move graph), each row's first lengths[row] slots. The
        binding, of the tensors as their own outputs, is made once a set of them."""
        _, binding = self.move_bindings.get(id(values[0]), (None, None))
        if binding is None:
            binding = self.model.move.io_binding()
            self.move_bindings[id(values[0])] = list(values), binding
            for i, value in enumerate(values):
                binding.bind_ortvalue_input(f"x_{i}", value)
                binding.bind_ortvalue_output(f"y_{i}", value)
        binding.bind_cpu_input("rows", rows)
        binding.bind_cpu_input("lengths", lengths)
        self.model.move.run_with_iobinding(binding, self.model.run_options)


def eager_decoder(model: ModelSessions) -> EagerDecoder:
    """The eager decoder of the layout the sessions' step reads: the slot table where it runs our kernels."""
    return SlotTableDecoder(model) if model.kernels else ExportedDecoder(model)


def encode(model: ModelSessions, src: np.ndarray, src_mask: np.ndarray) -> list[ort.OrtValue]:
    """The encoder keys/values of sentences src (N, S), one row each, on the device.

    On the CPU the encoder runs on the sentences shortest first, at most ENCODE_TOKENS padded source tokens at a
    time, each run padded only to its own longest sentence (encode_runs): its activations at a whole batch would
    take several times the memory of its keys/values, and a batch's padding is most of its tokens where lengths are
    mixed. A sentence's keys/values past its run's padding are zeros, which the attention masks. (An int8 graph's
    dynamic quantization scales each activation by its run's range: there a sentence's encoding depends on the
    sentences of similar length it runs with.)"""
    if model.on_gpu:
        return encode_rows(model, src, src_mask)
    cfg = model.model_config
    shape = (len(src), cfg.n_heads, src.shape[1], cfg.d_head)
    cross_kv = [cpu_tensor(shape, model.cache_type) for _ in model.cross_names]
    runs = encode_runs(src_mask)
    if len(runs) == 1:  # one run, of the whole batch as it is: written in place
        return encode_rows(model, src, src_mask, cross_kv)
    held = [value.numpy() for value in cross_kv]
    for rows, length in runs:
        for whole, part in zip(held, encode_rows(model, src[rows, :length], src_mask[rows, :length])):
            whole[rows, :, :length] = part.numpy()
            whole[rows, :, length:] = 0
    return cross_kv


def encode_runs(src_mask: np.ndarray) -> list[tuple[np.ndarray, int]]:
    """The encoder's runs over a batch on the CPU: the rows of each, shortest sentences first, and the length they
    are padded to (their longest), each run at most ENCODE_TOKENS padded tokens or one sentence."""
    lengths = src_mask.shape[1] - np.argmax(src_mask[:, ::-1], axis=1)  # past each sentence's last token
    order = np.argsort(lengths, kind="stable")
    runs, start = [], 0
    for end in range(1, len(order) + 1):
        if end == len(order) or (end + 1 - start) * lengths[order[end]] > ENCODE_TOKENS:
            runs.append((order[start:end], int(lengths[order[end - 1]])))
            start = end
    return runs


def encode_rows(model: ModelSessions, src: np.ndarray, src_mask: np.ndarray,
                into: list[ort.OrtValue] | None = None) -> list[ort.OrtValue]:
    """One run of the encoder over sentences src: their keys/values, new tensors on the device or written into
    `into`."""
    binding = model.encoder.io_binding()
    binding.bind_cpu_input(GraphIO.SRC, src)
    binding.bind_cpu_input(GraphIO.SRC_MASK, src_mask)
    for i, name in enumerate(model.cross_names):
        if into is None:
            binding.bind_output(name, model.device)
        else:
            binding.bind_ortvalue_output(name, into[i])
    model.encoder.run_with_iobinding(binding, model.run_options)
    return into if into is not None else binding.get_outputs()


def run_graph(model: ModelSessions, session: ort.InferenceSession, prefix: str, values: list,
              cpu_inputs: dict[str, np.ndarray], second: tuple[str, list] | None = None,
              into: list[ort.OrtValue] | None = None) -> list[ort.OrtValue]:
    """Run a cache graph over values (inputs prefix_0, prefix_1, ...) on the device; outputs y_0, y_1, ..., new
    tensors or written into `into`."""
    binding = session.io_binding()
    for name, group in [(prefix, values), *([second] if second else [])]:
        for i, value in enumerate(group):
            if isinstance(value, ort.OrtValue):
                binding.bind_ortvalue_input(f"{name}_{i}", value)
            else:
                binding.bind_cpu_input(f"{name}_{i}", value)
    for name, value in cpu_inputs.items():
        binding.bind_cpu_input(name, value)
    for i in range(len(values)):
        if into is None:
            binding.bind_output(f"y_{i}", model.device)
        else:
            binding.bind_ortvalue_output(f"y_{i}", into[i])
    session.run_with_iobinding(binding, model.run_options)
    return into if into is not None else binding.get_outputs()


def joined_on_cpu(a: np.ndarray, b: np.ndarray, dtype: type) -> ort.OrtValue:
    """concat(a, b) along the rows in a new CPU tensor of a's length (axis 2): b cut to it, or padded with zeros."""
    rows, h, length, dh = a.shape
    joined = cpu_tensor((rows + b.shape[0], h, length, dh), dtype)
    y = joined.numpy()  # the tensor's memory
    y[:rows] = a
    write_rows(y, rows, b)
    return joined


def joined_in_place(a: list[ort.OrtValue], rows: int, b: list) -> bool:
    """Whether every a_i, CPU tensors, has room for b_i's rows after its first `rows`: then b_i (cut to a_i's
    length, or padded with zeros) is written there, so that the running rows are not copied. The room is that of
    rows that left the batch (SlotTableDecoder moves the rows that stay to the first rows)."""
    if not all(isinstance(a_i, ort.OrtValue) and a_i.shape()[0] >= rows + shape_of(b_i)[0] for a_i, b_i in zip(a, b)):
        return False
    for a_i, b_i in zip(a, b):
        write_rows(a_i.numpy(), rows, host_array(b_i))  # into the tensor's memory
    return True


def write_rows(y: np.ndarray, start: int, x: np.ndarray) -> None:
    """y[start : start + len(x)] = x, cut to y's length (axis 2) or padded with zeros."""
    end, kept = start + len(x), min(y.shape[2], x.shape[2])
    y[start:end, :, :kept] = x[:, :, :kept]
    y[start:end, :, kept:] = 0


def host_array(value: ort.OrtValue | np.ndarray) -> np.ndarray:
    """A CPU tensor's memory as a NumPy array (no copy)."""
    return value.numpy() if isinstance(value, ort.OrtValue) else value


def cpu_tensor(shape: tuple[int, ...], dtype: type) -> ort.OrtValue:
    """A CPU tensor outside ONNX Runtime's arena (the process's malloc), whose memory goes with it. The arena would
    keep every size a cache once had: a cache that grows a few slots at a time fits in none of its old regions."""
    return ort.OrtValue.ortvalue_from_shape_and_type(shape, dtype, "cpu")


def held_bytes(values: list[ort.OrtValue]) -> int:
    """The memory tensors hold."""
    return sum(int(np.prod(value.shape())) * np.dtype(NUMPY_TYPES[value.data_type()]).itemsize for value in values)


def shape_of(value: ort.OrtValue | np.ndarray) -> tuple[int, ...]:
    return tuple(value.shape()) if isinstance(value, ort.OrtValue) else value.shape


def own_slots(rows: int, slots: int) -> np.ndarray:
    """A slot table in which every row's slots are its own: (rows, slots), row i all i."""
    return np.repeat(np.arange(rows, dtype=np.int64)[:, None], slots, axis=1)


def axis2_pads(grow: int) -> np.ndarray:
    """ONNX Pad's pads that grow (or, negative, cut) a cache's axis 2 at its end."""
    return np.array([0, 0, 0, 0, 0, 0, grow, 0], dtype=np.int64)


def longest_source(src_mask: np.ndarray) -> int:
    """The length of the longest source of a right-padded (N, S) mask."""
    return int(np.flatnonzero(src_mask.any(axis=0)).max()) + 1


def pad_columns(mask: np.ndarray, length: int) -> np.ndarray:
    """A (N, S) bool mask padded with False to (N, length), without np.pad's general machinery (a join pads two)."""
    padded = np.zeros((len(mask), length), dtype=mask.dtype)
    padded[:, : mask.shape[1]] = mask
    return padded
