"""Translating with the PyTorch model: step decoders for service.search, with and without a cache."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from model.transformer import KVCache, Transformer, best_next_tokens
from service.search import Hypothesis, SearchOptions, search
from service.tokenizer import Tokenizer


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
    """Translate one batch of source ids (each ending with </s>)."""
    cfg = model.cfg
    decoder = CachedDecoder if cached else UncachedDecoder
    opts = dataclasses.replace(opts, max_length=min(opts.max_length, cfg.max_len))
    return search(lambda s, m, r: decoder(model, s, m, r), sources, opts, cfg.pad_id, cfg.bos_id, cfg.eos_id)


def translate(
    model: Transformer,
    tokenizer: Tokenizer,
    texts: list[str],
    opts: SearchOptions,
    batch_size: int = 64,
    cached: bool = True,
) -> list[str]:
    """Translate texts in batches of similar length; returns the best translation of each."""
    model.eval()
    sources = [ids[: model.cfg.max_len - 1] + [model.cfg.eos_id] for ids in tokenizer.encode(texts)]
    order = sorted(range(len(texts)), key=lambda i: len(sources[i]))
    results: list[str] = [""] * len(texts)
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        hyps = translate_ids(model, [sources[i] for i in chunk], opts, cached)
        for i, text in zip(chunk, tokenizer.decode([h[0].tokens for h in hyps])):
            results[i] = text
    return results
