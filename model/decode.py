"""Translating with the PyTorch model: step decoders for core.search, with and without a cache."""

from __future__ import annotations

import numpy as np
import torch

from core.search import Hypothesis, SearchOptions, search
from core.tokenizer import AnyTokenizer
from core.translate import translate_texts
from model.transformer import KVCache, Transformer, best_next_tokens


class CachedDecoder:
    """One token per step; self-attention keys/values are cached, encoder keys/values computed once."""

    def __init__(self, model: Transformer, src: np.ndarray, src_mask: np.ndarray, repeat: int):
        self.model = model
        device = next(model.parameters()).device
        src_t = torch.as_tensor(src, device=device)
        mask_t = torch.as_tensor(src_mask, device=device)
        memory = model.encode(src_t, mask_t)
        rows = torch.arange(len(src), device=device).repeat_interleave(repeat)  # each sentence `repeat` times
        self.cross_kv, self.src_mask = _select(model.cross_keys_values(memory), rows), mask_t[rows]
        self.self_kv = model.empty_cache(len(rows), memory)

    def step(self, tokens: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
        tokens_t = self._tensor(tokens)[:, None]
        logits, self.self_kv = self.model.decode(tokens_t, self.cross_kv, self.src_mask, self.self_kv)
        return self._best(logits, width)

    def _tensor(self, x: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(x, device=self.src_mask.device)

    @staticmethod
    def _best(logits: torch.Tensor, width: int) -> tuple[np.ndarray, np.ndarray]:
        """The best next tokens after the last position, and their log-probabilities, as NumPy arrays."""
        logp, tokens = best_next_tokens(logits[:, -1].float(), width)
        return tokens.cpu().numpy(), logp.cpu().numpy()

    def select(self, rows: np.ndarray, cross_rows: np.ndarray | None) -> None:
        self.self_kv = _select(self.self_kv, self._tensor(rows))
        if cross_rows is not None:
            index = self._tensor(cross_rows)
            self.cross_kv, self.src_mask = _select(self.cross_kv, index), self.src_mask[index]


def _select(cache: KVCache, rows: torch.Tensor) -> KVCache:
    return [(k[rows], v[rows]) for k, v in cache]


class UncachedDecoder(CachedDecoder):
    """The naive baseline: every step re-runs the decoder over the whole prefix."""

    def __init__(self, model: Transformer, src: np.ndarray, src_mask: np.ndarray, repeat: int):
        super().__init__(model, src, src_mask, repeat)
        self.prefix = torch.zeros(len(self.src_mask), 0, dtype=torch.long, device=self.src_mask.device)

    def step(self, tokens: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
        self.prefix = torch.cat([self.prefix, self._tensor(tokens)[:, None]], dim=1)
        empty = self.model.empty_cache(len(self.prefix), self.cross_kv[0][0])
        logits, _ = self.model.decode(self.prefix, self.cross_kv, self.src_mask, empty)
        return self._best(logits, width)

    def select(self, rows: np.ndarray, cross_rows: np.ndarray | None) -> None:
        self.prefix = self.prefix[self._tensor(rows)]
        super().select(rows, cross_rows)


@torch.inference_mode()
def translate_ids(
    model: Transformer, sources: list[list[int]], opts: SearchOptions, cached: bool = True
) -> list[list[Hypothesis]]:
    """Translate one batch of source ids (ModelConfig.source_ids)."""
    decoder = CachedDecoder if cached else UncachedDecoder
    return search(lambda s, m, r: decoder(model, s, m, r), sources, opts, model.cfg)


def translate(
    model: Transformer,
    tokenizer: AnyTokenizer,
    texts: list[str],
    opts: SearchOptions,
    batch_size: int = 64,
    cached: bool = True,
) -> list[str]:
    """The best translation of each text (core.translate's loop over the PyTorch model)."""
    model.eval()
    translate_batch = lambda sources, o: translate_ids(model, sources, o, cached)  # noqa: E731
    return [t[0].text for t in translate_texts(translate_batch, tokenizer, model.cfg, texts, opts, batch_size)]
