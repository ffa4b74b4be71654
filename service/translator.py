"""The ONNX Runtime translator: loads a model folder and translates batches with a KV cache.

    translator = Translator("models/en-de")
    translator.translate(["Hello, how are you?"])[0][0].text

The caches stay on the device between steps (I/O binding; GPU memory on CUDA) and select.onnx reorders them
there. The search itself is core.search.
"""

from __future__ import annotations

import ctypes
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnxruntime as ort

from core.folder import FolderConfig
from core.search import Abandoned, Hypothesis, SearchOptions, nothing_abandoned, search
from core.tokenizer import load_tokenizer
from core.translate import Translation, translate_texts

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


@dataclass
class Timer:
    """Seconds spent encoding (encoder run) and decoding (everything after), for metrics."""

    encode: float = 0.0
    started: float = field(default_factory=time.perf_counter)
    decoder: OrtDecoder | None = None


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


def wanted_providers(provider: str) -> list[str]:
    """What to ask ONNX Runtime for; what it really runs is read back from the session."""
    if provider == "cpu":
        return ["CPUExecutionProvider"]
    if provider == "cuda" or "CUDAExecutionProvider" in ort.get_available_providers():
        return ["CUDAExecutionProvider", "CPUExecutionProvider"]
    return ["CPUExecutionProvider"]


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
        self.tokenizer = load_tokenizer(self.model_dir, self.config.tokenizer)
        graphs = self.config.graphs[precision]
        self.options = session_options(threads, optimization, spin_threads)
        self.encoder = self._session(graphs["encoder"], provider)
        self.decoder = self._session(graphs["decoder"], provider)
        if "width" not in {x.name for x in self.decoder.get_inputs()}:
            raise ValueError(f"{self.model_dir} holds graphs of an older export (stacked caches, no top-k); "
                             "export its model.pt again with `python -m export`")
        self.provider = self.decoder.get_providers()[0]  # the truth: CUDA may have been asked for and fallen back
        if provider == "cuda" and self.provider != "CUDAExecutionProvider":
            log.warning("CUDA was asked for but is not usable here; ONNX Runtime runs on %s", self.provider)
        elif provider == "auto":
            log.info("provider auto: ONNX Runtime runs on %s", self.provider)
        self.on_gpu = self.provider == "CUDAExecutionProvider"
        self.device = "cuda" if self.on_gpu else "cpu"  # where the caches stay between steps
        self.select = self._session(self.config.select, provider)
        self.cross_names = names(self.encoder, "cross_", outputs=True)
        self.self_names = names(self.decoder, "self_")
        self.new_self_names = names(self.decoder, "new_self_", outputs=True)
        self.run_options = ort.RunOptions()

    def _session(self, name: str, provider: str) -> ort.InferenceSession:
        if provider == "auto":
            ort.set_default_logger_severity(4)  # a failed CUDA probe is expected here, not an error
        try:
            return ort.InferenceSession(self.model_dir / name, self.options, providers=wanted_providers(provider))
        finally:
            ort.set_default_logger_severity(2)

    @property
    def name(self) -> str:
        return self.config.name

    def encode_texts(self, texts: list[str]) -> list[list[int]]:
        """Source ids of each text, as the encoder reads them (ModelConfig.source_ids)."""
        return self.model_config.source_ids(self.tokenizer.encode(texts))

    def translate_ids(
        self, sources: list[list[int]], opts: SearchOptions, abandoned: Abandoned = nothing_abandoned
    ) -> BatchResult:
        """Translate one batch of source ids; returns hypotheses and where the time went. Sentences that
        `abandoned` names leave the batch at the next step (core.search.Abandoned)."""
        timer = Timer()

        def start(src: np.ndarray, src_mask: np.ndarray, repeat: int):
            timer.decoder = OrtDecoder(self, src, src_mask, repeat)
            timer.encode = time.perf_counter() - timer.started
            return timer.decoder

        hyps = search(start, sources, opts, self.model_config, abandoned)
        total = time.perf_counter() - timer.started
        steps = timer.decoder.steps if timer.decoder else 0
        return BatchResult(hyps, encode_seconds=timer.encode, decode_seconds=total - timer.encode, steps=steps)

    def release_memory(self) -> None:
        """Give the memory of past batches back to the system: ONNX Runtime's arenas keep what the largest batch
        took (a 64-sentence beam-8 batch: 600 MiB) for reuse. One beam-2 sentence runs every graph with arena
        shrinkage on, which frees the arenas' unused regions, and glibc returns its free pages. A few ms: the batcher
        calls it when the queue runs empty, never between two batches of a busy server."""
        self.run_options = shrinking_run_options(self.device)
        try:
            self.translate_ids([[self.tokenizer.eos_id]], SearchOptions(beam_size=2, max_length=2))
        finally:
            self.run_options = ort.RunOptions()
        trim_malloc()

    def translate(
        self, texts: list[str], opts: SearchOptions | None = None, batch_size: int = 64
    ) -> list[list[Translation]]:
        """Translate texts (batched by length): the n_best translations of each, best first."""
        opts = opts or SearchOptions()
        translate_ids = lambda sources, o: self.translate_ids(sources, o).hypotheses  # noqa: E731
        return translate_texts(translate_ids, self.tokenizer, self.model_config, texts, opts, batch_size)


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
    """Step decoder (core.search.StepDecoder) whose caches stay where ONNX Runtime runs between steps.

    The graphs' cache outputs are bound to the device (GPU memory on CUDA) and fed back as inputs; select.onnx
    reorders them there. Nothing but the tokens and the top-k crosses to NumPy, and on the CPU ONNX Runtime's
    allocator reuses the caches' memory from step to step, where NumPy would allocate (and fault in) fresh pages.
    """

    def __init__(self, translator: Translator, src: np.ndarray, src_mask: np.ndarray, repeat: int):
        self.translator = translator
        binding = translator.encoder.io_binding()
        binding.bind_cpu_input("src", src)
        binding.bind_cpu_input("src_mask", src_mask)
        for name in translator.cross_names:
            binding.bind_output(name, translator.device)
        translator.encoder.run_with_iobinding(binding, translator.run_options)
        self.cross_kv = binding.get_outputs()
        rows = np.repeat(np.arange(len(src)), repeat)  # each sentence `repeat` times
        self.src_mask = src_mask[rows]
        if repeat > 1:
            self.cross_kv = self._gather(self.cross_kv, rows)
        cfg = translator.model_config
        empty = np.zeros((len(rows), cfg.n_heads, 0, cfg.d_head), np.float32)
        self.self_kv = [ort.OrtValue.ortvalue_from_numpy(empty, translator.device)] * len(translator.self_names)
        self.steps = 0

    def step(self, tokens: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
        t = self.translator
        binding = t.decoder.io_binding()
        binding.bind_cpu_input("tokens", tokens[:, None])
        binding.bind_cpu_input("width", np.array([min(width, t.model_config.vocab_size)]))
        binding.bind_cpu_input("src_mask", self.src_mask)
        for name, value in [*zip(t.self_names, self.self_kv), *zip(t.cross_names, self.cross_kv)]:
            binding.bind_ortvalue_input(name, value)
        binding.bind_output("top_tokens", "cpu")
        binding.bind_output("top_logp", "cpu")
        for name in t.new_self_names:
            binding.bind_output(name, t.device)
        t.decoder.run_with_iobinding(binding, t.run_options)
        top_tokens, top_logp, *self.self_kv = binding.get_outputs()
        self.steps += 1
        return top_tokens.numpy(), top_logp.numpy()

    def _gather(self, values: list[ort.OrtValue], rows: np.ndarray) -> list[ort.OrtValue]:
        """values[i][rows] for every i, on the device, in one run of select.onnx."""
        binding = self.translator.select.io_binding()
        for i, value in enumerate(values):
            binding.bind_ortvalue_input(f"x_{i}", value)
            binding.bind_output(f"y_{i}", self.translator.device)
        binding.bind_cpu_input("rows", rows.astype(np.int64))
        self.translator.select.run_with_iobinding(binding, self.translator.run_options)
        return binding.get_outputs()

    def select(self, rows: np.ndarray, cross_rows: np.ndarray | None) -> None:
        self.self_kv = self._gather(self.self_kv, rows)
        if cross_rows is not None:
            self.cross_kv, self.src_mask = self._gather(self.cross_kv, cross_rows), self.src_mask[cross_rows]
