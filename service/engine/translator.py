"""The offline translator: a model folder's sessions and its tokenizer, texts in and translations out.

    translator = Translator("models/en-de")
    translator.translate(["Hello, how are you?"])[0][0].text

The one call to translate a batch from Python (the README's); the server runs the same sessions and decoder in its
engine process (service.engine.engine), with the tokenizers in the HTTP workers.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Any

from core.search import SearchOptions
from core.tokenizer import AnyTokenizer, load_tokenizer
from core.translate import Translation, source_ids, translate_texts
from service.engine.config import ModelOptions
from service.engine.runner import ModelRunner


class Translator(ModelRunner):
    """A model folder's runner with its tokenizer. The keywords are ModelOptions' fields: `provider="cpu"`,
    `threads=1`, `kernels=False`, ..."""

    def __init__(self, model_dir: str | Path, precision: str = "fp32", **options: Any):
        super().__init__(model_dir, ModelOptions(precision=precision, **options))

    @cached_property
    def tokenizer(self) -> AnyTokenizer:
        return load_tokenizer(self.model_dir, self.config.tokenizer, self.model_config.case_tags)

    def encode_texts(
        self, texts: list[str], *, source: str | None = None, target: str | None = None
    ) -> list[list[int]]:
        """Source ids of each text, as the encoder reads them (ModelConfig.source_ids)."""
        return source_ids(self.tokenizer, self.model_config, texts, source, target)

    def translate(
        self,
        texts: list[str],
        opts: SearchOptions | None = None,
        batch_size: int = 64,
        *,
        source: str | None = None,
        target: str | None = None,
    ) -> list[list[Translation]]:
        """Translate texts (batched by length): the n_best translations of each, best first. `source` and `target`:
        one of the model's pairs (ModelConfig.pairs), where it has several; `target` alone for a multi-target model."""
        opts = opts or SearchOptions()
        translate_ids = lambda sources, o: self.translate_ids(sources, o).hypotheses  # noqa: E731
        return translate_texts(translate_ids, self.tokenizer, self.model_config, texts, opts, batch_size, source,
                               target)
