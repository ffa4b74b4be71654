"""The ONNX Runtime translator: loads a model folder and translates batches with a KV cache.

    translator = Translator("models/en-de")
    translator.translate(["Hello, how are you?"])[0][0].text

The caches stay on the device between steps (I/O binding; GPU memory on CUDA) and the cache graphs
(service.cache_graphs) reorder, append and grow them there. The search itself is core.search: offline, search()
over one OrtDecoder; in the server, the batcher's running batch over one.
"""

from __future__ import annotations

import ctypes
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from core.folder import FolderConfig
from core.search import Hypothesis, SearchOptions, cache_slots, search
from core.tokenizer import load_tokenizer
from core.translate import Translation, translate_texts
from service.cache_graphs import join_graph, select_graph

log = logging.getLogger(__name__)

OPTIMIZATION_LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}


@dataclass
class BatchResult:
    hypotheses: list[list[Hypothesis]]
    encode_seconds: float = 0.0
    decode_seconds: float = 0.0
    steps: int = 0  # decoder steps run


def session_options(threads: int, optimization: str, spin_threads: bool) -> ort.SessionOptions:
    """Threads, graph optimizations, and whether idle intra-op threads spin waiting for work.

    Spinning saves a wake-up per operator when the process has the cores to itself; beside an HTTP server on
    few cores it takes the CPU that the event loop and the search need between two decoder steps.
    """
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = OPTIMIZATION_LEVELS[optimization]
    opts.log_severity_level = 3
    opts.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin_threads else "0")
    return opts


# Graph fusions left out on the CPU: ONNX Runtime 1.31's CPU SkipLayerNormalization kernel takes 6-7x as long as
# the Add and LayerNormalization it replaces on (N, T, D) inputs (1.72 against 0.25 ms at (64, 20, 256)), which
# made the layer norms an eighth of a decoder step. GPU sessions keep the fusion.
CPU_UNFUSED = ["SkipLayerNormFusion"]


def wanted_providers(provider: str) -> list[str]:
    """What to ask ONNX Runtime for; what it really runs is read back from a session (running_provider)."""
    if provider == "cpu":
        return ["CPUExecutionProvider"]
    if provider == "cuda" or "CUDAExecutionProvider" in ort.get_available_providers():
        return ["CUDAExecutionProvider", "CPUExecutionProvider"]
    return ["CPUExecutionProvider"]


def running_provider(provider: str) -> str:
    """The provider ONNX Runtime really runs on when asked for `provider`. CUDA may be listed and still be unusable
    (no driver, no CUDA libraries); a session then falls back to the CPU. A one-node graph finds out."""
    if provider == "auto":
        ort.set_default_logger_severity(4)  # a failed CUDA probe is expected here, not an error
    try:
        probe = ort.InferenceSession(select_graph(1), providers=wanted_providers(provider))
    finally:
        ort.set_default_logger_severity(2)
    return probe.get_providers()[0]


class Translator:
    def __init__(
        self,
        model_dir: str | Path,
        precision: str = "fp32",
        provider: str = "auto",
        threads: int = 0,
        optimization: str = "all",
        spin_threads: bool = False,
    ):
        self.model_dir = Path(model_dir)
        self.config = FolderConfig.load(self.model_dir)
        self.model_config = self.config.model
        if precision not in self.config.graphs:
            raise ValueError(f"{self.model_dir} has no {precision} graphs; it has {sorted(self.config.graphs)}")
        self.precision = precision
        self.tokenizer = load_tokenizer(self.model_dir, self.config.tokenizer, self.model_config.case_tags)
        self.provider = running_provider(provider)
        if provider == "cuda" and self.provider != "CUDAExecutionProvider":
            log.warning("CUDA was asked for but is not usable here; ONNX Runtime runs on %s", self.provider)
        elif provider == "auto":
            log.info("provider auto: ONNX Runtime runs on %s", self.provider)
        self.on_gpu = self.provider == "CUDAExecutionProvider"
        self.device = "cuda" if self.on_gpu else "cpu"  # where the caches stay between steps
        graphs = self.config.graphs[precision]
        self.options = session_options(threads, optimization, spin_threads)
        self.encoder = self._session(graphs["encoder"])
        self.decoder = self._session(graphs["decoder"])
        if "positions" not in {x.name for x in self.decoder.get_inputs()}:
            raise ValueError(f"{self.model_dir} holds graphs of an older export (a cache that grows by concatenation, "
                             "no positions); export its model.pt again with `python -m export`")
        self.cross_names = names(self.encoder, "cross_", outputs=True)
        self.self_names = names(self.decoder, "self_")
        self.select = self._session(select_graph(len(self.self_names)))
        self.join = self._session(join_graph(len(self.self_names)))
        self.new_self_names = names(self.decoder, "new_self_", outputs=True)
        # None unless needed: with any RunOptions, onnxruntime 1.31's Python run_with_iobinding looks up a
        # gpu_graph_id entry, and the lookup of an absent entry raises and catches an error, 50 us every run
        self.run_options: ort.RunOptions | None = None

    def _session(self, graph: str | bytes) -> ort.InferenceSession:
        """A session, on the provider found running, of a graph file of the folder or of a graph built in memory."""
        source = graph if isinstance(graph, bytes) else str(self.model_dir / graph)
        providers = [self.provider, "CPUExecutionProvider"] if self.on_gpu else ["CPUExecutionProvider"]
        return ort.InferenceSession(source, self.options, providers=providers,
                                    disabled_optimizers=None if self.on_gpu else CPU_UNFUSED)

    @property
    def name(self) -> str:
        return self.config.name

    def encode_texts(self, texts: list[str], target: str | None = None) -> list[list[int]]:
        """Source ids of each text, as the encoder reads them (ModelConfig.source_ids)."""
        return self.model_config.source_ids(self.tokenizer.encode(texts), target)

    def new_decoder(self) -> OrtDecoder:
        """An empty decoder for a running batch (core.search.RunningBatch)."""
        return OrtDecoder(self)

    def translate_ids(self, sources: list[list[int]], opts: SearchOptions) -> BatchResult:
        """Translate source ids in one running batch; returns hypotheses and where the time went."""
        started, decoder = time.perf_counter(), self.new_decoder()
        hyps = search(decoder, sources, opts, self.model_config)
        total = time.perf_counter() - started
        return BatchResult(hyps, decoder.encode_seconds, total - decoder.encode_seconds, decoder.steps)

    def release_memory(self) -> None:
        """Give the memory of past batches back to the system: ONNX Runtime's arenas keep what the largest batch
        took (a 64-sentence beam-8 batch: 600 MiB) for reuse. One beam-2 sentence runs every graph with arena
        shrinkage on, which frees the arenas' unused regions, and glibc returns its free pages. A few ms: the batcher
        calls it when the queue runs empty, never between two batches of a busy server."""
        self.run_options = shrinking_run_options(self.device)
        try:
            self.translate_ids([[self.tokenizer.eos_id]], SearchOptions(beam_size=2, max_length=2))
        finally:
            self.run_options = None
        trim_malloc()

    def translate(
        self, texts: list[str], opts: SearchOptions | None = None, batch_size: int = 64, target: str | None = None
    ) -> list[list[Translation]]:
        """Translate texts (batched by length): the n_best translations of each, best first. `target`: one of the
        model's target languages, where it has several (ModelConfig.targets)."""
        opts = opts or SearchOptions()
        translate_ids = lambda sources, o: self.translate_ids(sources, o).hypotheses  # noqa: E731
        return translate_texts(translate_ids, self.tokenizer, self.model_config, texts, opts, batch_size, target)


def shrinking_run_options(device: str) -> ort.RunOptions:
    options = ort.RunOptions()
    options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "gpu:0" if device == "cuda" else "cpu:0")
    return options


def trim_malloc() -> None:
    """glibc's malloc_trim(0): free heap pages go back to the system (elsewhere nothing to do)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def names(session: ort.InferenceSession, prefix: str, outputs: bool = False) -> list[str]:
    """The names of a graph's cache tensors (prefix_k_0, prefix_v_0, ...), in graph order."""
    return [x.name for x in (session.get_outputs() if outputs else session.get_inputs()) if x.name.startswith(prefix)]


class OrtDecoder:
    """A decoder (core.search.Decoder) whose caches stay where ONNX Runtime runs between steps.

    The caches stay on the device (GPU memory on CUDA); each decoder step's cache outputs are bound to the very
    buffers of its cache inputs, so the step writes its slot in place. The cache graphs (service.cache_graphs)
    reorder, append and grow them there. Nothing but the tokens, the positions and the top-k
    crosses to NumPy, and on the CPU ONNX Runtime's allocator reuses the caches' memory from step to step, where
    NumPy would allocate (and fault in) fresh pages.
    """

    def __init__(self, translator: Translator):
        self.translator = translator
        self.src_mask = np.zeros((0, 0), dtype=bool)
        self.steps = 0
        self.encode_seconds = 0.0
        self._empty()

    def _empty(self) -> None:
        """No rows: no caches, and no binding that holds their memory; the next add starts afresh."""
        self.cross_kv: list[ort.OrtValue] = []
        self.positions = np.zeros(0, dtype=np.int64)  # each row's next position
        self.top_tokens = self.top_logp = None  # OrtValues the step writes its top-k into
        self._set_self_kv([])

    def _set_self_kv(self, values: list[ort.OrtValue]) -> None:
        """New buffers for the self-attention caches; the bindings and the spare buffers of the old ones go.

        The bindings are kept from step to step and made again only for new buffers: binding a dozen tensors
        at every step, and a new binding for every beam reorder, were a fifth of a one-sentence beam-4 step.
        A beam reorder (select keeping every row) writes into `spare`, buffers of the caches' shapes, which then
        change places with self_kv: two sets of buffers take turns, each with its step and reorder bindings.
        """
        self.self_kv = values
        self.spare: list[ort.OrtValue] = []
        # by the ids of the first tensors they bind (self-attention; then cross-attention for a step); each entry
        # holds the tensors whose memory its binding points at, so that no other tensor can take their ids
        self.step_bindings: dict[tuple[int, int], tuple[list[ort.OrtValue | None], ort.IOBinding]] = {}
        self.reorder_bindings: dict[int, tuple[list[ort.OrtValue], ort.IOBinding]] = {}

    @property
    def slots(self) -> int:
        return self.self_kv[0].shape()[2] if self.self_kv else 0

    def add(self, src: np.ndarray, src_mask: np.ndarray, repeat: np.ndarray) -> None:
        started = time.perf_counter()
        t, cfg = self.translator, self.translator.model_config
        binding = t.encoder.io_binding()
        binding.bind_cpu_input("src", src)
        binding.bind_cpu_input("src_mask", src_mask)
        for name in t.cross_names:
            binding.bind_output(name, t.device)
        t.encoder.run_with_iobinding(binding, t.run_options)
        cross_kv, rows = binding.get_outputs(), np.repeat(np.arange(len(src)), repeat)  # sentence i repeat[i] times
        if (repeat != 1).any():
            cross_kv = self._run(t.select, "x", cross_kv, {"rows": rows})
        if not len(self.positions):
            self.cross_kv, self.src_mask = cross_kv, src_mask[rows]
            empty = np.zeros((len(rows), cfg.n_heads, 0, cfg.d_head), np.float32)
            self._set_self_kv(self._resize([empty] * len(t.self_names), cache_slots(1, cfg.max_len)))
        else:  # the new rows after the running ones, the encoder outputs padded to the longer source
            length = max(self.src_mask.shape[1], src_mask.shape[1])
            if length > self.src_mask.shape[1]:  # rarely: most joins pad only the newcomers
                self.cross_kv = self._resize(self.cross_kv, length)
            self.cross_kv = self._join(self.cross_kv, cross_kv, length - src_mask.shape[1])
            self.src_mask = np.concatenate([pad_columns(self.src_mask, length), pad_columns(src_mask[rows], length)])
            new = np.zeros((len(rows), cfg.n_heads, 0, cfg.d_head), np.float32)
            self._set_self_kv(self._join(self.self_kv, [new] * len(self.self_kv), self.slots))
        self.positions = np.concatenate([self.positions, np.zeros(len(rows), dtype=np.int64)])
        self.encode_seconds += time.perf_counter() - started

    def step(self, tokens: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
        t = self.translator
        slots = cache_slots(int(self.positions.max()) + 1, t.model_config.max_len)
        if slots > self.slots:
            self._set_self_kv(self._resize(self.self_kv, slots))
        width = min(width, t.model_config.vocab_size)
        binding = self._binding(len(tokens), width)
        binding.bind_cpu_input("tokens", tokens)
        binding.bind_cpu_input("positions", self.positions)
        binding.bind_cpu_input("width", np.array([width]))
        binding.bind_cpu_input("src_mask", self.src_mask)
        t.decoder.run_with_iobinding(binding, t.run_options)
        self.positions = self.positions + 1
        self.steps += 1
        # copies: numpy() views the buffers that the next step overwrites
        return self.top_tokens.numpy().copy(), self.top_logp.numpy().copy()

    def _binding(self, rows: int, width: int) -> ort.IOBinding:
        """The step's binding of the current caches, with the top-k outputs bound again where they changed. Each
        cache output is bound to the buffer of its input: the step writes its slot in place, with no copy of the
        cache and no new memory."""
        t = self.translator
        key = id(self.self_kv[0]), id(self.cross_kv[0])
        held, binding = self.step_bindings.get(key, (None, None))
        if binding is None:
            binding = t.decoder.io_binding()
            caches = [*self.self_kv, *self.cross_kv]
            for name, value in zip([*t.self_names, *t.cross_names], caches):
                binding.bind_ortvalue_input(name, value)
            for name, value in zip(t.new_self_names, self.self_kv):
                binding.bind_ortvalue_output(name, value)
            held = [*caches, None, None]  # and the top-k outputs it has bound
            self.step_bindings[key] = held, binding
        if self.top_tokens is None or self.top_tokens.shape() != [rows, width]:
            self.top_tokens = ort.OrtValue.ortvalue_from_shape_and_type([rows, width], np.int64)
            self.top_logp = ort.OrtValue.ortvalue_from_shape_and_type([rows, width], np.float32)
        if held[-2] is not self.top_tokens:
            binding.bind_ortvalue_output("top_tokens", self.top_tokens)
            binding.bind_ortvalue_output("top_logp", self.top_logp)
            held[-2:] = self.top_tokens, self.top_logp
        return binding

    def _reorder(self, rows: np.ndarray) -> None:
        """Beam search's select of every row: the self-attention caches' rows in a new order, written into the
        spare buffers, which then take the caches' place."""
        t = self.translator
        if not self.spare:
            self.spare = [ort.OrtValue.ortvalue_from_shape_and_type(v.shape(), np.float32, t.device)
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

    def select(self, rows: np.ndarray, cross_rows: np.ndarray | None) -> None:
        if not len(rows):
            self._empty()
            return
        rows = rows.astype(np.int64)
        if cross_rows is None and len(rows) == len(self.positions):
            self._reorder(rows)
        else:
            self._set_self_kv(self._run(self.translator.select, "x", self.self_kv, {"rows": rows}))
        self.positions = self.positions[rows]
        if cross_rows is not None:
            cross_rows = cross_rows.astype(np.int64)
            self.cross_kv = self._run(self.translator.select, "x", self.cross_kv, {"rows": cross_rows})
            self.src_mask = self.src_mask[cross_rows]
            self._shrink()

    def _shrink(self) -> None:
        """After sentences left: cut the encoder keys/values to the longest source left and the self-attention
        cache to the slots the rows left need, so that a long sentence does not slow the batch once it is gone."""
        longest_source = int(np.flatnonzero(self.src_mask.any(axis=0)).max()) + 1  # sources are right-padded
        if longest_source < self.src_mask.shape[1]:
            self.cross_kv = self._resize(self.cross_kv, longest_source)
            self.src_mask = self.src_mask[:, :longest_source]
        slots = cache_slots(int(self.positions.max()) + 1, self.translator.model_config.max_len)
        if slots < self.slots:
            self._set_self_kv(self._resize(self.self_kv, slots))

    def _resize(self, values: list, length: int) -> list[ort.OrtValue]:
        """values (OrtValues, or NumPy arrays) padded with zeros or cut to `length` along axis 2: a join onto no
        rows, its pad negative to cut."""
        _, h, now, dh = values[0].shape() if isinstance(values[0], ort.OrtValue) else values[0].shape
        none = np.zeros((0, h, length, dh), np.float32)
        return self._join([none] * len(values), values, length - now)

    def _join(self, a: list, b: list, b_short: int) -> list[ort.OrtValue]:
        """concat(a_i, b_i) along the rows, b_i padded with zeros along axis 2 by `b_short` (0 when it has a_i's
        length already). a_i is not padded: its copy into the result is the only one (a join is one copy of the
        running batch's caches)."""
        pads = {"pads_b": np.array([0, 0, 0, 0, 0, 0, b_short, 0])}
        return self._run(self.translator.join, "a", a, pads, second=("b", b))

    def _run(self, session: ort.InferenceSession, prefix: str, values: list, cpu_inputs: dict[str, np.ndarray],
             second: tuple[str, list] | None = None) -> list[ort.OrtValue]:
        """Run a cache graph over values (inputs prefix_0, prefix_1, ...) on the device; outputs y_0, y_1, ..."""
        t = self.translator
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
            binding.bind_output(f"y_{i}", t.device)
        session.run_with_iobinding(binding, t.run_options)
        return binding.get_outputs()


def pad_columns(mask: np.ndarray, length: int) -> np.ndarray:
    """A (N, S) bool mask padded with False to (N, length)."""
    return np.pad(mask, [(0, 0), (0, length - mask.shape[1])])
