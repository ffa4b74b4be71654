"""Translating with the PyTorch model: decoders for core.search, with and without a cache."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from core.search import Hypothesis, SearchOptions, StepPlan, search
from core.slots import cache_slots
from core.tokenizer import AnyTokenizer
from core.translate import translate_texts
from model.transformer import KVCache, Transformer, best_next_tokens


class CachedDecoder:
    """A decoder (core.search.Decoder) over the PyTorch model: one token per row per step; self-attention keys and
    values in a cache of cache_slots() slots, encoder keys and values computed once per sentence."""

    def __init__(self, model: Transformer):
        self.model = model
        self.device = next(model.parameters()).device
        self.cross_kv: KVCache = []
        self.self_kv: KVCache = []
        self.src_mask = torch.zeros(0, 0, dtype=torch.bool, device=self.device)
        self.positions = torch.zeros(0, dtype=torch.long, device=self.device)  # each row's next position

    def add(self, src: np.ndarray, src_mask: np.ndarray) -> None:
        src_mask_t = self._tensor(src_mask)
        memory = self.model.encode(self._tensor(src), src_mask_t)
        cross_kv = self.model.cross_keys_values(memory)
        if not len(self.positions):
            self.cross_kv, self.src_mask = cross_kv, src_mask_t
            self.self_kv = self.model.empty_cache(len(src), cache_slots(1, self.model.cfg.max_len), memory)
        else:  # the new rows after the running ones, the encoder outputs padded to the longer source
            length = max(self.src_mask.size(1), src_mask_t.size(1))
            self.cross_kv = [(_cat(k0, k1, length), _cat(v0, v1, length)) for (k0, v0), (k1, v1) in
                             zip(self.cross_kv, cross_kv)]
            self.src_mask = _cat(self.src_mask, src_mask_t, length)
            slots = self.self_kv[0][0].size(2)
            new = self.model.empty_cache(len(src), slots, memory)
            self.self_kv = [(torch.cat([k0, k1]), torch.cat([v0, v1])) for (k0, v0), (k1, v1) in zip(self.self_kv, new)]
        self.positions = torch.cat([self.positions, torch.zeros(len(src), dtype=torch.long, device=self.device)])

    def step(self, tokens: np.ndarray, width: int, log_probs: bool = True) -> tuple[np.ndarray, np.ndarray]:
        slots = cache_slots(int(self.positions.max()) + 1, self.model.cfg.max_len)
        if slots > self.self_kv[0][0].size(2):
            self.self_kv = [(_pad_slots(k, slots), _pad_slots(v, slots)) for k, v in self.self_kv]
        logits, self.self_kv = self.model.decode_step(self._tensor(tokens), self.positions, self.cross_kv,
                                                      self.src_mask, self.self_kv)
        self.positions = self.positions + 1
        return self._best(logits, width)

    def _tensor(self, x: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(x, device=self.device)

    @staticmethod
    def _best(logits: torch.Tensor, width: int) -> tuple[np.ndarray, np.ndarray]:
        """The best next tokens of each row of logits (N, V), and their log-probabilities, as NumPy arrays."""
        logp, tokens = best_next_tokens(logits.float(), width)
        return tokens.cpu().numpy(), logp.cpu().numpy()

    def apply(self, plan: StepPlan) -> None:
        rows, cross_rows = plan.parents, plan.places
        index = self._tensor(rows)
        self.self_kv, self.positions = _select(self.self_kv, index), self.positions[index]
        if cross_rows is not None:
            index = self._tensor(cross_rows)
            self.cross_kv, self.src_mask = _select(self.cross_kv, index), self.src_mask[index]


def _select(cache: KVCache, rows: torch.Tensor) -> KVCache:
    return [(k[rows], v[rows]) for k, v in cache]


def _cat(a: torch.Tensor, b: torch.Tensor, length: int) -> torch.Tensor:
    """a and b, padded with zeros (False) to `length` along their source axis (1 of a mask, 2 of a cache), stacked."""
    axis = 1 if a.dim() == 2 else 2
    pad = lambda x: F.pad(x, [0, 0] * (x.dim() - 1 - axis) + [0, length - x.size(axis)])  # noqa: E731
    return torch.cat([pad(a), pad(b)])


def _pad_slots(x: torch.Tensor, slots: int) -> torch.Tensor:
    """A cache tensor (N, H, L, Dh) grown to `slots` slots with zeros."""
    return F.pad(x, [0, 0, 0, slots - x.size(2)])


class UncachedDecoder(CachedDecoder):
    """The naive baseline: every step re-runs the decoder over each row's whole prefix."""

    def __init__(self, model: Transformer):
        super().__init__(model)
        self.prefix = torch.zeros(0, 0, dtype=torch.long, device=self.device)  # right-padded; row i's next at
        # self.positions[i]

    def add(self, src: np.ndarray, src_mask: np.ndarray) -> None:
        super().add(src, src_mask)
        self.prefix = F.pad(self.prefix, [0, 0, 0, len(self.positions) - len(self.prefix)])

    def step(self, tokens: np.ndarray, width: int, log_probs: bool = True) -> tuple[np.ndarray, np.ndarray]:
        rows = torch.arange(len(tokens), device=self.device)
        self.prefix = F.pad(self.prefix, [0, max(0, int(self.positions.max()) + 1 - self.prefix.size(1))])
        self.prefix[rows, self.positions] = self._tensor(tokens)
        logits = self.model.decode(self.prefix, self.cross_kv, self.src_mask)  # causal: padding after a row's
        logits = logits[rows, self.positions]  # position does not reach it
        self.positions = self.positions + 1
        return self._best(logits, width)

    def apply(self, plan: StepPlan) -> None:
        self.prefix = self.prefix[self._tensor(plan.parents)]
        super().apply(plan)


@torch.inference_mode()
def translate_ids(
    model: Transformer, sources: list[list[int]], opts: SearchOptions, cached: bool = True
) -> list[list[Hypothesis]]:
    """Translate one batch of source ids (ModelConfig.source_ids)."""
    decoder = CachedDecoder(model) if cached else UncachedDecoder(model)
    return search(decoder, sources, opts, model.cfg)


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
