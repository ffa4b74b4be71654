"""The engines a benchmark compares, loaded by name, each translating through the same search (core.search):

    ort-fp32, ort-int8          service.translator.Translator as it comes: the search and sessions the service runs,
                                the decoder's idle threads spinning between operators (as CTranslate2's OpenMP
                                threads do by default)
    ort-fp32-nospin, ort-int8-nospin
                                the same with the decoder's threads sleeping instead (TRANSLATOR_SPIN_THREADS `never`;
                                not in bench.offline.engines' defaults)
    ort-fp32-step, ort-int8-step
                                the same with the threads spinning within a run only, as the service's engine has
                                them by default (TRANSLATOR_SPIN_THREADS `step`)
    pytorch-cache               model.decode.translate with the KV-cached decoder the model is evaluated with
    pytorch-nocache             the same re-running the decoder over the whole prefix at every step
    ct2-float32, ct2-int8       CTranslate2 (bench.common.ct2_engine) on the conversion of the same checkpoint, or
                                CTranslate2's own conversion of the Hugging Face folder it was converted from, or
                                the model/ folder of the Argos Translate package it was converted from

A model folder of several pairs (NLLB-200, M2M100) translates one pair, `pair` (source, target): every engine is
given the same source ids (the language's token first, </s> last) and the target's token as its first.

Imports of torch, ONNX Runtime and CTranslate2 happen only where an engine is loaded, in the process that runs it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from bench.common.defaults import RESULTS

if TYPE_CHECKING:
    from bench.common.ct2_engine import CT2Translator
    from core.search import SearchOptions
    from service.translator import Translator

Translate = Callable[[list[str], "SearchOptions", int], list[str]]  # (texts, opts, batch size) -> best translations
COMPUTE_TYPES = {"fp32": "float32", "int8": "int8"}  # our precision -> CTranslate2's compute type


def load_engine(
    name: str, model_dir: Path, threads: int, ct2_dir: Path | None = None, pair: tuple[str, str] | None = None
) -> Translate:
    """One engine by name (see the module's docstring), on the CPU with this many threads."""
    kind, variant = name.split("-", 1)
    if kind == "ort":
        from service.translator import Translator

        precision, _, suffix = variant.partition("-")
        spins = {"": "always", "nospin": "never", "step": "step"}
        if suffix not in spins:
            raise ValueError(f"unknown engine {name}")
        spin = spins[suffix]
        translator = Translator(model_dir, precision, provider="cpu", threads=threads, spin_threads=spin)
        return ort_engine(translator, pair)
    if kind == "ct2":
        from bench.common.ct2_engine import SPM_FILE, CT2Translator

        ct2 = CT2Translator(ct2_dir, compute_type=variant, threads=threads)
        if pair or not (ct2.model_dir / SPM_FILE).exists():  # not bench.common.ct2_convert's, or one pair of several
            return ct2_folder_engine(ct2, model_dir, pair)
        return ct2.translate
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


def ort_engine(translator: Translator, pair: tuple[str, str] | None = None) -> Translate:
    """A Translator as an engine: the best translation of each text (of `pair`'s source into its target)."""
    source, target = pair or (None, None)
    return lambda texts, opts, batch: [
        h[0].text for h in translator.translate(texts, opts, batch_size=batch, source=source, target=target)
    ]


def ct2_folder_engine(ct2: CT2Translator, model_dir: Path, pair: tuple[str, str] | None = None) -> Translate:
    """CTranslate2 given the source ids that our model folder's tokenizer makes of the texts (the pieces of an Argos
    Translate package, ...), its output decoded by that tokenizer; for `pair`, one pair of a model folder of several,
    decoding forced to begin with the target's token."""
    from core.folder import FolderConfig
    from core.tokenizer import load_tokenizer
    from core.translate import pair_options, source_ids

    folder = FolderConfig.load(model_dir)
    tokenizer, (source, target) = load_tokenizer(model_dir, folder.tokenizer), pair or (None, None)

    def translate(texts: list[str], opts: SearchOptions, batch: int) -> list[str]:
        sources = source_ids(tokenizer, folder.model, texts, source, target)
        return tokenizer.decode(ct2.translate_ids(sources, pair_options(folder.model, opts, target), batch))

    return translate


def ensure_ct2_model(model_dir: Path, ct2_dir: Path | None = None, hf_dir: Path | None = None) -> Path:
    """The CTranslate2 model in ct2_dir (default: bench/results/tmp/ct2-NAME): the conversion of MODEL_DIR/model.pt
    (bench.common.ct2_convert), or with hf_dir CTranslate2's own conversion of that Hugging Face folder (its
    TransformersConverter, float32 weights: int8 is CTranslate2's compute type at load, as for the other); converted
    now unless it is there and newer than what it comes from."""
    ct2_dir = ct2_dir or RESULTS / "tmp" / f"ct2-{model_dir.resolve().name}"
    origin, converted = hf_dir / "config.json" if hf_dir else model_dir / "model.pt", ct2_dir / "model.bin"
    if converted.exists() and converted.stat().st_mtime > origin.stat().st_mtime:
        return ct2_dir
    if hf_dir:
        from ctranslate2.converters import TransformersConverter

        TransformersConverter(str(hf_dir), low_cpu_mem_usage=True).convert(str(ct2_dir), force=True)
    else:
        from bench.common.ct2_convert import convert  # imports torch: only here, in the driver

        convert(model_dir / "model.pt", model_dir / "spm.model", ct2_dir)
    return ct2_dir
