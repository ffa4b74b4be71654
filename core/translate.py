"""The one translate loop: texts in, translations out, over any batch translator (ONNX Runtime or PyTorch).

    translate_texts(translate_ids, tokenizer, cfg, ["Hello."], SearchOptions(beam_size=4))

`translate_ids` translates one batch of source ids (core.search.search over a StepDecoder); this loop turns
texts into source ids, groups them by length into batches, and turns the hypotheses back into text.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from core.folder import ModelConfig
from core.search import Hypothesis, SearchOptions
from core.tokenizer import AnyTokenizer

TranslateIds = Callable[[list[list[int]], SearchOptions], list[list[Hypothesis]]]


@dataclass
class Translation:
    text: str
    score: float


def source_ids(
    tokenizer: AnyTokenizer, cfg: ModelConfig, texts: list[str], source: str | None = None, target: str | None = None
) -> list[list[int]]:
    """Texts as the encoder reads them: tokenized, then ModelConfig.source_ids (</s>, and a language's token)."""
    return cfg.source_ids(tokenizer.encode(texts), source, target)


def pair_options(cfg: ModelConfig, opts: SearchOptions, target: str | None) -> SearchOptions:
    """opts for translating into `target`: decoding forced to begin with its language's token where the model has
    such tokens, or with its target prefix (ModelConfig.forced_token)."""
    forced = cfg.forced_token(target)
    return opts if forced == opts.forced_token else dataclasses.replace(opts, forced_token=forced)


def translate_texts(
    translate_ids: TranslateIds,
    tokenizer: AnyTokenizer,
    cfg: ModelConfig,
    texts: list[str],
    opts: SearchOptions,
    batch_size: int = 64,
    source: str | None = None,
    target: str | None = None,
) -> list[list[Translation]]:
    """The n_best translations of each text from `source` into `target` (ModelConfig.source_ids), best first;
    sentences of similar length share a batch."""
    sources = source_ids(tokenizer, cfg, texts, source, target)
    opts = pair_options(cfg, opts, target)
    order = sorted(range(len(texts)), key=lambda i: len(sources[i]))
    results: list[list[Translation]] = [[] for _ in texts]
    for begin in range(0, len(order), batch_size):
        chunk = order[begin : begin + batch_size]
        for i, hyps in zip(chunk, translate_ids([sources[i] for i in chunk], opts)):
            texts_out = tokenizer.decode([h.tokens for h in hyps])
            results[i] = [Translation(text, h.score) for text, h in zip(texts_out, hyps)]
    return results
