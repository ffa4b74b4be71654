"""Translating with a CTranslate2 model directory, under our search options: one that bench.common.ct2_convert wrote
from our checkpoint, or CTranslate2's own conversion of a Hugging Face folder (bench.common.engines.ensure_ct2_model),
whose token i is our id i (model.convert keeps transformers' ids).

Imports neither torch nor our model code, so that a benchmark process measures CTranslate2 alone.
"""

from __future__ import annotations

import json
from functools import cached_property
from pathlib import Path

import ctranslate2

from core.search import SearchOptions
from core.tokenizer import Tokenizer

SPM_FILE = "spm.model"  # the SentencePiece model's name inside a directory written by bench.common.ct2_convert
CASE_TAG_TOKENS = ["<case:upper>", "<case:title>"]  # CTranslate2's names of the case tags' ids (core.tokenizer)


class CT2Translator:
    """A ctranslate2.Translator on the CPU that takes and returns our token ids or text.

    compute_type "float32" or "int8" (weights quantized when the model is loaded); `threads` is
    CTranslate2's intra_threads, with one translation at a time (inter_threads=1).
    """

    def __init__(self, model_dir: Path, compute_type: str = "float32", threads: int = 1):
        self.model_dir = Path(model_dir)
        self.translator = ctranslate2.Translator(
            str(model_dir), device="cpu", compute_type=compute_type, inter_threads=1, intra_threads=threads
        )
        # the tokens CTranslate2 was given, in our ids' order: the pieces, and the case tags of a model with them
        self.tokens: list[str] = json.loads((self.model_dir / "shared_vocabulary.json").read_text(encoding="utf-8"))
        self.ids = {token: i for i, token in enumerate(self.tokens)}
        # whether CTranslate2 appends </s> to a source (ct2_convert's models) or the source ends with it
        self.adds_eos: bool = json.loads((self.model_dir / "config.json").read_text()).get("add_source_eos", False)

    @cached_property
    def tokenizer(self) -> Tokenizer:
        """The SentencePiece model that bench.common.ct2_convert copied in (with the case tags of a model with them)."""
        return Tokenizer(self.model_dir / SPM_FILE, self.tokens[-len(CASE_TAG_TOKENS) :] == CASE_TAG_TOKENS)

    def translate_ids(self, sources: list[list[int]], opts: SearchOptions, batch_size: int = 0) -> list[list[int]]:
        """The best translation of each source as ids: sources without </s> where CTranslate2 appends it, as the
        encoder reads them otherwise; a forced first token (SearchOptions.forced_token) is CTranslate2's target
        prefix.

        Decoded up to the longest limit of the sentences, in batches of at most batch_size that CTranslate2 makes of
        sentences of similar length (0: all in one batch); each translation is then cut to its own limit, which for
        greedy search is what decoding with that limit gives.
        """
        if not sources:
            return []
        limits = [opts.longest(len(ids) + self.adds_eos) for ids in sources]  # our limit of each: </s> counts
        prefix = None if opts.forced_token is None else [[self.tokens[opts.forced_token]]] * len(sources)
        results = self.translator.translate_batch(
            [[self.tokens[i] for i in ids] for ids in sources],
            target_prefix=prefix,
            max_batch_size=batch_size,
            beam_size=opts.beam_size,
            length_penalty=opts.length_penalty,
            max_decoding_length=max(limits),
            min_decoding_length=0,  # ours may end at the first step
        )
        return [
            [self.ids[token] for token in result.hypotheses[0][:limit]] for result, limit in zip(results, limits)
        ]

    def translate(self, texts: list[str], opts: SearchOptions, batch_size: int = 0) -> list[str]:
        """The best translation of each text, in batches as translate_ids makes them."""
        return self.tokenizer.decode(self.translate_ids(self.tokenizer.encode(texts), opts, batch_size))
