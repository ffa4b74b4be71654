"""Translating with the PyTorch model: step decoders for service.search, with and without a cache."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from model.transformer import Transformer
from service.search import Hypothesis, SearchOptions, search
from service.tokenizer import Tokenizer


class CachedDecoder:
    """One token per step; self-attention keys/values are cached, encoder keys/values computed once."""

    def __init__(self, model: Transformer, src: np.ndarray, src_mask: np.ndarray, repeat: int):
        self.model = model
        device = next(model.parameters()).device
        src_t = torch.as_tensor(src, device=device)
        mask_t = torch.as_tensor(src_mask, device=device)
        cross_kv = model.cross_keys_values(model.encode(src_t, mask_t))
        self.cross_kv = cross_kv.repeat_interleave(repeat, dim=2)
        self.src_mask = mask_t.repeat_interleave(repeat, dim=0)
        self.self_kv = model.empty_cache(len(self.src_mask), self.cross_kv)

    def step(self, tokens: np.ndarray) -> np.ndarray:
        tokens_t = torch.as_tensor(tokens, device=self.src_mask.device)[:, None]
        logits, self.self_kv = self.model.decode(tokens_t, self.cross_kv, self.src_mask, self.self_kv)
        return logits[:, -1].float().cpu().numpy()

    def select(self, rows: np.ndarray, cross_rows: np.ndarray | None) -> None:
        self.self_kv = self.self_kv[:, :, torch.as_tensor(rows, device=self.src_mask.device)]
        if cross_rows is not None:
            index = torch.as_tensor(cross_rows, device=self.src_mask.device)
            self.cross_kv, self.src_mask = self.cross_kv[:, :, index], self.src_mask[index]


class UncachedDecoder(CachedDecoder):
    """The naive baseline: every step re-runs the decoder over the whole prefix."""

    def __init__(self, model: Transformer, src: np.ndarray, src_mask: np.ndarray, repeat: int):
        super().__init__(model, src, src_mask, repeat)
        self.prefix = torch.zeros(len(self.src_mask), 0, dtype=torch.long, device=self.src_mask.device)

    def step(self, tokens: np.ndarray) -> np.ndarray:
        tokens_t = torch.as_tensor(tokens, device=self.src_mask.device)[:, None]
        self.prefix = torch.cat([self.prefix, tokens_t], dim=1)
        empty = self.model.empty_cache(len(self.prefix), self.cross_kv)
        logits, _ = self.model.decode(self.prefix, self.cross_kv, self.src_mask, empty)
        return logits[:, -1].float().cpu().numpy()

    def select(self, rows: np.ndarray, cross_rows: np.ndarray | None) -> None:
        self.prefix = self.prefix[torch.as_tensor(rows, device=self.prefix.device)]
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
