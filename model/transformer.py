"""The Transformer of "Attention Is All You Need" (Vaswani et al., 2017), written out.

Shapes: N batch, S source length, T target length, H heads, D d_model, Dh = D / H, V vocabulary.
Masks are boolean and True where attention is allowed.

Decoding one step at a time uses two caches (type KVCache), each a list with one (keys, values) pair per decoder
layer, each tensor (N, H, L, Dh):
    self_kv   keys and values of the target positions decoded so far, in L >= every row's length slots: row i's
              position p is slot p, so rows of different lengths share a batch (a row can join a running batch)
    cross_kv  keys and values of the encoder output (L = S), computed once per sentence
Separate tensors rather than one stacked tensor: in an ONNX graph every slice of a tensor is a copy, and copying
the caches at every step cost the exported decoder a third of its time.

Exported to ONNX (export.graphs), each attention is one ONNX Attention node (opset 23), which ONNX Runtime runs as
one kernel on the CPU and on CUDA, where the same math written out is six nodes: every node of a decoder step
costs ONNX Runtime its dispatch, and on a GPU a kernel launch. For the same reason the products of one input are one
product (linears): a self-attention's queries, keys and values, and the encoder's keys and values for every decoder
layer's cross-attention (the weights stay one Linear each, as checkpoints and converters have them).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from core.folder import ModelConfig

KVCache = list[tuple[Tensor, Tensor]]

ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {"relu": F.relu, "gelu": F.gelu, "silu": F.silu}


def sinusoidal_positions(max_len: int, d_model: int, layout: str = "interleaved", pad_id: int = 0) -> Tensor:
    """sin(pos / 10000^(2i/d_model)) and cos(pos / 10000^(2i/d_model)) for i < d_model/2, laid out
    interleaved (the paper): PE(pos, 2i) = sin, PE(pos, 2i+1) = cos,
    or concatenated (Marian): PE(pos, i) = sin, PE(pos, d_model/2 + i) = cos,
    or as fairseq (M2M100, NLLB-200): concatenated, of the angles (pad_id + 1 + pos) / 10000^(i/(d_model/2 - 1)):
    fairseq numbers positions from after its padding id, and spreads the frequencies over d_model/2 - 1 steps."""
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    i = torch.arange(d_model // 2, dtype=torch.float64)
    if layout == "fairseq":
        angle = (pad_id + 1 + pos) / 10000 ** (i / (d_model // 2 - 1))
    else:
        angle = pos / 10000 ** (2 * i / d_model)
    sin, cos = torch.sin(angle), torch.cos(angle)
    if layout == "interleaved":
        return torch.stack([sin, cos], dim=-1).flatten(1).float()
    if layout in ("concatenated", "fairseq"):
        return torch.cat([sin, cos], dim=-1).float()
    raise ValueError(f"unknown position_layout {layout!r}")


def attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor]:
    """Scaled dot-product attention softmax(QK^T / sqrt(d_k)) V; returns the output and the weights."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = scores.softmax(dim=-1)
    return weights @ v, weights


def split_heads(x: Tensor, n_heads: int) -> Tensor:
    """(N, T, D) -> (N, H, T, Dh); one decoding step's (N, D) -> (N, H, 1, Dh), a reshape alone"""
    if x.dim() == 2:
        return x.view(x.size(0), n_heads, 1, -1)
    n, t, d = x.shape
    return x.view(n, t, n_heads, d // n_heads).transpose(1, 2)


def merge_heads(out: Tensor, like: Tensor) -> Tensor:
    """(N, H, T, Dh) -> like's shape, (N, T, D) or one step's (N, D)"""
    if like.dim() == 2:
        return out.reshape(like.shape)
    return out.transpose(1, 2).reshape(like.shape)


def fused_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, n_heads: int | None = None) -> Tensor:
    """attention()'s output; one ONNX Attention node when exported. q, k, v are (N, H, T, Dh), or, given n_heads,
    (N, T, D) with the heads side by side: the output is then (N, T, D), and the exported node splits and merges the
    heads itself, with no Transpose around it (faster on the CPU than the node and its four Transposes)."""
    if torch.onnx.is_in_onnx_export():
        if mask is not None and mask.size(-2) != q.size(-2):  # ONNX Runtime broadcasts a mask over all but queries
            mask = mask.expand(*mask.shape[:-2], q.size(-2), mask.size(-1))
        heads = {} if n_heads is None else {"q_num_heads": n_heads, "kv_num_heads": n_heads}
        return torch.onnx.ops.attention(q, k, v, mask, **heads)[0]
    if n_heads is None:
        return attention(q, k, v, mask)[0]
    return merge_heads(attention(*(split_heads(x, n_heads) for x in (q, k, v)), mask)[0], q)


def causal_mask(length: int, device: torch.device | None = None) -> Tensor:
    """(T, T) look-ahead mask: position i may attend to positions j <= i."""
    return torch.ones(length, length, dtype=torch.bool, device=device).tril()


def linears(x: Tensor, layers: list[nn.Linear]) -> tuple[Tensor, ...]:
    """x W_i + b_i of each of these Linear layers, computed as one product x [W_1 W_2 ...] + [b_1 b_2 ...] and split:
    one product exported (a Gemm, or a MatMul and its Add), where each layer's was a node (on a GPU a kernel) of its
    own."""
    weight = torch.cat([layer.weight for layer in layers])
    bias = torch.cat([layer.bias for layer in layers])
    return F.linear(x, weight, bias).split([layer.out_features for layer in layers], dim=-1)


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O, head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)."""

    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.n_heads = n_heads
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.w_o = nn.Linear(d_model, d_model)

    def queries_keys_values(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The per-head queries, keys and values of x (self-attention), each (N, H, T, Dh): one product."""
        q, k, v = (split_heads(y, self.n_heads) for y in linears(x, [self.w_q, self.w_k, self.w_v]))
        return q, k, v

    def self_attention(self, x: Tensor, mask: Tensor | None) -> Tensor:
        """x (N, T, D) attends over itself (the encoder: no cache): one product, one Attention node, no Transpose."""
        q, k, v = linears(x, [self.w_q, self.w_k, self.w_v])
        return self.w_o(fused_attention(q, k, v, mask, self.n_heads))

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, like: Tensor) -> Tensor:
        """The per-head queries q attend over the keys and values k, v (N, H, Tk, Dh); the output in like's shape,
        (N, Tq, D) or one step's (N, D)."""
        return self.w_o(merge_heads(fused_attention(q, k, v, mask), like))

    def forward(self, x: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
        """Queries from x (N, Tq, D), or one step's (N, D), attend over the keys and values k, v (N, H, Tk, Dh)."""
        return self.attend(split_heads(self.w_q(x), self.n_heads), k, v, mask, x)


class FeedForward(nn.Module):
    """FFN(x) = act(x W1 + b1) W2 + b2, act = ReLU max(0, x) (the paper), GELU, or SiLU x * sigmoid(x) (swish)"""

    def __init__(self, d_model: int, d_ff: int, dropout: float, activation: str):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)
        self.act = ACTIVATIONS[activation]

    def forward(self, x: Tensor) -> Tensor:
        return self.w_2(self.dropout(self.act(self.w_1(x))))


class Residual(nn.Module):
    """The residual connection around a sub-layer, with its LayerNorm.

    post-LN (the paper): LayerNorm(x + Dropout(Sublayer(x)))
    pre-LN:             x + Dropout(Sublayer(LayerNorm(x)))
    A layer calls `input(x)` to get what its sub-layer reads, then `output(x, y)` with the sub-layer's result y.
    """

    def __init__(self, d_model: int, dropout: float, pre_norm: bool):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.pre_norm = pre_norm

    def input(self, x: Tensor) -> Tensor:
        return self.norm(x) if self.pre_norm else x

    def output(self, x: Tensor, y: Tensor) -> Tensor:
        x = x + self.dropout(y)
        return x if self.pre_norm else self.norm(x)


class EncoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads)
        self.ffn = FeedForward(cfg.d_model, cfg.d_ff, cfg.dropout, cfg.activation)
        self.res_attn = Residual(cfg.d_model, cfg.dropout, cfg.pre_norm)
        self.res_ffn = Residual(cfg.d_model, cfg.dropout, cfg.pre_norm)

    def forward(self, x: Tensor, src_mask: Tensor) -> Tensor:
        x = self.res_attn.output(x, self.self_attn.self_attention(self.res_attn.input(x), src_mask))
        return self.res_ffn.output(x, self.ffn(self.res_ffn.input(x)))


def write_slot(cache: Tensor, slot: tuple[Tensor, Tensor, Tensor], new: Tensor) -> Tensor:
    """cache (N, H, L, Dh) with new (N, H, 1, Dh) written at each row's position (decode_step's `slot`): one
    ScatterND in ONNX, N * H small writes (in place where its output is bound to the cache's buffer). new is
    reshaped, not indexed: a reshape folds into the one that split its heads, an index was a Gather and an Expand."""
    n, h, _, dh = new.shape
    return cache.index_put(slot, new.reshape(n, h, dh))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads)
        self.cross_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads)
        self.ffn = FeedForward(cfg.d_model, cfg.d_ff, cfg.dropout, cfg.activation)
        self.res_self = Residual(cfg.d_model, cfg.dropout, cfg.pre_norm)
        self.res_cross = Residual(cfg.d_model, cfg.dropout, cfg.pre_norm)
        self.res_ffn = Residual(cfg.d_model, cfg.dropout, cfg.pre_norm)

    def forward(
        self,
        x: Tensor,
        cross_kv: tuple[Tensor, Tensor],
        self_mask: Tensor | None,
        src_mask: Tensor,
        cache: tuple[Tensor, Tensor] | None = None,
        slot: tuple[Tensor, Tensor, Tensor] | None = None,
    ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """x (N, T, D) are target positions. Without a cache they attend to each other (under self_mask).

        With a cache (each (N, H, L, Dh)), x is one step, (N, D): its keys and values are written into the cache at
        `slot`, the index (row, head, row's position) of every row and head; its query attends to the slots
        self_mask allows.
        Returns the new x and this layer's self-attention keys and values, (N, H, T or L, Dh).
        """
        h = self.res_self.input(x)
        q, k, v = self.self_attn.queries_keys_values(h)
        if cache is not None:
            k, v = write_slot(cache[0], slot, k), write_slot(cache[1], slot, v)
        x = self.res_self.output(x, self.self_attn.attend(q, k, v, self_mask, h))
        h = self.res_cross.input(x)
        x = self.res_cross.output(x, self.cross_attn(h, *cross_kv, src_mask))
        x = self.res_ffn.output(x, self.ffn(self.res_ffn.input(x)))
        return x, (k, v)


class Transformer(nn.Module):
    """Encoder-decoder Transformer with one embedding shared by source, target and the output projection."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=cfg.pad_id)
        nn.init.normal_(self.embed.weight, mean=0.0, std=cfg.d_model**-0.5)
        if cfg.position_layout == "table":  # the model's own positions, loaded with its weights
            self.register_buffer("positions", torch.zeros(cfg.max_len, cfg.d_model))
        else:
            positions = sinusoidal_positions(cfg.max_len, cfg.d_model, cfg.position_layout, cfg.pad_id)
            self.register_buffer("positions", positions, persistent=False)
        self.dropout = nn.Dropout(cfg.dropout)
        self.encoder = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.n_layers))
        self.decoder = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.n_layers))
        # Pre-LN leaves each stack's output un-normalized, so it ends with one more LayerNorm.
        self.encoder_norm = nn.LayerNorm(cfg.d_model) if cfg.pre_norm else nn.Identity()
        self.decoder_norm = nn.LayerNorm(cfg.d_model) if cfg.pre_norm else nn.Identity()
        # Only when configured, so that checkpoints without it load; -inf bans a token (Marian: its <pad>).
        self.register_buffer("output_bias", torch.zeros(cfg.vocab_size) if cfg.output_bias else None)

    def embed_tokens(self, ids: Tensor, positions: Tensor) -> Tensor:
        """Embedding * sqrt(d_model) + positional encoding, then dropout; positions has the shape of ids."""
        return self.dropout(self.embed(ids) * math.sqrt(self.cfg.d_model) + self.positions[positions])

    def encode(self, src: Tensor, src_mask: Tensor) -> Tensor:
        """src (N, S) ids, src_mask (N, S) True at real tokens -> encoder output (N, S, D)."""
        x = self.embed_tokens(src, torch.arange(src.size(1), device=src.device))
        key_mask = src_mask[:, None, None, :]
        for layer in self.encoder:
            x = layer(x, key_mask)
        return self.encoder_norm(x)

    def cross_keys_values(self, memory: Tensor) -> KVCache:
        """Every decoder layer's cross-attention keys and values of the encoder output, each (N, H, S, Dh): all
        layers' in one product."""
        weights = [w for layer in self.decoder for w in (layer.cross_attn.w_k, layer.cross_attn.w_v)]
        kv = [split_heads(y, self.cfg.n_heads) for y in linears(memory, weights)]
        return list(zip(kv[0::2], kv[1::2]))

    def empty_cache(self, batch: int, length: int, like: Tensor) -> KVCache:
        """A self-attention cache of `length` slots, all zero: every keys and values tensor (N, H, length, Dh)."""
        c = self.cfg
        empty = like.new_zeros(batch, c.n_heads, length, c.d_head)
        return [(empty, empty) for _ in range(c.n_layers)]

    def decode(self, tgt: Tensor, cross_kv: KVCache, src_mask: Tensor, tgt_mask: Tensor | None = None) -> Tensor:
        """Teacher-forced decoding of tgt (N, T) under the look-ahead mask and the target padding mask tgt_mask
        (N, T): the logits (N, T, V) at every position."""
        x = self.embed_tokens(tgt, torch.arange(tgt.size(1), device=tgt.device))
        self_mask = causal_mask(tgt.size(1), tgt.device)[None, None]
        if tgt_mask is not None:
            self_mask = self_mask & tgt_mask[:, None, None, :]
        key_mask = src_mask[:, None, None, :]
        for layer, layer_cross_kv in zip(self.decoder, cross_kv):
            x, _ = layer(x, layer_cross_kv, self_mask, key_mask)
        return self.project(x)

    def decode_step(
        self, tokens: Tensor, positions: Tensor, cross_kv: KVCache, src_mask: Tensor, self_kv: KVCache
    ) -> tuple[Tensor, KVCache]:
        """One step of incremental decoding: row i reads tokens[i] (N,) at positions[i] (N,), writes its keys and
        values into slot positions[i] of self_kv (each (N, H, L, Dh), L > every position) and attends to slots
        0..positions[i]. Rows at different positions share a step: a row that joins a running batch starts at
        position 0, its slots beyond its position unused.
        Returns the next-token logits (N, V) and the cache with this step written."""
        x = self.embed_tokens(tokens, positions)  # (N, D): 2-D all through, so that every Linear is one Gemm
        n, h, length = self_kv[0][0].shape[:3]
        slots = torch.arange(length, device=tokens.device)
        self_mask = (slots[None, :] <= positions[:, None])[:, None, None, :]  # (N, 1, 1, L)
        # the (N, H) indices of write_slot, broadcast here: the exported graph then builds its ScatterND index once,
        # with 11 nodes fewer in a step of 2 layers (101 -> 90 after ONNX Runtime's optimizations)
        slot = (torch.arange(n, device=tokens.device)[:, None].expand(n, h),
                torch.arange(h, device=tokens.device)[None, :].expand(n, h), positions[:, None].expand(n, h))
        key_mask = src_mask[:, None, None, :]
        new_kv = []
        for layer, cache, layer_cross_kv in zip(self.decoder, self_kv, cross_kv):
            x, kv = layer(x, layer_cross_kv, self_mask, key_mask, cache, slot)
            new_kv.append(kv)
        return self.project(x), new_kv

    def project(self, x: Tensor) -> Tensor:
        """The decoder's output (N, T, D) -> logits (N, T, V), through the shared embedding."""
        logits = self.decoder_norm(x) @ self.embed.weight.T
        return logits if self.output_bias is None else logits + self.output_bias

    def forward(self, src: Tensor, src_mask: Tensor, tgt_in: Tensor, tgt_mask: Tensor) -> Tensor:
        """Teacher-forced logits (N, T, V) for training."""
        memory = self.encode(src, src_mask)
        return self.decode(tgt_in, self.cross_keys_values(memory), src_mask, tgt_mask)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


def best_next_tokens(logits: Tensor, width: int) -> tuple[Tensor, Tensor]:
    """The `width` (at most V) most likely next tokens of each row of logits (N, V), best first: log-probabilities
    and ids."""
    return logits.log_softmax(dim=-1).topk(min(width, logits.size(-1)), dim=-1)
