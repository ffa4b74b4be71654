"""A model folder's ONNX Runtime sessions: encoder, decoder step and cache graphs, on the provider that really runs.

    sessions = ModelSessions("models/en-de", ModelOptions(precision="int8"))

They only load: which decoder steps over them is the runner's choice (service.engine.runner), and the decoders
(service.engine.decoder, service.engine.graphed) read the sessions they run. The graphs they load beside the
folder's own come from a process of their own (service.engine.prepare), so that onnx is not imported here; only a
GPU's rewrite of the step (service.engine.cuda_step) imports it, where the step is loaded.
"""

from __future__ import annotations

import logging
from functools import cache, cached_property
from pathlib import Path

import onnxruntime as ort

from core.folder import NUMPY_TYPES, FolderConfig, GraphIO
from service.engine.config import ModelOptions, Spin
from service.engine.kernels import KernelsRefused, built_library
from service.engine.prepare import PreparedGraphs, prepared_graphs

log = logging.getLogger(__name__)

# What ONNX Runtime raises on a library or graph it refuses (pybind11 exceptions, each straight from Exception)
ORT_ERRORS = (ort.capi.onnxruntime_pybind11_state.Fail, ort.capi.onnxruntime_pybind11_state.InvalidGraph,
              ort.capi.onnxruntime_pybind11_state.InvalidArgument, ort.capi.onnxruntime_pybind11_state.NotImplemented)

# Where a graph given as bytes finds its external data (export.onnx_files: a large model's weights)
EXTERNAL_DATA_FOLDER = "session.model_external_initializers_file_folder_path"

OPTIMIZATION_LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}


NEXT_POWER_OF_TWO = 0  # OrtArenaCfg's arena_extend_strategy: each new arena region twice the size of the last


@cache
def shared_cpu_arena() -> None:
    """One arena for the CPU memory of every session in the process, registered with ONNX Runtime's environment
    once: each session's own arena kept what its largest run took. Its regions double (kNextPowerOfTwo): a region
    as large as each allocation asked (kSameAsRequested) fitted few of the later steps' larger shapes, so the arena
    added a region for nearly every new size, batch after batch (docs/decisions.md)."""
    memory = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
    ort.create_and_register_allocator(memory, ort.OrtArenaCfg({"arena_extend_strategy": NEXT_POWER_OF_TWO}))


def session_options(threads: int, optimization: str, spin: Spin = "never", on_gpu: bool = False) -> ort.SessionOptions:
    """Threads, graph optimizations, whether idle intra-op threads spin waiting for work, and the process's shared
    CPU arena (shared_cpu_arena). On the CPU without memory patterns: a pattern is planned for each set of input
    shapes, and a step's shapes change from step to step, so its one block a run was one more size for the arena.

    Spinning saves a wake-up per operator. Between two decoder steps it takes the CPU that the search, and beside
    an HTTP server on few cores the event loop, need: `step` stops it as a run returns. Every session has a pool
    of its own: ModelSessions lets the decoder's spin as asked, the others' within their runs alone.
    """
    shared_cpu_arena()
    opts = ort.SessionOptions()
    opts.add_session_config_entry("session.use_env_allocators", "1")
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = OPTIMIZATION_LEVELS[optimization]
    opts.enable_mem_pattern = on_gpu
    opts.log_severity_level = 3
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0" if spin == "never" else "1")
    # `step`: spinning stops when a run returns, and starts again with the next
    opts.add_session_config_entry("session.force_spinning_stop", "1" if spin == "step" else "0")
    return opts


# Graph fusions left out on the CPU: ONNX Runtime 1.31's CPU SkipLayerNormalization kernel is slower than the Add
# and LayerNormalization it replaces on (N, T, D) inputs (docs/decisions.md). GPU sessions keep the fusion.
CPU_UNFUSED = ["SkipLayerNormFusion"]


def wanted_providers(provider: str) -> list[str]:
    """What to ask ONNX Runtime for; what it really runs is read back from a session (running_provider)."""
    if provider == "cpu":
        return ["CPUExecutionProvider"]
    if provider == "cuda" or "CUDAExecutionProvider" in ort.get_available_providers():
        return ["CUDAExecutionProvider", "CPUExecutionProvider"]
    return ["CPUExecutionProvider"]


def running_provider(provider: str, probe_graph: bytes) -> str:
    """The provider ONNX Runtime really runs on when asked for `provider`. CUDA may be listed and still be unusable
    (no driver, no CUDA libraries); a session then falls back to the CPU. A session of a small graph finds out."""
    if provider == "auto":
        ort.set_default_logger_severity(4)  # a failed CUDA probe is expected here, not an error
    try:
        probe = ort.InferenceSession(probe_graph, providers=wanted_providers(provider))
    finally:
        ort.set_default_logger_severity(2)
    return probe.get_providers()[0]



class ModelSessions:
    """The sessions of one model folder in one precision, on the provider that really runs."""

    def __init__(self, model_dir: str | Path, options: ModelOptions | None = None):
        self.model_dir = Path(model_dir)
        self.options = options = options or ModelOptions()
        self.config = FolderConfig.load(self.model_dir)
        self.model_config = self.config.model
        precision, provider, threads, optimization = (options.precision, options.provider, options.threads,
                                                      options.optimization)
        if precision not in self.config.graphs:
            raise ValueError(f"{self.model_dir} has no {precision} graphs; it has {sorted(self.config.graphs)}")
        self.precision = precision
        graphs = self.config.graphs[precision]
        # with our kernels' step where they are asked for and built (a GPU session then runs the step as exported)
        self.prepared: PreparedGraphs = prepared_graphs(self.model_dir, graphs["decoder"], graphs["encoder"],
                                                        options.kernels and built_library() is not None)
        self.provider = running_provider(provider, self.prepared.select)
        if provider == "cuda" and self.provider != "CUDAExecutionProvider":
            log.warning("CUDA was asked for but is not usable here; ONNX Runtime runs on %s", self.provider)
        elif provider == "auto":
            log.info("provider auto: ONNX Runtime runs on %s", self.provider)
        self.on_gpu = self.provider == "CUDAExecutionProvider"
        self.device = "cuda" if self.on_gpu else "cpu"  # where the caches stay between steps
        # a GPU session copies a host array bound as an input to the device when it is bound (onnxruntime's
        # IOBinding::BindInput), not at each run: what the host writes in place later must be bound again
        self.copies_bound_inputs = self.on_gpu
        # The decoder's threads spin as spin_threads says (always for the offline translator, within a step in the
        # service beside its HTTP workers); the other sessions' within their runs alone, where the decoder's spin at
        # all. Each session has threads of its own; when all spun always, the encoder's and the cache graphs' took
        # the cores from the decoder's (docs/decisions.md).
        others_spin = "never" if options.spin_threads == "never" else "step"
        self.session_options = session_options(threads, optimization, others_spin, self.on_gpu)
        self.step_options = session_options(threads, optimization, options.spin_threads, self.on_gpu)
        # a step rewritten and loaded as bytes finds a large model's weights, its external data, in the folder
        self.step_options.add_session_config_entry(EXTERNAL_DATA_FOLDER, str(self.model_dir))
        # a graph with operators of ours beside the step: the move graph, the encoder with fp16-weight projections
        self.kernel_options = session_options(threads, optimization, others_spin, self.on_gpu)
        self.kernel_options.add_session_config_entry(EXTERNAL_DATA_FOLDER, str(self.model_dir))
        self.kernels = False  # whether the step runs our kernels (service.engine.kernels) or as exported
        self.step_graph: str | bytes = graphs["decoder"]  # the step the sessions load: on a GPU, rewritten
        self.decoder = self._decoder(graphs["decoder"], options.kernels)
        self.encoder = self._encoder(graphs["encoder"])
        self.cross_names = names(self.encoder, GraphIO.CROSS, outputs=True)
        self.self_names = names(self.decoder, GraphIO.SELF)
        # the caches' type: fp32, or fp16 in an fp16 export (an older one's fp16 graphs read and wrote fp32 caches)
        self.cache_type = NUMPY_TYPES[next(x.type for x in self.decoder.get_inputs() if x.name == self.self_names[0])]
        self.select = self._session(self.prepared.select)
        self.new_self_names = names(self.decoder, GraphIO.NEW_SELF, outputs=True)
        # rows of the caches moved in place (our kernel, where the step runs ours), else None: the select graph
        self.move = self._session(self.prepared.move, self.kernel_options) if self.kernels else None
        # None unless needed: with any RunOptions, onnxruntime 1.31's Python run_with_iobinding looks up a
        # gpu_graph_id entry, and the lookup of an absent entry raises and catches an error on every run
        self.run_options: ort.RunOptions | None = None

    def _session(self, graph: str | bytes, options: ort.SessionOptions | None = None,
                 cuda_options: dict[str, str] | None = None) -> ort.InferenceSession:
        """A session, on the provider found running, of a graph file of the folder or of a graph built in memory
        (with self.session_options unless told)."""
        source = graph if isinstance(graph, bytes) else str(self.model_dir / graph)
        providers = ([(self.provider, cuda_options or {}), "CPUExecutionProvider"] if self.on_gpu
                     else ["CPUExecutionProvider"])
        return ort.InferenceSession(source, options or self.session_options, providers=providers,
                                    disabled_optimizers=None if self.on_gpu else CPU_UNFUSED)

    def _decoder(self, graph: str, kernels: bool) -> ort.InferenceSession:
        """The decoder step's session: on the CPU, with our kernels where asked and possible (the reason logged where
        not), else the step as exported; on a GPU, its residual sums fused (service.engine.cuda_step)."""
        if self.on_gpu:
            return self._gpu_decoder(graph)
        if kernels:
            library, step = built_library(), self.prepared.step
            try:
                if library is None:
                    raise KernelsRefused("not built (`make serve` builds them: python -m service.engine.kernels.build)")
                if step is None:
                    raise KernelsRefused(self.prepared.refused)  # a graph not ours: why
                self.step_options.register_custom_ops_library(str(library))
                session = self._session(step, self.step_options)
                self.kernel_options.register_custom_ops_library(str(library))
                self.kernels = True
                return session
            except (KernelsRefused, *ORT_ERRORS) as why:  # a library ONNX Runtime refuses too
                log.warning("our kernels not used for %s: %s", self.model_dir / graph, why)
            finally:
                self.prepared.step = None  # its bytes are the session's now
        return self._session(graph, self.step_options)

    def _encoder(self, graph: str) -> ort.InferenceSession:
        """The encoder's session: where the step runs our kernels, with its fp16-weight projections ours too
        (prepared where this CPU runs them), else as exported."""
        encoder, self.prepared.encoder = self.prepared.encoder, None  # its bytes are the session's
        if self.kernels and encoder is not None:
            return self._session(encoder, self.kernel_options)
        return self._session(graph)

    def _gpu_decoder(self, graph: str) -> ort.InferenceSession:
        """The step with its residual sums fused, run once on one row; the step as exported where ONNX Runtime
        refuses it (the reason logged)."""
        import onnx  # the GPU alone rewrites the step here (the CPU's rewrite: service.engine.prepare)

        from service.engine.cuda_step import probe_feeds, with_skip_layer_norms

        try:
            step = onnx.load(str(self.model_dir / graph), load_external_data=False)  # its weights where they are
            fused_graph = with_skip_layer_norms(step).SerializeToString()
            session = self._session(fused_graph, self.step_options)
            session.run(None, probe_feeds(session))
        except (*ORT_ERRORS, onnx.shape_inference.InferenceError) as why:
            log.warning("the decoder step runs as exported on the GPU, its residual sums unfused: %s", why)
            return self._session(graph, self.step_options)
        self.step_graph = fused_graph
        return session

    @property
    def name(self) -> str:
        return self.config.name

    @cached_property
    def join(self) -> ort.InferenceSession:
        """The cache graph that appends rows, where the caches are on a GPU or in buckets (on the CPU the eager
        decoders join with NumPy, a tensor at a time: service.engine.decoder)."""
        return self._session(self.prepared.join)

    @cached_property
    def fit(self) -> ort.InferenceSession:
        """The cache graph that fits rows into a bucket (service.engine.graphed alone uses it)."""
        return self._session(self.prepared.fit)

    def graphed_decoder(self) -> ort.InferenceSession:
        """A decoder session whose steps ONNX Runtime's CUDA provider captures, one graph per gpu_graph_id."""
        return self._session(self.step_graph, self.step_options, {"enable_cuda_graph": "1"})

    def graphed_encoder(self) -> ort.InferenceSession:
        """An encoder session whose runs ONNX Runtime's CUDA provider captures, one graph per gpu_graph_id."""
        return self._session(self.config.graphs[self.precision]["encoder"], cuda_options={"enable_cuda_graph": "1"})

    def shrinking_arenas(self) -> None:
        """From now on, every run frees the unused regions of ONNX Runtime's arenas (until stop_shrinking)."""
        self.run_options = ort.RunOptions()
        self.run_options.add_run_config_entry("memory.enable_memory_arena_shrinkage",
                                              "gpu:0" if self.on_gpu else "cpu:0")

    def stop_shrinking(self) -> None:
        self.run_options = None


def bind_caches(model: ModelSessions, binding: ort.IOBinding, self_kv: list[ort.OrtValue],
                cross_kv: list[ort.OrtValue]) -> None:
    """Bind a decoder step's caches: each cache output to the buffer of its input, so that the step writes its slot
    in place, with no copy of the cache and no new memory."""
    for name, value in zip([*model.self_names, *model.cross_names], [*self_kv, *cross_kv]):
        binding.bind_ortvalue_input(name, value)
    for name, value in zip(model.new_self_names, self_kv):
        binding.bind_ortvalue_output(name, value)


def names(session: ort.InferenceSession, prefix: str, outputs: bool = False) -> list[str]:
    """The names of a graph's cache tensors (prefix_k_0, prefix_v_0, ...), in graph order."""
    found = session.get_outputs() if outputs else session.get_inputs()
    return [x.name for x in found if x.name.startswith(f"{prefix}_")]

