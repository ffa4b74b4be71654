"""A model folder's runner: its sessions, the decoder that steps a running batch over them, and a batch translated.

    runner = ModelRunner("models/en-de", ModelOptions(precision="int8"))
    runner.translate_ids([[12, 7, 3]], SearchOptions(beam_size=4)).hypotheses

The runner picks the decoder, one per cache layout: on the CPU the step with our kernels and its slot table, or the
step as exported (service.engine.decoder); on the GPU the captured buckets, where capture works, beside the eager
decoder for the batches they do not take (service.engine.graphed). No tokenizer: the engine process runs ids only
(the HTTP workers tokenize); the offline Translator (service.engine.translator) adds it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from core.folder import FolderConfig, ModelConfig
from core.search import Hypothesis, SearchOptions, search
from service.engine.config import ModelOptions
from service.engine.decoder import EagerDecoder, eager_decoder
from service.engine.graphed import BucketStore, SwitchingDecoder, captured_store
from service.engine.sessions import ModelSessions
from service.memory import trim_malloc


@dataclass
class BatchResult:
    hypotheses: list[list[Hypothesis]]
    encode_seconds: float = 0.0
    decode_seconds: float = 0.0
    steps: int = 0  # decoder steps run


class ModelRunner:
    """One model folder's sessions and the decoders over them; a batch of source ids translated in one call."""

    def __init__(self, model_dir: str | Path, options: ModelOptions | None = None):
        options = options or ModelOptions()
        self.sessions = ModelSessions(model_dir, options)
        # TRANSLATOR_CUDA_GRAPHS: the buckets whose steps are captured, None for the eager decoder (the setting off,
        # or capture not possible here: the reason is logged)
        self.buckets: BucketStore | None = (captured_store(self.sessions, options.cuda_graphs_memory_mb * 2**20)
                                            if options.cuda_graphs else None)
        trim_malloc()  # what loading parsed and copied (graph protos, their bytes) is free, but on glibc's heap

    @property
    def model_dir(self) -> Path:
        return self.sessions.model_dir

    @property
    def config(self) -> FolderConfig:
        return self.sessions.config

    @property
    def model_config(self) -> ModelConfig:
        return self.sessions.model_config

    @property
    def name(self) -> str:
        return self.sessions.config.name

    @property
    def provider(self) -> str:
        """The ONNX Runtime provider that really runs (CUDA may be asked for and not be usable)."""
        return self.sessions.provider

    def new_decoder(self) -> EagerDecoder | SwitchingDecoder:
        """An empty decoder for a running batch (core.search.RunningBatch)."""
        if self.buckets is None:
            return eager_decoder(self.sessions)
        return SwitchingDecoder(self.sessions, self.buckets, self.sessions.options.cuda_graphs_max_rows)

    def translate_ids(self, sources: list[list[int]], opts: SearchOptions) -> BatchResult:
        """Translate source ids in one running batch; returns hypotheses and where the time went."""
        started, decoder = time.perf_counter(), self.new_decoder()
        hyps = search(decoder, sources, opts, self.model_config)
        total = time.perf_counter() - started
        return BatchResult(hyps, decoder.encode_seconds, total - decoder.encode_seconds, decoder.steps)

    def release_memory(self) -> None:
        """Give the memory of past batches back to the system: ONNX Runtime's arenas keep what the largest batch
        took for reuse. One beam-2 sentence runs every graph with arena shrinkage on, which frees the arenas' unused
        regions, and glibc returns its free pages. The batcher calls it when the queue runs empty, never between two
        batches of a busy server."""
        self.sessions.shrinking_arenas()
        try:
            self.translate_ids([[self.model_config.eos_id]], SearchOptions(beam_size=2, max_length=2))
        finally:
            self.sessions.stop_shrinking()
        trim_malloc()
