"""The engines a benchmark compares, loaded by name, each translating through the same search (core.search):

    ort-fp32, ort-int8          service.translator.Translator: what the service runs
    ort-fp32-spin, ort-int8-spin
                                the same with ONNX Runtime's idle threads spinning between operators, as
                                CTranslate2's OpenMP threads do by default (the service leaves it off: spin_threads;
                                not in bench.offline.engines' default engines)
    pytorch-cache               model.decode.translate with the KV-cached decoder the model is evaluated with
    pytorch-nocache             the same re-running the decoder over the whole prefix at every step
    ct2-float32, ct2-int8       CTranslate2 (bench.common.ct2_engine) on the conversion of the same checkpoint

Imports of torch, ONNX Runtime and CTranslate2 happen only where an engine is loaded, in the process that runs it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from bench.common.defaults import RESULTS

if TYPE_CHECKING:
    from core.search import SearchOptions
    from service.translator import Translator

Translate = Callable[[list[str], "SearchOptions", int], list[str]]  # (texts, opts, batch size) -> best translations
COMPUTE_TYPES = {"fp32": "float32", "int8": "int8"}  # our precision -> CTranslate2's compute type


def load_engine(name: str, model_dir: Path, threads: int, ct2_dir: Path | None = None) -> Translate:
    """One engine by name (see the module's docstring), on the CPU with this many threads."""
    kind, variant = name.split("-", 1)
    if kind == "ort":
        from service.translator import Translator

        precision, _, suffix = variant.partition("-")
        if suffix not in ("", "spin"):
            raise ValueError(f"unknown engine {name}")
        translator = Translator(model_dir, precision, provider="cpu", threads=threads, spin_threads=suffix == "spin")
        return ort_engine(translator)
    if kind == "ct2":
        from bench.common.ct2_engine import CT2Translator

        return CT2Translator(ct2_dir, compute_type=variant, threads=threads).translate
    if kind == "pytorch" and variant in ("cache", "nocache"):
        import torch

        from core.tokenizer import Tokenizer
        from model.checkpoint import load_model
        from model.decode import translate

        torch.set_num_threads(threads)
        model = load_model(model_dir / "model.pt")
        tokenizer = Tokenizer(model_dir / "spm.model", model.cfg.case_tags)
        cached = variant == "cache"
        return lambda texts, opts, batch: translate(model, tokenizer, texts, opts, batch_size=batch, cached=cached)
    raise ValueError(f"unknown engine {name}")


def ort_engine(translator: Translator) -> Translate:
    """A Translator as an engine: the best translation of each text."""
    return lambda texts, opts, batch: [h[0].text for h in translator.translate(texts, opts, batch_size=batch)]


def ensure_ct2_model(model_dir: Path, ct2_dir: Path | None = None) -> Path:
    """The CTranslate2 conversion of MODEL_DIR/model.pt in ct2_dir (default: bench/results/tmp/ct2-NAME), converted
    now unless it is there and newer than the checkpoint."""
    ct2_dir = ct2_dir or RESULTS / "tmp" / f"ct2-{model_dir.resolve().name}"
    checkpoint, converted = model_dir / "model.pt", ct2_dir / "model.bin"
    if not converted.exists() or converted.stat().st_mtime < checkpoint.stat().st_mtime:
        from bench.common.ct2_convert import convert  # imports torch: only here, in the driver

        convert(checkpoint, model_dir / "spm.model", ct2_dir)
    return ct2_dir
