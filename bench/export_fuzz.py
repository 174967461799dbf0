"""Issue 27 item 3 ("0 raw exceptions"): random small torch modules, as torch's exporters spell them.

``bench/fuzz.py`` draws random graphs from our own op set; the hidden checks run models that
exporters wrote, and exporters spell things it never draws: LayerNorm written out or as one op,
GELU by erf or tanh, attention as SDPA with and without masks or as ``MultiheadAttention``, RNNs
bidirectional and batch-first, pooling with ``ceil_mode``, interpolation with ``align_corners``,
int64 index inputs, int and bool outputs, fp16 models, symbolic batch and sequence axes. This
script composes random small modules from such blocks (one domain each: token sequences, images,
1-d signals, volumes), exports each with the TorchScript exporter (opsets 13/15/17) or with
``dynamo=True`` (opsets 18/20), and runs ``onnxptq.quantize`` with defaults for every preset on
random-but-plausible data. Each (module, preset) is one forked child with a time limit. Recorded:
raised exceptions (type, first line, documented or raw, the blocks), outputs that stock
onnxruntime does not load or run, NaN/Inf outputs where float has none, the floor's verdict and the
worst float output's cosine. Failures are grouped by (kind, type, first line with numbers and
names masked); each group keeps one reproducer: the exported model and its feeds under
``--out-dir``/repro, and a three-line command.

    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/export_fuzz.py --modules 40 --seed 1 \\
        --json /work/cache/exportfuzz/seed1.json
"""

from __future__ import annotations

import _common  # noqa: F401  (puts the repository root on sys.path)
import argparse
import collections
import hashlib
import json
import logging
import multiprocessing as mp
import re
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

PRESETS = ("A8W8", "A16W8", "BF16", "FP16", "BFP16", "MX9", "MXINT8", "MXFP8_E4M3", "MXFP4")
#: fuzz18 added TorchScript at opset 11 (older exports: attribute axes, Split by attribute, Resize with roi/scales,
#: Softmax over the flattened trailing axes); it changes what ``draw`` gives for earlier seeds.
#: fuzz21 added dynamo at opset 23, where torch writes SDPA as the ``Attention`` op, RMSNorm as ``RMSNormalization`` and
#: GroupNorm as ``GroupNormalization``; it too changes what ``draw`` gives for earlier seeds.
EXPORTS = (("torchscript", 13), ("torchscript", 15), ("torchscript", 17), ("dynamo", 18), ("dynamo", 20), ("torchscript", 11),
           ("dynamo", 23))
D, C, T, HW = 16, 8, 12, 16  # token width, image channels, sequence length, image side
VOCAB = 50
#: Blocks that read HF's int64 ``attention_mask`` (input ``amask``) rather than the bool padding.
INT_MASK_BLOCKS = frozenset({"attn_int_mask"})
#: Blocks drawn only in float16 models whose input stays float32 (input → Cast → patch Conv: an fp16 ViT export).
FP16_BLOCKS = frozenset({"vit_fp16"})
#: Blocks that read HF's int64 ``attention_mask`` (``amask``) through a ``wants`` list (the mask spellings of fuzz15).
INT_MASK_BLOCKS = INT_MASK_BLOCKS | {"attn_mask_where", "attn_mask_finfo", "causal_trilu", "roberta_embed",
                                     "masked_mean_pool", "last_token_pool", "mask_equal_not"}
#: Blocks that read BERT's int64 ``token_type_ids`` (input ``ttype``: 0 for the first segment, 1 for the second).
TTYPE_BLOCKS = frozenset({"roberta_embed"})
#: Blocks drawn only in float16 models fed float16 (the normalizations as fp16 exporters write them, upcast or not).
FP16_NATIVE_BLOCKS = frozenset({"ln_fp16_forms"})
#: fuzz20: Mish/HardSwish/HardSigmoid/GELU written out, as fp16 exporters leave them.
FP16_NATIVE_BLOCKS = FP16_NATIVE_BLOCKS | {"acts_fp16_out"}
#: fuzz21: Gemma's RMSNorm computed in half (ε an fp16 subnormal), attention masked by −inf in half.
FP16_NATIVE_BLOCKS = FP16_NATIVE_BLOCKS | {"rmsnorm_offset_fp16", "neginf_mask_fp16"}
#: Blocks that read a decoder's cached keys and values (inputs ``pkey``, ``pval``: (b, heads, P, dh), P = KV_LEN).
KV_BLOCKS = frozenset({"kv_cache_attn", "cross_attn_cached"})
KV_LEN = 5
#: Blocks whose TorchScript export needs opset ≥ 14 (``torch.tril`` → Trilu): drawn at 15 where 13 came up.
TRILU_BLOCKS = frozenset({"causal_trilu"})
#: Blocks TorchScript writes as ``scaled_dot_product_attention``, which its exporter refuses below opset 14 (seed 25's
#: m002 at 13: "export failed"): drawn at 15 too; the draw's random calls are unchanged.
TRILU_BLOCKS = TRILU_BLOCKS | {"sdpa", "sdpa_causal", "sdpa_boolmask", "sdpa_addmask", "causal_full_triu"}
#: Blocks TorchScript cannot write at opset 11 (``einsum`` needs 12; at 11 it writes T5's bucketing as an
#: int64 Add onnxruntime rejects): drawn at 13 where 11 came up (/work/cache/fuzz18/op11.py, every block alone).
OPSET13_BLOCKS = frozenset({"einsum", "einsum_attn", "relpos_bucket"})
#: A per-channel fake quantization needs QuantizeLinear's axis (opset 13).
OPSET13_BLOCKS = OPSET13_BLOCKS | {"fake_quant_qat"}
#: Blocks the dynamo exporter refuses (torch.export has no fake-quantize decomposition): drawn under TorchScript 17
#: where dynamo came up; the draw's random calls are unchanged.
TORCHSCRIPT_BLOCKS = frozenset({"fake_quant_qat"})
#: Blocks whose dynamo export at opset 23 writes an ``Attention`` with a mask broadcast over the query axis, which
#: onnxruntime 1.32's CPU kernel refuses ("inconsistent q_sequence_length"; the float model does not run): drawn at 20
#: where 23 came up (/work/cache/fuzz21/op23.py).
ATTN23_BLOCKS = frozenset({"sdpa_boolmask", "sdpa_addmask", "mha"})
#: Blocks that step a Python loop over the sequence (an unrolled cell): the export is specialised to the traced
#: length under either exporter, so the sequence axis is drawn static.
UNROLLED_BLOCKS = frozenset({"lstm_cell_unrolled"})
#: Extra output kinds by domain: heads read from the per-position (seq) or per-pixel (img) output ``y``.
OUTPUT_KINDS = {"seq": ("argmax", "topk", "bool", "pooled", "count", "scalar"),
                "img": ("argmax", "topk", "bool", "pooled", "count", "scalar", "kp_argmax", "kp_soft", "image")}


# ----------------------------------------------------------------------------- blocks

def _blocks() -> dict[str, dict[str, Any]]:
    """Shape-keeping blocks per domain: ``factory()`` -> nn.Module with ``forward(h, pad)``; ``pad`` is
    the (B, T) bool padding mask of the sequence domain (None elsewhere)."""
    import math

    import torch
    import torch.nn.functional as F
    from torch import nn

    def _recur_py(h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        s = torch.zeros_like(h[:, 0])
        outs = []
        for i in range(h.shape[1]):
            s = torch.tanh(h[:, i] + torch.matmul(s, w))
            outs.append(s)
        return torch.stack(outs, 1)

    _recur = torch.jit.script(_recur_py)  # TorchScript export: a Loop over the sequence (dynamo unrolls it)

    class LNOut(nn.Module):  # LayerNorm written out
        def __init__(self):
            super().__init__()
            self.w, self.b = nn.Parameter(torch.rand(D) + 0.5), nn.Parameter(torch.randn(D) * 0.1)

        def forward(self, h, pad=None):
            mu = h.mean(-1, keepdim=True)
            var = ((h - mu) ** 2).mean(-1, keepdim=True)
            return (h - mu) / torch.sqrt(var + 1e-5) * self.w + self.b

    class RMSOut(nn.Module):  # RMSNorm written out (LLaMA spelling: pow, mean, rsqrt, float cast)
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.rand(D) + 0.5)

        def forward(self, h, pad=None):
            v = h.float().pow(2).mean(-1, keepdim=True)
            return self.w * (h * torch.rsqrt(v + 1e-6)).to(h.dtype)

    class Wrap(nn.Module):
        def __init__(self, mod):
            super().__init__()
            self.m = mod

        def forward(self, h, pad=None):
            return self.m(h)

    class Lin(nn.Module):
        def __init__(self, act):
            super().__init__()
            self.a, self.b, self.act = nn.Linear(D, 2 * D), nn.Linear(2 * D, D), act

        def forward(self, h, pad=None):
            return h + self.b(self.act(self.a(h)))

    class SDPA(nn.Module):
        def __init__(self, how: str):
            super().__init__()
            self.qkv, self.o, self.how = nn.Linear(D, 3 * D), nn.Linear(D, D), how

        def forward(self, h, pad=None):
            b, t, _ = h.shape
            q, k, v = self.qkv(h).reshape(b, t, 3, 2, D // 2).permute(2, 0, 3, 1, 4)
            if self.how == "causal":
                a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            elif self.how == "bool" and pad is not None:
                a = F.scaled_dot_product_attention(q, k, v, attn_mask=~pad[:, None, None, :])
            elif self.how == "additive" and pad is not None:
                a = F.scaled_dot_product_attention(q, k, v, attn_mask=pad[:, None, None, :].to(h.dtype) * -1e4)
            else:
                a = F.scaled_dot_product_attention(q, k, v)
            return h + self.o(a.transpose(1, 2).reshape(b, t, D))

    class ManualAttn(nn.Module):  # attention written out: matmul, scale, masked_fill, softmax
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v = nn.Linear(D, D), nn.Linear(D, D), nn.Linear(D, D)

        def forward(self, h, pad=None):
            s = self.q(h) @ self.k(h).transpose(-1, -2) / (D ** 0.5)
            if pad is not None:
                s = s.masked_fill(pad[:, None, :], float("-inf") if h.dtype == torch.float32 else -1e4)
            return h + torch.softmax(s, -1) @ self.v(h)

    class MHA(nn.Module):
        def __init__(self):
            super().__init__()
            self.m = nn.MultiheadAttention(D, 2, batch_first=True)

        def forward(self, h, pad=None):
            return h + self.m(h, h, h, key_padding_mask=pad, need_weights=False)[0]

    class RNN(nn.Module):
        def __init__(self, kind: str, bi: bool):
            super().__init__()
            self.r = getattr(nn, kind)(D, D // 2 if bi else D, batch_first=True, bidirectional=bi)

        def forward(self, h, pad=None):
            return h + self.r(h)[0]

    class RNNSeqFirst(nn.Module):
        def __init__(self):
            super().__init__()
            self.r = nn.GRU(D, D, num_layers=2)

        def forward(self, h, pad=None):
            return self.r(h.transpose(0, 1))[0].transpose(0, 1)

    class Conv1dSeq(nn.Module):
        def __init__(self, padmode: str):
            super().__init__()
            self.c, self.padmode = nn.Conv1d(D, D, 3), padmode

        def forward(self, h, pad=None):
            x = F.pad(h.transpose(1, 2), (1, 1), mode=self.padmode)
            return self.c(x).transpose(1, 2)

    class Einsum(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(2, D, D // 2) / D ** 0.5)

        def forward(self, h, pad=None):
            return torch.einsum("btd,hde->bthe", h, self.w).flatten(2)

    class MatmulBroadcast(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(1, D, D) / D ** 0.5)

        def forward(self, h, pad=None):
            return torch.matmul(h, self.w) + h

    class CumsumWhere(nn.Module):
        def forward(self, h, pad=None):
            c = torch.cumsum(h, 1) / torch.arange(1, h.shape[1] + 1, dtype=h.dtype)[:, None]
            return torch.where(h > 0, c, h * 0.5)

    class SplitCat(nn.Module):
        def __init__(self):
            super().__init__()
            self.l = nn.Linear(D // 2, D // 2)

        def forward(self, h, pad=None):
            a, b = h.chunk(2, -1)
            c, d = torch.split(b, [D // 4, D // 4], -1)
            return torch.cat([self.l(a), torch.clamp(c, -1, 1), F.relu6(d)], -1)

    class ReshapeFlat(nn.Module):
        def forward(self, h, pad=None):
            b = h.shape[0]
            return h.reshape(b, -1, 2, D // 2).flatten(2).reshape(b, -1, D)

    class StepSlice(nn.Module):
        def forward(self, h, pad=None):
            return torch.cat([h[..., ::2] * 2, h[..., 1::2]], -1)

    class SortMix(nn.Module):
        def forward(self, h, pad=None):
            return torch.sort(h, -1, descending=True)[0] + h

    class TopkPad(nn.Module):
        def forward(self, h, pad=None):
            v = torch.topk(h, D // 2, -1)[0]
            return F.pad(v, (0, D // 2), value=0.0) + h

    class GatherIdx(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("idx", torch.randperm(D))

        def forward(self, h, pad=None):
            return torch.index_select(h, -1, self.idx) + h[..., torch.arange(D - 1, -1, -1)]


    class IntMaskAttn(nn.Module):  # BERT's extended mask: int64 mask → Cast → (1 − m)·−10000 → Add before Softmax
        int_mask = True  # gets the raw int64 ``amask`` input instead of the bool padding

        def __init__(self):
            super().__init__()
            self.qkv, self.o = nn.Linear(D, 3 * D), nn.Linear(D, D)

        def forward(self, h, amask=None):
            b, t, _ = h.shape
            q, k, v = self.qkv(h).reshape(b, t, 3, 2, D // 2).permute(2, 0, 3, 1, 4)
            s = q @ k.transpose(-1, -2) / (D // 2) ** 0.5
            if amask is not None:
                s = s + (1.0 - amask[:, None, None, :].to(h.dtype)) * -10000.0
            a = torch.softmax(s, -1) @ v
            return h + self.o(a.transpose(1, 2).reshape(b, t, D))

    class Rotary(nn.Module):  # rotary embeddings on Q, K: cos/sin tables sliced to the length, rotate_half by Slice/Neg/Concat
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v, self.o = nn.Linear(D, D), nn.Linear(D, D), nn.Linear(D, D), nn.Linear(D, D)
            hd = D // 2
            inv = 1.0 / (10000 ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
            f = torch.outer(torch.arange(256, dtype=torch.float32), inv)
            emb = torch.cat([f, f], -1)
            self.register_buffer("cos", emb.cos())
            self.register_buffer("sin", emb.sin())

        def forward(self, h, pad=None):
            b, t, _ = h.shape

            def heads(x):
                return x.reshape(b, t, 2, D // 2).transpose(1, 2)

            def rotate_half(x):
                x1, x2 = x[..., : D // 4], x[..., D // 4:]
                return torch.cat([-x2, x1], -1)

            cos, sin = self.cos[:t].to(h.dtype), self.sin[:t].to(h.dtype)
            q, k, v = heads(self.q(h)), heads(self.k(h)), heads(self.v(h))
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            a = torch.softmax(q @ k.transpose(-1, -2) / (D // 2) ** 0.5, -1) @ v
            return h + self.o(a.transpose(1, 2).reshape(b, t, D))

    class EinsumAttn(nn.Module):  # attention written with Einsum: scores, softmax, weighted values
        def __init__(self):
            super().__init__()
            self.qkv, self.o = nn.Linear(D, 3 * D), nn.Linear(D, D)

        def forward(self, h, pad=None):
            b, t, _ = h.shape
            q, k, v = self.qkv(h).reshape(b, t, 3, 2, D // 2).unbind(2)
            s = torch.einsum("bqhd,bkhd->bhqk", q, k) * (D // 2) ** -0.5
            a = torch.einsum("bhqk,bkhd->bqhd", torch.softmax(s, -1), v)
            return h + self.o(a.reshape(b, t, D))

    class WhereSoftmax(nn.Module):  # causal (and padding) mask by Where with a −inf fill before Softmax
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v = nn.Linear(D, D), nn.Linear(D, D), nn.Linear(D, D)

        def forward(self, h, pad=None):
            t = h.shape[1]
            s = self.q(h) @ self.k(h).transpose(-1, -2) / D ** 0.5
            pos = torch.arange(t)
            keep = pos[None, :] <= pos[:, None]
            if pad is not None:
                keep = keep & ~pad[:, None, :]
            s = torch.where(keep, s, torch.tensor(float("-inf"), dtype=h.dtype))
            return h + torch.softmax(s, -1) @ self.v(h)

    class EmbedPositions(nn.Module):  # BERT embeddings: position ids (arange) and token types (zeros) gathered, summed, LayerNorm
        def __init__(self):
            super().__init__()
            self.pos, self.typ, self.ln = nn.Embedding(256, D), nn.Embedding(2, D), nn.LayerNorm(D)

        def forward(self, h, pad=None):
            ids = torch.arange(h.shape[1], dtype=torch.int64)[None].expand(h.shape[0], -1)
            return self.ln(h + self.pos(ids) + self.typ(torch.zeros_like(ids)))

    class LoopRecur(nn.Module):  # a scripted recurrence: TorchScript writes a Loop whose body has a MatMul
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(D, D) / D)
            self.l = nn.Linear(D, D)

        def forward(self, h, pad=None):
            return h + self.l(_recur(h, self.w.to(h.dtype)))


    def _heads(x, b, t):
        return x.reshape(b, t, 2, D // 2).transpose(1, 2)

    class AttnHFMask(nn.Module):  # HF's extended int64 mask before Softmax, one QKV MatMul cut in three
        """``where``: _prepare_4d_attention_mask — Expand to (b, 1, t, t), 1 − m, Where(bool, finfo.min), QKV by Split;
        ``mul``: (1 − m)·finfo.min (Cast/Unsqueeze/Sub/Mul) Added to the scores, QKV by Slice."""
        wants = ("amask",)

        def __init__(self, how: str):
            super().__init__()
            self.qkv, self.o, self.how = nn.Linear(D, 3 * D), nn.Linear(D, D), how

        def forward(self, h, amask):
            b, t, _ = h.shape
            qkv = self.qkv(h)
            low = torch.finfo(h.dtype).min
            if self.how == "where":
                q, k, v = (_heads(z, b, t) for z in qkv.split(D, -1))
                inv = 1.0 - amask[:, None, None, :].expand(b, 1, t, t).to(h.dtype)
                ext = inv.masked_fill(inv.to(torch.bool), low)
            else:
                q, k, v = _heads(qkv[..., :D], b, t), _heads(qkv[..., D:2 * D], b, t), _heads(qkv[..., 2 * D:], b, t)
                ext = (1.0 - amask.unsqueeze(1).unsqueeze(2).to(h.dtype)) * low
            a = torch.softmax(q @ k.transpose(-1, -2) * (D // 2) ** -0.5 + ext, -1) @ v
            return h + self.o(a.transpose(1, 2).reshape(b, t, D))

    class CausalTrilu(nn.Module):  # GPT-2: Conv1D as addmm (Gemm), Split, causal tril (Trilu) → Where(finfo.min), padding Add
        wants = ("amask",)

        def __init__(self):
            super().__init__()
            self.wa, self.ba = nn.Parameter(torch.randn(D, 3 * D) * 0.2), nn.Parameter(torch.zeros(3 * D))
            self.wp, self.bp = nn.Parameter(torch.randn(D, D) * 0.2), nn.Parameter(torch.zeros(D))

        def forward(self, h, amask):
            b, t, _ = h.shape
            qkv = torch.addmm(self.ba, h.reshape(-1, D), self.wa).reshape(b, t, 3 * D)
            q, k, v = (_heads(z, b, t) for z in qkv.split(D, 2))
            s = q @ k.transpose(-1, -2) / (D // 2) ** 0.5
            causal = torch.tril(torch.ones(t, t, dtype=torch.bool))[None, None]
            s = torch.where(causal, s, torch.tensor(torch.finfo(h.dtype).min, dtype=h.dtype))
            s = s + (1.0 - amask[:, None, None, :].to(h.dtype)) * torch.finfo(h.dtype).min
            a = torch.softmax(s, -1) @ v
            return h + torch.addmm(self.bp, a.transpose(1, 2).reshape(-1, D), self.wp).reshape(b, t, D)

    class RobertaEmbed(nn.Module):  # position ids by CumSum of the mask, token types Gathered from an int64 input, LayerNorm
        wants = ("amask", "ttype")

        def __init__(self):
            super().__init__()
            self.pos, self.typ, self.ln = nn.Embedding(258, D, padding_idx=1), nn.Embedding(2, D), nn.LayerNorm(D, eps=1e-5)

        def forward(self, h, amask, ttype):
            m = amask.ne(0).int()
            ids = (torch.cumsum(m, 1).type_as(m) * m).long() + 1  # RoBERTa's create_position_ids_from_input_ids
            return self.ln(h + self.pos(ids) + self.typ(ttype))

    class MaskedMeanPool(nn.Module):  # sentence-transformers' mean pooling over the mask, L2-normalized, added back
        wants = ("amask",)

        def __init__(self):
            super().__init__()
            self.l = nn.Linear(D, D)

        def forward(self, h, amask):
            m = amask.unsqueeze(-1).expand(h.size()).to(h.dtype)
            pooled = (h * m).sum(1) / torch.clamp(m.sum(1), min=1e-9)
            return h + self.l(F.normalize(pooled, p=2, dim=1))[:, None]

    class LastTokenPool(nn.Module):  # decoder embeddings: the last real token Gathered by mask.sum − 1, ArgMax of ids-like scores
        wants = ("amask",)

        def __init__(self):
            super().__init__()
            self.l, self.s = nn.Linear(D, D), nn.Linear(D, 1)

        def forward(self, h, amask):
            b = h.shape[0]
            last = amask.sum(-1) - 1
            top = self.s(h)[..., 0].max(-1).indices  # CLIP's pooling by the arg-max position (dynamo names an argmax "argmax")
            picked = h[torch.arange(b), last] + h[torch.arange(b), top]
            return h + self.l(picked)[:, None]

    class MoETopK(nn.Module):  # a router: Softmax, TopK(2), experts' weights Gathered by the chosen indices, weighted sum
        def __init__(self):
            super().__init__()
            self.router = nn.Linear(D, 4)
            self.w = nn.Parameter(torch.randn(4, D, D) / D ** 0.5)

        def forward(self, h, pad=None):
            p, idx = torch.topk(torch.softmax(self.router(h), -1), 2, -1)  # (b, t, 2)
            p = p / p.sum(-1, keepdim=True)
            out = h
            for j in range(2):
                we = self.w[idx[..., j]]  # (b, t, D, D): a Gather of the weights
                out = out + p[..., j:j + 1] * (h.unsqueeze(-2) @ we).squeeze(-2)
            return out

    class LNFp16Forms(nn.Module):  # fp16: T5's upcast RMSNorm (Cast float32 → Pow/ReduceMean/Rsqrt → Cast back),
        def __init__(self):        # a LayerNormalization op, and LayerNorm by Pow/ReduceMean in fp16 itself
            super().__init__()
            self.w, self.ln = nn.Parameter(torch.rand(D) + 0.5), nn.LayerNorm(D)
            self.fc = nn.Linear(D, D)

        def forward(self, h, pad=None):
            v = h.to(torch.float32).pow(2).mean(-1, keepdim=True)
            x = self.w * (h.to(torch.float32) * torch.rsqrt(v + 1e-6)).to(h.dtype)
            x = self.fc(self.ln(x))
            mu = x.mean(-1, keepdim=True)
            var = (x - mu).pow(2).mean(-1, keepdim=True)
            return h + (x - mu) / torch.sqrt(var + 1e-5)

    class Fn(nn.Module):  # an activation written out as a function of tensors (no single torch op)
        def __init__(self, f):
            super().__init__()
            self.f = f

        def forward(self, h, pad=None):
            return self.f(h)

    class LNMoments(nn.Module):  # LayerNorm as E[x²] − E[x]²: ReduceMean/Pow/Mul/Sub/Sqrt/Div, or Reciprocal
        def __init__(self, recip: bool):
            super().__init__()
            self.w, self.b = nn.Parameter(torch.rand(D) + 0.5), nn.Parameter(torch.randn(D) * 0.1)
            self.recip = recip

        def forward(self, h, pad=None):
            mu = h.mean(-1, keepdim=True)
            if self.recip:  # sum of squares over the width, times 1/D, then a Reciprocal of the root
                var = (h * h).sum(-1, keepdim=True) / D - mu * mu
                return (h - mu) * torch.reciprocal(torch.sqrt(var + 1e-5)) * self.w + self.b
            var = h.pow(2).mean(-1, keepdim=True) - mu.pow(2)
            return (h - mu) / torch.sqrt(var + 1e-5) * self.w + self.b

    class RMSL2(nn.Module):  # RMSNorm by the L2 norm (ReduceL2), T5/Gemma style scale (1 + w)
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(D) * 0.1)

        def forward(self, h, pad=None):
            r = torch.linalg.vector_norm(h, 2, -1, keepdim=True) / D ** 0.5
            return h / (r + 1e-6) * (1 + self.w)

    def stft_mel(module: nn.Module) -> int:
        """Register a Hann-windowed DFT of D samples as a Conv1d kernel (``ker``: cos rows, then −sin rows) and 8
        triangular mel filters over its D/2 + 1 bins (``mel``) on ``module``; return the bin count."""
        n, bins = D, D // 2 + 1
        t = torch.arange(n, dtype=torch.float32)
        f = torch.arange(bins, dtype=torch.float32)[:, None]
        win = torch.hann_window(n, periodic=True)
        ker = torch.cat([torch.cos(2 * torch.pi * f * t / n) * win, -torch.sin(2 * torch.pi * f * t / n) * win])
        module.register_buffer("ker", ker[:, None, :])
        module.register_buffer("mel", torch.clamp(1 - (f - torch.linspace(0, bins - 1, 8)[None]).abs() / 2, min=0))  # triangles
        return bins

    class STFTMel(nn.Module):  # the sequence as a waveform: STFT as Conv1d, magnitude, mel MatMul, Log, DCT MatMul
        def __init__(self, l2: bool):
            super().__init__()
            bins = stft_mel(self)
            k = torch.arange(8, dtype=torch.float32)
            self.register_buffer("dct", torch.cos(torch.pi / 8 * (k[:, None] + 0.5) * torch.arange(D)[None]))
            self.l2, self.bins = l2, bins

        def forward(self, h, pad=None):
            b = h.shape[0]
            spec = F.conv1d(h.reshape(b, 1, -1), self.ker, stride=D)  # (b, 2·bins, T)
            re, im = spec[:, : self.bins], spec[:, self.bins:]
            if self.l2:
                mag = torch.linalg.vector_norm(torch.stack([re, im], -1), 2, -1)
            else:
                mag = torch.sqrt(re.pow(2) + im.pow(2))
            logmel = torch.log(mag.transpose(1, 2) @ self.mel + 1e-6)  # (b, T, 8)
            return h + 0.1 * (logmel @ self.dct)

    class MaxKeep0(nn.Module):  # ReduceMax keepdims=0 into Sub and Cast, a rank-0 scale
        def forward(self, h, pad=None):
            m = torch.amax(h, -1)  # (b, t): keepdims=0
            level = (m * 4).to(torch.int32).to(h.dtype)  # a Cast to int and back
            s = h.abs().max()  # rank 0
            return (h - m.unsqueeze(-1)) / (s + torch.tensor(1.0)) + 0.1 * level.unsqueeze(-1) + h

    class DFLSeq(nn.Module):  # distribution focal loss head: Softmax over 16 bins, MatMul with arange
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(D, 4 * 16), nn.Linear(4, D)
            self.register_buffer("proj", torch.arange(16, dtype=torch.float32))

        def forward(self, h, pad=None):
            b, t, _ = h.shape
            d = torch.softmax(self.a(h).reshape(b, t, 4, 16), -1) @ self.proj.to(h.dtype)
            return h + self.b(d / 8)

    def _gru_cell_py(h: torch.Tensor, wx: torch.Tensor, wh: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        s = torch.zeros_like(h[:, 0, : wh.shape[0]])
        outs = []
        for i in range(h.shape[1]):
            xz, xr, xn = (h[:, i] @ wx + b).chunk(3, -1)
            hz, hr, hn = (s @ wh).chunk(3, -1)
            z, r = torch.sigmoid(xz + hz), torch.sigmoid(xr + hr)
            s = (1 - z) * torch.tanh(xn + r * hn) + z * s
            outs.append(s)
        return torch.stack(outs, 1)

    _gru_cell = torch.jit.script(_gru_cell_py)  # TorchScript: a Loop whose body is a GRU cell; dynamo unrolls it

    class GRUCellWritten(nn.Module):  # a GRU cell written out (MatMul, chunk, Sigmoid, Tanh, blend) in a scripted loop
        def __init__(self):
            super().__init__()
            self.wx, self.wh = nn.Parameter(torch.randn(D, 3 * D) / D ** 0.5), nn.Parameter(torch.randn(D, 3 * D) / D ** 0.5)
            self.b = nn.Parameter(torch.zeros(3 * D))

        def forward(self, h, pad=None):
            return h + _gru_cell(h, self.wx.to(h.dtype), self.wh.to(h.dtype), self.b.to(h.dtype))

    class LSTMCellUnrolled(nn.Module):  # nn.LSTMCell stepped in Python: unrolled MatMul/Sigmoid/Tanh per step (both exporters)
        def __init__(self):
            super().__init__()
            self.c = nn.LSTMCell(D, D)

        def forward(self, h, pad=None):
            hx = cx = torch.zeros_like(h[:, 0])
            outs = []
            for i in range(h.shape[1]):
                hx, cx = self.c(h[:, i], (hx, cx))
                outs.append(hx)
            return h + torch.stack(outs, 1)

    class RMSMulSelf(nn.Module):  # RMSNorm by h*h (Mul self), 1/sqrt as Reciprocal(Sqrt), scale
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.rand(D) + 0.5)

        def forward(self, h, pad=None):
            return h * torch.reciprocal(torch.sqrt((h * h).mean(-1, keepdim=True) + 1e-6)) * self.w

    class ActMix(nn.Module):  # ELU, SELU, HardSigmoid gate, Clip with a min only, LeakyReLU between Linears
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(D, 2 * D), nn.Linear(2 * D, D)

        def forward(self, h, pad=None):
            z = self.a(h)
            z = F.elu(z) + F.selu(z) * F.hardsigmoid(z) + torch.clamp(z, min=-0.25) + F.leaky_relu(z, 0.2)
            return h + self.b(z)

    def gelu_tanh_out(x):
        return 0.5 * x * (1 + torch.tanh((2 / torch.pi) ** 0.5 * (x + 0.044715 * torch.pow(x, 3))))

    def gelu_erf_out(x):
        return x * 0.5 * (1.0 + torch.erf(x / 2 ** 0.5))

    def gelu_erf_folded(x):  # the 1/√2 folded into a Mul, the ½ applied to the sum (HF's "gelu_new"-like order)
        return x * (0.5 + 0.5 * torch.erf(x * 0.7071067811865476))

    class SoftmaxWritten(nn.Module):  # attention whose softmax is spelt: ReduceMax, Sub, Exp, ReduceSum, Div
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v = nn.Linear(D, D), nn.Linear(D, D), nn.Linear(D, D)

        def forward(self, h, pad=None):
            s = self.q(h) @ self.k(h).transpose(-1, -2) * D ** -0.5
            e = torch.exp(s - s.amax(-1, keepdim=True))
            return h + (e / e.sum(-1, keepdim=True)) @ self.v(h)

    class RMSPowSum(nn.Module):  # RMSNorm as Pow(x, 2), ReduceSum, · 1/D, Sqrt, Reciprocal, then a Linear
        def __init__(self):
            super().__init__()
            self.w, self.fc = nn.Parameter(torch.rand(D) + 0.5), nn.Linear(D, D)

        def forward(self, h, pad=None):
            ms = torch.pow(h, 2).sum(-1, keepdim=True) * (1.0 / D)
            return h + self.fc(h * torch.reciprocal(torch.sqrt(ms + 1e-6)) * self.w)


    class ALiBiAttn(nn.Module):  # BLOOM/MPT: per-head slopes × −|i − j| from arange (Range, Sub, Abs) added to the scores
        def __init__(self, causal: bool):
            super().__init__()
            self.qkv, self.o, self.causal = nn.Linear(D, 3 * D), nn.Linear(D, D), causal
            self.register_buffer("slopes", torch.tensor([0.5, 0.125]).view(1, 2, 1, 1))

        def forward(self, h, pad=None):
            b, t, _ = h.shape
            q, k, v = self.qkv(h).reshape(b, t, 3, 2, D // 2).permute(2, 0, 3, 1, 4)
            pos = torch.arange(t, device=h.device)
            rel = (pos[None, :] - pos[:, None]).abs().to(h.dtype)
            s = q @ k.transpose(-1, -2) * (D // 2) ** -0.5 - self.slopes.to(h.dtype) * rel
            if self.causal:
                s = s.masked_fill(pos[None, :] > pos[:, None], torch.finfo(h.dtype).min)
            if pad is not None:
                s = s.masked_fill(pad[:, None, None, :], torch.finfo(h.dtype).min)
            a = torch.softmax(s, -1) @ v
            return h + self.o(a.transpose(1, 2).reshape(b, t, D))

    class RelPosBucket(nn.Module):  # T5: relative positions bucketed (Abs, Log, Min, Where, Cast), a Gathered bias per head
        def __init__(self):
            super().__init__()
            self.qkv, self.o = nn.Linear(D, 3 * D, bias=False), nn.Linear(D, D, bias=False)
            self.rel = nn.Embedding(8, 2)

        def forward(self, h, pad=None):
            b, t, _ = h.shape
            q, k, v = self.qkv(h).reshape(b, t, 3, 2, D // 2).permute(2, 0, 3, 1, 4)
            pos = torch.arange(t, dtype=torch.long)
            rp = pos[None, :] - pos[:, None]
            n = rp.abs()
            half = 4
            exact = half // 2
            large = exact + (torch.log(n.float().clamp(min=1) / exact) / np.log(16 / exact) * (half - exact)).to(torch.long)
            large = torch.min(large, torch.full_like(large, half - 1))
            bucket = (rp > 0).to(torch.long) * half + torch.where(n < exact, n, large)
            bias = self.rel(bucket).permute(2, 0, 1)[None].to(h.dtype)  # (1, heads, t, t)
            s = q @ k.transpose(-1, -2) + bias  # T5: no 1/√d
            if pad is not None:
                s = s.masked_fill(pad[:, None, None, :], torch.finfo(h.dtype).min)
            return h + self.o((torch.softmax(s.float(), -1).to(h.dtype) @ v).transpose(1, 2).reshape(b, t, D))

    class MaskEqualNot(nn.Module):  # HF's attention_mask read as keep = ~(mask == 0): Equal, Not, Where(finfo.min), Softmax
        int_mask = True

        def __init__(self):
            super().__init__()
            self.q, self.k, self.v = nn.Linear(D, D), nn.Linear(D, D), nn.Linear(D, D)

        def forward(self, h, amask=None):
            s = self.q(h) @ self.k(h).transpose(-1, -2) * D ** -0.5
            keep = ~(amask == 0)
            s = torch.where(keep[:, None, :], s, torch.tensor(torch.finfo(h.dtype).min, dtype=h.dtype))
            return h + torch.softmax(s, -1) @ self.v(h)

    class LogSoftmaxMix(nn.Module):  # a CTC-style head's log-probabilities (LogSoftmax) read on by a Linear
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(D, 2 * D), nn.Linear(2 * D, D)

        def forward(self, h, pad=None):
            return h + self.b(F.log_softmax(self.a(h), -1) * 0.1)

    class RotaryInterleaved(nn.Module):  # GPT-J: rotate every pair (x[..., ::2], x[..., 1::2]), stack, flatten
        def __init__(self):
            super().__init__()
            self.qk, self.v, self.o = nn.Linear(D, 2 * D), nn.Linear(D, D), nn.Linear(D, D)
            inv = 1.0 / (10000 ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
            f = torch.outer(torch.arange(256, dtype=torch.float32), inv)
            self.register_buffer("cos", f.cos().repeat_interleave(2, -1))
            self.register_buffer("sin", f.sin().repeat_interleave(2, -1))

        def forward(self, h, pad=None):
            t = h.shape[1]

            def rot(x):
                x1, x2 = x[..., ::2], x[..., 1::2]
                return torch.stack((-x2, x1), -1).flatten(-2)

            cos, sin = self.cos[:t].to(h.dtype), self.sin[:t].to(h.dtype)
            q, k = self.qk(h).chunk(2, -1)
            q, k = q * cos + rot(q) * sin, k * cos + rot(k) * sin
            return h + self.o(torch.softmax(q @ k.transpose(-1, -2) * D ** -0.5, -1) @ self.v(h))

    class SwiGLU(nn.Module):  # LLaMA's MLP: down(silu(gate(h)) · up(h)), no biases
        def __init__(self):
            super().__init__()
            self.g, self.u, self.d = nn.Linear(D, 2 * D, bias=False), nn.Linear(D, 2 * D, bias=False), nn.Linear(2 * D, D, bias=False)

        def forward(self, h, pad=None):
            return h + self.d(F.silu(self.g(h)) * self.u(h))

    class LNMaxEps(nn.Module):  # Keras/TF LayerNorm: variance floored by clamp(min=ε) (Max or Clip), Reciprocal(Sqrt)
        def __init__(self):
            super().__init__()
            self.w, self.b = nn.Parameter(torch.rand(D) + 0.5), nn.Parameter(torch.randn(D) * 0.1)

        def forward(self, h, pad=None):
            mu = h.mean(-1, keepdim=True)
            d = h - mu
            var = (d * d).mean(-1, keepdim=True)
            return d * torch.reciprocal(torch.sqrt(torch.clamp(var, min=1e-5))) * self.w + self.b

    class Conv1dTF(nn.Module):  # tf2onnx's Conv1D: Unsqueeze → NHWC→NCHW Transpose → Conv 1×k → Transpose back → Squeeze, BiasAdd
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(D, D, 1, 3) / (3 * D) ** 0.5)
            self.bias = nn.Parameter(torch.randn(D) * 0.1)

        def forward(self, h, pad=None):
            x = h.unsqueeze(1).permute(0, 3, 1, 2)  # (b, D, 1, t)
            y = F.conv2d(x, self.w.to(h.dtype), padding=(0, 1)).permute(0, 2, 3, 1).squeeze(1)
            return h + F.relu(y + self.bias)


    # fuzz20: issue 27's further spellings (decoder caches, QAT leftovers, Gemm's scalars, ConstantOfShape masks,
    # learned tokens by Expand/Tile, uneven Splits, written-out activations in fp16, audio front ends)

    class KVCacheAttn(nn.Module):  # a decoder step: past_key/past_value inputs (b, heads, P, dh) Concat'ed before the new K/V,
        wants = ("pkey", "pval")  # or (cross) an encoder's cached K/V read alone

        def __init__(self, cross: bool):
            super().__init__()
            self.q, self.k, self.v, self.o = (nn.Linear(D, D) for _ in range(4))
            self.cross = cross

        def forward(self, h, pk, pv):
            b, t = h.shape[0], h.shape[1]

            def heads(z):
                return z.reshape(b, t, 2, D // 2).transpose(1, 2)

            q = heads(self.q(h))
            if self.cross:
                k, v = pk, pv
            else:
                k, v = torch.cat([pk, heads(self.k(h))], 2), torch.cat([pv, heads(self.v(h))], 2)
            a = torch.softmax(q @ k.transpose(-1, -2) * (D // 2) ** -0.5, -1) @ v
            return h + self.o(a.transpose(1, 2).reshape(b, t, D))

    class GemmAlphaBeta(nn.Module):  # torch.addmm(bias, rows, W.t(), beta=0.5, alpha=2): Gemm with alpha/beta ≠ 1 (TorchScript)
        def __init__(self):
            super().__init__()
            self.w, self.b = nn.Parameter(torch.randn(D, D) / D ** 0.5), nn.Parameter(torch.randn(D) * 0.1)

        def forward(self, h, pad=None):
            rows = h.reshape(-1, D)
            z = torch.addmm(self.b, rows, self.w.t(), beta=0.5, alpha=2.0)
            return h + F.relu(z).reshape(h.shape)

    class FakeQuantQAT(nn.Module):  # a QAT export: fake-quantized activation (QuantizeLinear → DequantizeLinear) and
        def __init__(self):      # a per-channel fake-quantized weight (its QDQ on the initializer), then a float Linear
            super().__init__()
            self.w, self.b = nn.Parameter(torch.randn(D, D) / D ** 0.5), nn.Parameter(torch.randn(D) * 0.1)
            self.register_buffer("sc", (self.w.detach().abs().amax(1) / 127).float())
            self.register_buffer("zp", torch.zeros(D, dtype=torch.int32))

        def forward(self, h, pad=None):
            x = torch.fake_quantize_per_tensor_affine(h.float(), 0.05, 0, -128, 127).to(h.dtype)
            w = torch.fake_quantize_per_channel_affine(self.w.float(), self.sc.float(), self.zp, 0, -128, 127).to(h.dtype)
            return h + F.relu(F.linear(x, w, self.b))

    class CausalFullTriu(nn.Module):  # older HF causal masks: torch.full((t, t), finfo.min).triu(1) (ConstantOfShape, Trilu) and
        def __init__(self):         # an all-ones padding mask made by torch.ones (ConstantOfShape of a Shape), (1 − m)·min
            super().__init__()
            self.q, self.k, self.v = nn.Linear(D, D), nn.Linear(D, D), nn.Linear(D, D)

        def forward(self, h, pad=None):
            b, t = h.shape[0], h.shape[1]
            lo = torch.finfo(h.dtype).min
            causal = torch.full((t, t), lo, dtype=h.dtype).triu(1)
            ones = torch.ones(b, t, dtype=h.dtype)
            s = self.q(h) @ self.k(h).transpose(-1, -2) * D ** -0.5 + causal + ((1.0 - ones) * lo)[:, None, :]
            return h + torch.softmax(s, -1) @ self.v(h)

    class TokensTile(nn.Module):  # learned tokens prepended: cls by expand (Expand), registers by repeat (Tile), Concat,
        def __init__(self):      # a LayerNorm + Linear over all, the cls row broadcast back, the extra rows Sliced off
            super().__init__()
            self.cls, self.reg = nn.Parameter(torch.randn(1, 1, D) * 0.3), nn.Parameter(torch.randn(1, 2, D) * 0.3)
            self.ln, self.fc = nn.LayerNorm(D), nn.Linear(D, D)

        def forward(self, h, pad=None):
            b = h.shape[0]
            z = torch.cat([self.cls.expand(b, -1, -1).to(h.dtype), self.reg.repeat(b, 1, 1).to(h.dtype), h], 1)
            z = z + self.fc(self.ln(z))
            return z[:, 3:] + 0.5 * z[:, :1]

    class SplitUneven(nn.Module):  # Split by uneven sizes (3, 5, 8: opset 13's sizes input) and chunk(3) of 16 (6, 6, 4:
        def __init__(self):       # Split-18's num_outputs with a short last piece)
            super().__init__()
            self.l = nn.Linear(D, D)

        def forward(self, h, pad=None):
            a, b, c = torch.split(h, [3, 5, 8], -1)
            p, q, r = self.l(h).chunk(3, -1)
            return h + torch.cat([a * torch.sigmoid(p[..., :3]), b + q[..., :5], torch.tanh(c) + torch.cat([r, r], -1)], -1)

    class ActsWritten(nn.Module):  # Mish (log(1 + exp)), HardSwish, HardSigmoid and GELU (erf) written out, between Linears
        def __init__(self):       # (drawn in fp16 models: the spellings fp16 exporters write)
            super().__init__()
            self.l = nn.ModuleList(nn.Linear(D, D) for _ in range(4))

        def forward(self, h, pad=None):
            x = self.l[0](h)
            x = x * torch.tanh(torch.log(1 + torch.exp(x)))
            x = self.l[1](x)
            x = x * torch.clamp(x + 3, 0, 6) / 6
            x = self.l[2](x)
            x = x * torch.clamp(x / 6 + 0.5, 0, 1)
            x = self.l[3](x)
            return h + 0.5 * x * (1 + torch.erf(x / 2 ** 0.5))

    class DWSepConv1d(nn.Module):  # audio: depthwise Conv1d (groups = channels) then pointwise, BatchNorm, ReLU, over time
        def __init__(self):
            super().__init__()
            self.dw, self.pw = nn.Conv1d(D, D, 5, padding=2, groups=D), nn.Conv1d(D, D, 1)
            self.bn = nn.BatchNorm1d(D)
            with torch.no_grad():
                self.bn.running_mean.normal_(0, 0.2)
                self.bn.running_var.uniform_(0.5, 2.0)

        def forward(self, h, pad=None):
            return h + F.relu(self.bn(self.pw(self.dw(h.transpose(1, 2))))).transpose(1, 2)

    class LogMelWhisper(nn.Module):  # Whisper's front end: |STFT|² by Conv1d, mel MatMul, clamp(min=1e-10).log10(),
        def __init__(self):         # max(x, x.max() − 8) (a rank-0 ReduceMax into Max), (x + 4)/4, a Linear
            super().__init__()
            self.bins = stft_mel(self)
            self.fc = nn.Linear(8, D)

        def forward(self, h, pad=None):
            b = h.shape[0]
            spec = F.conv1d(h.reshape(b, 1, -1), self.ker.to(h.dtype), stride=D)
            power = spec[:, : self.bins] ** 2 + spec[:, self.bins:] ** 2
            lg = torch.clamp(power.transpose(1, 2) @ self.mel.to(h.dtype), min=1e-10).log10()
            lg = torch.maximum(lg, lg.max() - 8.0)
            return h + self.fc((lg + 4.0) / 4.0)

    # --- fuzz21: Llama/Gemma-family decoder spellings, Conformer's convolution module, static caches, fp16 −inf masks
    class RMSOffset(nn.Module):  # Gemma's RMSNorm: float32 moments, x·rsqrt(mean(x²) + ε)·(1 + γ) (γ learned around 0), cast back
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(D) * 0.2)
            self.fc = nn.Linear(D, D)

        def forward(self, h, pad=None):
            x = h.float()
            x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
            return h + self.fc((x * (1.0 + self.w.float())).to(h.dtype))

    class RMSOffsetFp16(nn.Module):  # the same computed in float16 itself (no upcast): ε = 1e-6 is an fp16 subnormal
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(D) * 0.2)
            self.fc = nn.Linear(D, D)

        def forward(self, h, pad=None):
            var = (h * h).mean(-1, keepdim=True)
            return h + self.fc(h / torch.sqrt(var + 1e-6) * (1 + self.w))

    def _rotate_half(x):
        half = x.shape[-1] // 2
        return torch.cat((-x[..., half:], x[..., :half]), -1)

    class RotaryLlama(nn.Module):  # Llama's rotary: cos/sin caches Gathered by position ids (arange expanded to the batch),
        def __init__(self, kv_heads: int = 4):  # unsqueezed over heads; grouped-query attention when kv_heads < 4 (repeat_kv:
            super().__init__()                    # Expand of a new axis, Reshape); causal mask by finfo.min; o_proj
            self.nh, self.kvh, self.dh = 4, kv_heads, D // 4
            self.q = nn.Linear(D, D, bias=False)
            self.k, self.v = nn.Linear(D, kv_heads * self.dh, bias=False), nn.Linear(D, kv_heads * self.dh, bias=False)
            self.o = nn.Linear(D, D, bias=False)
            inv = 1.0 / (10000 ** (torch.arange(0, self.dh, 2, dtype=torch.float32) / self.dh))
            f = torch.outer(torch.arange(64, dtype=torch.float32), inv)
            emb = torch.cat((f, f), -1)
            self.register_buffer("cos_cached", emb.cos())
            self.register_buffer("sin_cached", emb.sin())

        def forward(self, h, pad=None):
            b, t, _ = h.shape
            pos = torch.arange(t, device=h.device).unsqueeze(0).expand(b, t)
            cos, sin = self.cos_cached[pos].to(h.dtype).unsqueeze(1), self.sin_cached[pos].to(h.dtype).unsqueeze(1)
            q = self.q(h).view(b, t, self.nh, self.dh).transpose(1, 2)
            k = self.k(h).view(b, t, self.kvh, self.dh).transpose(1, 2)
            v = self.v(h).view(b, t, self.kvh, self.dh).transpose(1, 2)
            q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
            if self.kvh != self.nh:  # repeat_kv
                r = self.nh // self.kvh
                k = k[:, :, None].expand(b, self.kvh, r, t, self.dh).reshape(b, self.nh, t, self.dh)
                v = v[:, :, None].expand(b, self.kvh, r, t, self.dh).reshape(b, self.nh, t, self.dh)
            sc = q @ k.transpose(2, 3) / math.sqrt(self.dh)
            causal = torch.full((t, t), torch.finfo(h.dtype).min, dtype=h.dtype).triu(1)
            a = torch.softmax((sc + causal).float(), -1).to(h.dtype) @ v
            return h + self.o(a.transpose(1, 2).reshape(b, t, D))

    class ConformerConv(nn.Module):  # Conformer's convolution module: LayerNorm, pointwise Conv1d to 2D, GLU over channels
        def __init__(self):          # (Split + Sigmoid + Mul), depthwise Conv1d k = 7, BatchNorm1d, Swish, pointwise Conv1d
            super().__init__()
            self.ln = nn.LayerNorm(D)
            self.pw1, self.dw, self.pw2 = nn.Conv1d(D, 2 * D, 1), nn.Conv1d(D, D, 7, padding=3, groups=D), nn.Conv1d(D, D, 1)
            self.bn = nn.BatchNorm1d(D)
            with torch.no_grad():
                self.bn.running_mean.normal_(0, 0.2)
                self.bn.running_var.uniform_(0.5, 2.0)

        def forward(self, h, pad=None):
            x = F.glu(self.pw1(self.ln(h).transpose(1, 2)), dim=1)
            return h + self.pw2(F.silu(self.bn(self.dw(x)))).transpose(1, 2)

    class StaticCacheAttn(nn.Module):  # HF's StaticCache: keys/values written into a fixed (b, heads, 16, dh) buffer by
        def __init__(self):           # index_copy at the cache positions (ScatterND / ScatterElements), attention over every
            super().__init__()        # slot with the unwritten ones masked by Where(finfo.min)
            self.qkv, self.o = nn.Linear(D, 3 * D), nn.Linear(D, D)

        def forward(self, h, pad=None):
            b, t, _ = h.shape
            q, k, v = self.qkv(h).reshape(b, t, 3, 2, D // 2).permute(2, 0, 3, 1, 4)
            pos = torch.arange(t, device=h.device)
            kc = torch.zeros(b, 2, 16, D // 2, dtype=h.dtype).index_copy(2, pos, k)
            vc = torch.zeros(b, 2, 16, D // 2, dtype=h.dtype).index_copy(2, pos, v)
            sc = q @ kc.transpose(2, 3) * (D // 2) ** -0.5
            unwritten = torch.arange(16, device=h.device)[None, :] > pos[:, None]  # causal over the written slots
            sc = torch.where(unwritten, torch.tensor(torch.finfo(h.dtype).min, dtype=h.dtype), sc)
            a = torch.softmax(sc, -1) @ vc
            return h + self.o(a.transpose(1, 2).reshape(b, t, D))

    class NegInfMaskFp16(nn.Module):  # attention whose padded keys are filled with −inf by masked_fill (Where with an −inf
        def __init__(self):          # constant; ``neginf_mask_fp16`` always in half), softmax; the padding from the bool mask
            super().__init__()
            self.qkv, self.o = nn.Linear(D, 3 * D), nn.Linear(D, D)

        def forward(self, h, pad=None):
            b, t, _ = h.shape
            q, k, v = self.qkv(h).reshape(b, t, 3, 2, D // 2).permute(2, 0, 3, 1, 4)
            sc = q @ k.transpose(2, 3) * (D // 2) ** -0.5
            if pad is not None:
                sc = sc.masked_fill(pad[:, None, None, :], float("-inf"))
            return h + self.o((torch.softmax(sc, -1) @ v).transpose(1, 2).reshape(b, t, D))

    class TopKGatherDecode(nn.Module):  # a decoder's selection: scores by a Linear, TopK over the positions, the chosen rows
        def __init__(self):            # Gathered (GatherElements of expanded indices), weighted by their softmaxed scores
            super().__init__()
            self.s, self.fc = nn.Linear(D, 1), nn.Linear(D, D)

        def forward(self, h, pad=None):
            sc = self.s(h).squeeze(-1)  # (b, t)
            v, i = torch.topk(sc, 4, -1)
            rows = torch.gather(h, 1, i[..., None].expand(-1, -1, D))  # (b, 4, D)
            pooled = (torch.softmax(v, -1)[..., None] * rows).sum(1, keepdim=True)
            return h + self.fc(pooled)

    seq = {
        "layernorm": lambda: Wrap(nn.LayerNorm(D)), "layernorm_out": LNOut,
        "rmsnorm": lambda: Wrap(nn.RMSNorm(D)), "rmsnorm_out": RMSOut,
        "gelu_erf": lambda: Lin(nn.GELU()), "gelu_tanh": lambda: Lin(nn.GELU("tanh")), "silu": lambda: Lin(nn.SiLU()),
        "mish": lambda: Lin(nn.Mish()), "hardswish": lambda: Lin(nn.Hardswish()),
        "sdpa": lambda: SDPA("none"), "sdpa_causal": lambda: SDPA("causal"), "sdpa_boolmask": lambda: SDPA("bool"),
        "sdpa_addmask": lambda: SDPA("additive"), "attn_written": ManualAttn, "mha": MHA,
        "gru_bi": lambda: RNN("GRU", True), "lstm_bi": lambda: RNN("LSTM", True), "lstm": lambda: RNN("LSTM", False),
        "rnn_tanh": lambda: RNN("RNN", False), "gru_seqfirst_2l": RNNSeqFirst,
        "conv1d_reflect": lambda: Conv1dSeq("reflect"), "conv1d_const": lambda: Conv1dSeq("constant"),
        "einsum": Einsum, "matmul_bcast": MatmulBroadcast, "cumsum_where": CumsumWhere, "split_cat_clamp": SplitCat,
        "reshape_-1": ReshapeFlat, "step_slice": StepSlice, "sort": SortMix, "topk_pad": TopkPad, "index_select": GatherIdx,
        "layernorm_moments": lambda: LNMoments(False), "layernorm_sumsq_recip": lambda: LNMoments(True),
        "rmsnorm_l2": RMSL2, "gelu_tanh_out": lambda: Lin(Fn(gelu_tanh_out)), "gelu_erf_out": lambda: Lin(Fn(gelu_erf_out)),
        "silu_out": lambda: Lin(Fn(lambda x: x * torch.sigmoid(x))),
        "mish_out": lambda: Lin(Fn(lambda x: x * torch.tanh(F.softplus(x)))),
        "hardswish_out": lambda: Lin(Fn(lambda x: x * torch.clamp(x + 3, 0, 6) / 6)),
        "stft_mel_pow": lambda: STFTMel(False), "stft_mel_l2": lambda: STFTMel(True), "reducemax_keep0": MaxKeep0,
        "dfl_seq": DFLSeq,
        "attn_int_mask": IntMaskAttn, "rotary": Rotary, "einsum_attn": EinsumAttn, "where_softmax": WhereSoftmax,
        "embed_positions": EmbedPositions, "loop_recur": LoopRecur,
        "attn_mask_where": lambda: AttnHFMask("where"), "attn_mask_finfo": lambda: AttnHFMask("mul"), "causal_trilu": CausalTrilu,
        "roberta_embed": RobertaEmbed, "masked_mean_pool": MaskedMeanPool, "last_token_pool": LastTokenPool,
        "moe_topk": MoETopK, "ln_fp16_forms": LNFp16Forms,
        "gru_cell_written": GRUCellWritten, "lstm_cell_unrolled": LSTMCellUnrolled, "rmsnorm_mulself": RMSMulSelf,
        "act_mix": ActMix,
        "silu_div_exp": lambda: Lin(Fn(lambda x: x / (1 + torch.exp(-x)))), "gelu_erf_folded": lambda: Lin(Fn(gelu_erf_folded)),
        "softmax_written": SoftmaxWritten, "rmsnorm_pow_sum": RMSPowSum,
        "alibi_attn": lambda: ALiBiAttn(False), "alibi_causal": lambda: ALiBiAttn(True), "relpos_bucket": RelPosBucket,
        "mask_equal_not": MaskEqualNot, "logsoftmax_mix": LogSoftmaxMix, "rotary_interleaved": RotaryInterleaved,
        "swiglu": SwiGLU, "layernorm_max_eps": LNMaxEps, "conv1d_tf": Conv1dTF,
        "kv_cache_attn": lambda: KVCacheAttn(False), "cross_attn_cached": lambda: KVCacheAttn(True),
        "gemm_alpha_beta": GemmAlphaBeta, "fake_quant_qat": FakeQuantQAT, "causal_full_triu": CausalFullTriu,
        "tokens_tile": TokensTile, "split_uneven": SplitUneven, "acts_fp16_out": ActsWritten, "dwsep_conv1d": DWSepConv1d,
        "logmel_whisper": LogMelWhisper,
        "rmsnorm_offset": RMSOffset, "rmsnorm_offset_fp16": RMSOffsetFp16, "rotary_llama": RotaryLlama,
        "gqa_rotary": lambda: RotaryLlama(2), "conformer_conv": ConformerConv, "static_cache_attn": StaticCacheAttn,
        "neginf_mask_fp16": NegInfMaskFp16, "neginf_mask": NegInfMaskFp16, "topk_gather_decode": TopKGatherDecode,
    }

    class ConvBN(nn.Module):
        def __init__(self, groups: int = 1, act=None):
            super().__init__()
            self.c, self.bn, self.act = nn.Conv2d(C, C, 3, 1, 1, groups=groups), nn.BatchNorm2d(C), act or nn.ReLU()

        def forward(self, h, pad=None):
            return self.act(self.bn(self.c(h)))

    class GNOut(nn.Module):  # GroupNorm written out
        def __init__(self):
            super().__init__()
            self.w, self.b = nn.Parameter(torch.rand(1, C, 1, 1) + 0.5), nn.Parameter(torch.randn(1, C, 1, 1) * 0.1)

        def forward(self, h, pad=None):
            b, c, y, x = h.shape
            g = h.reshape(b, 2, -1)
            g = (g - g.mean(-1, keepdim=True)) / torch.sqrt(g.var(-1, keepdim=True, unbiased=False) + 1e-5)
            return g.reshape(b, c, y, x) * self.w + self.b

    class Down(nn.Module):  # pool, then interpolate back
        def __init__(self, pool: str, mode: str, align: bool | None):
            super().__init__()
            self.pool, self.mode, self.align = pool, mode, align

        def forward(self, h, pad=None):
            y, x = h.shape[-2:]
            if self.pool == "max_ceil":
                p = F.max_pool2d(h, 3, 2, ceil_mode=True)
            elif self.pool == "avg_ceil":
                p = F.avg_pool2d(h, 3, 2, ceil_mode=True, count_include_pad=False)
            else:
                p = F.adaptive_avg_pool2d(h, (4, 4))
            return h + F.interpolate(p, size=(y, x), mode=self.mode, align_corners=self.align)

    class UpTrans(nn.Module):
        def __init__(self):
            super().__init__()
            self.t = nn.ConvTranspose2d(C, C, 2, 2)

        def forward(self, h, pad=None):
            return F.avg_pool2d(self.t(h), 2) + h

    class Upsample(nn.Module):
        def __init__(self, mode: str):
            super().__init__()
            self.u = nn.Upsample(scale_factor=2, mode=mode, **({} if mode == "nearest" else {"align_corners": True}))

        def forward(self, h, pad=None):
            return F.max_pool2d(self.u(h), 2)

    class Shuffle(nn.Module):
        def __init__(self):
            super().__init__()
            self.c = nn.Conv2d(C, 4 * C, 1)

        def forward(self, h, pad=None):
            return F.avg_pool2d(F.pixel_shuffle(self.c(h), 2), 2)

    class SE(nn.Module):  # global pooling, gate
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Conv2d(C, 4, 1), nn.Conv2d(4, C, 1)

        def forward(self, h, pad=None):
            return h * torch.sigmoid(self.b(F.silu(self.a(h.mean((2, 3), keepdim=True)))))

    class ReflectConv(nn.Module):
        def __init__(self):
            super().__init__()
            self.c = nn.Conv2d(C, C, 3)

        def forward(self, h, pad=None):
            return self.c(F.pad(h, (1, 1, 1, 1), mode="reflect"))

    class Conv3d(nn.Module):
        def __init__(self):
            super().__init__()
            self.c = nn.Conv3d(2, 2, 3, 1, 1)

        def forward(self, h, pad=None):
            b, c, y, x = h.shape
            return self.c(h.reshape(b, 2, c // 2, y, x)).reshape(b, c, y, x)

    class ChannelGather(nn.Module):
        def forward(self, h, pad=None):
            return h[:, torch.tensor([1, 0, 3, 2, 5, 4, 7, 6])] * torch.clamp(h, min=0.0)

    class FlattenMix(nn.Module):
        def __init__(self):
            super().__init__()
            self.l = nn.Linear(HW * HW // 16, HW * HW // 16)

        def forward(self, h, pad=None):
            b, c, y, x = h.shape
            p = F.avg_pool2d(h, 4).flatten(2)
            return h + F.interpolate(self.l(p).reshape(b, c, y // 4, x // 4), scale_factor=4.0, mode="nearest")


    class INOut(nn.Module):  # InstanceNorm written out with Reshape (b, c, -1)
        def __init__(self):
            super().__init__()
            self.w, self.b = nn.Parameter(torch.rand(1, C, 1, 1) + 0.5), nn.Parameter(torch.randn(1, C, 1, 1) * 0.1)

        def forward(self, h, pad=None):
            b, c, y, x = h.shape
            g = h.reshape(b, c, -1)
            mu = g.mean(-1, keepdim=True)
            var = (g * g).mean(-1, keepdim=True) - mu * mu
            return ((g - mu) / torch.sqrt(var + 1e-5)).reshape(b, c, y, x) * self.w + self.b

    class ViTPatch(nn.Module):  # patch Conv → Reshape → Transpose, class token Concat, position Add, back to an image
        def __init__(self):
            super().__init__()
            self.p = nn.Conv2d(C, 2 * C, 4, 4)
            self.cls = nn.Parameter(torch.randn(1, 1, 2 * C) * 0.1)
            self.pos = nn.Parameter(torch.randn(1, 1 + (HW // 4) ** 2, 2 * C) * 0.1)
            self.ln, self.fc = nn.LayerNorm(2 * C), nn.Linear(2 * C, 2 * C)
            self.up = nn.ConvTranspose2d(2 * C, C, 4, 4)

        def forward(self, h, pad=None):
            b = h.shape[0]
            t = self.p(h.to(torch.float32)).to(h.dtype)  # the Cast at a ViT's input
            g = t.shape[-1]
            tok = torch.cat([self.cls.expand(b, -1, -1).to(h.dtype), t.reshape(b, 2 * C, -1).transpose(1, 2)], 1) + self.pos
            tok = tok + self.fc(F.gelu(self.ln(tok)))
            grid = tok[:, 1:].transpose(1, 2).reshape(b, 2 * C, g, g) + tok[:, :1].transpose(1, 2)[..., None]
            return h + self.up(grid)

    class DFLImg(nn.Module):  # YOLOv8's DFL: view (b, 4, 16, a), transpose, Softmax over bins, 1×1 Conv with arange
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Conv2d(C, 4 * 16, 1), nn.Conv2d(4, C, 1)
            self.dfl = nn.Conv2d(16, 1, 1, bias=False).requires_grad_(False)
            self.dfl.weight.data[:] = torch.arange(16, dtype=torch.float32).view(1, 16, 1, 1)

        def forward(self, h, pad=None):
            b, _, y, x = h.shape
            d = self.a(h).view(b, 4, 16, y * x).transpose(2, 1).softmax(1)
            return h + self.b(self.dfl(d).view(b, 4, y, x) / 8)

    class LNChannelsFirst(nn.Module):  # ConvNeXt's LayerNorm2d: moments over axis 1 of NCHW, no Transpose
        def __init__(self):
            super().__init__()
            self.w, self.b = nn.Parameter(torch.rand(C) + 0.5), nn.Parameter(torch.randn(C) * 0.1)
            self.c = nn.Conv2d(C, C, 3, 1, 1, groups=C)

        def forward(self, h, pad=None):
            x = self.c(h)
            u = x.mean(1, keepdim=True)
            s = (x - u).pow(2).mean(1, keepdim=True)
            x = (x - u) / torch.sqrt(s + 1e-6)
            return h + self.w[:, None, None] * x + self.b[:, None, None]

    class LNTransposed(nn.Module):  # LayerNorm over channels: Transpose to NHWC, LayerNorm, Linear, Transpose back
        def __init__(self):
            super().__init__()
            self.ln, self.fc = nn.LayerNorm(C), nn.Linear(C, C)

        def forward(self, h, pad=None):
            return h + self.fc(self.ln(h.permute(0, 2, 3, 1))).permute(0, 3, 1, 2)

    class ResizeDecoder(nn.Module):  # image-to-image: stride-2 encoder, Resize ×2 (bilinear), skip Concat, 1×1 fuse, Sigmoid gate
        def __init__(self):
            super().__init__()
            self.down, self.mid = nn.Conv2d(C, 2 * C, 3, 2, 1), nn.Conv2d(2 * C, 2 * C, 3, 1, 1)
            self.fuse = nn.Conv2d(3 * C, C, 1)

        def forward(self, h, pad=None):
            z = self.mid(F.relu(self.down(h)))
            up = F.interpolate(F.relu(z), scale_factor=2.0, mode="bilinear", align_corners=False)
            return h * torch.sigmoid(self.fuse(torch.cat([h, up], 1)))

    class ViTBlock(nn.Module):  # a ViT: Cast → patch Conv → tokens, LayerNorm, attention, GELU MLP, back to the image
        def __init__(self):
            super().__init__()
            w = 2 * C
            self.p = nn.Conv2d(C, w, 4, 4)
            self.pos = nn.Parameter(torch.randn(1, (HW // 4) ** 2, w) * 0.1)
            self.ln1, self.ln2 = nn.LayerNorm(w), nn.LayerNorm(w)
            self.qkv, self.o = nn.Linear(w, 3 * w), nn.Linear(w, w)
            self.fc1, self.fc2 = nn.Linear(w, 2 * w), nn.Linear(2 * w, w)
            self.up = nn.ConvTranspose2d(w, C, 4, 4)

        def forward(self, h, pad=None):
            b, w = h.shape[0], 2 * C
            t = self.p(h.to(self.p.weight.dtype))  # HF's pixel_values.to(projection dtype)
            g = t.shape[-1]
            tok = t.flatten(2).transpose(1, 2) + self.pos
            q, k, v = self.qkv(self.ln1(tok)).reshape(b, -1, 3, 2, w // 2).permute(2, 0, 3, 1, 4)
            a = torch.softmax(q @ k.transpose(-1, -2) * (w // 2) ** -0.5, -1) @ v
            tok = tok + self.o(a.transpose(1, 2).reshape(b, -1, w))
            tok = tok + self.fc2(F.gelu(self.fc1(self.ln2(tok))))
            return h + self.up(tok.transpose(1, 2).reshape(b, w, g, g))


    class ConvVariants(nn.Module):  # ConvTranspose with output_padding and groups, a dilated Conv, TF-style asymmetric pad
        def __init__(self):
            super().__init__()
            self.t = nn.ConvTranspose2d(C, C, 3, 2, 1, output_padding=1, groups=2)
            self.d = nn.Conv2d(C, C, 3, padding=2, dilation=2)
            self.s = nn.Conv2d(C, C, 3, 2)
            self.a = nn.PReLU(C)  # per-channel slopes

        def forward(self, h, pad=None):
            up = F.avg_pool2d(self.t(h), 2)  # (b, C, 2H, 2W) → back
            down = self.s(F.pad(h, (0, 1, 0, 1)))  # "SAME" with stride 2 as TF writes it: pad right/bottom only
            return h + self.a(self.d(up)) + F.interpolate(down, size=h.shape[-2:], mode="nearest")

    class GNChannels(nn.Module):  # GroupNorm (TorchScript < 18: Reshape → InstanceNormalization → Reshape → Mul/Add), ELU/SELU
        def __init__(self):
            super().__init__()
            self.g, self.c = nn.GroupNorm(4, C), nn.Conv2d(C, C, 1)

        def forward(self, h, pad=None):
            z = self.g(h)
            return h + self.c(F.elu(z) + F.selu(z))

    class Conv1dDilated(nn.Module):  # a dilated, strided Conv1d over a flattened row, back by ConvTranspose1d
        def __init__(self):
            super().__init__()
            self.c = nn.Conv1d(C, C, 3, stride=2, padding=2, dilation=2)
            self.t = nn.ConvTranspose1d(C, C, 2, 2)

        def forward(self, h, pad=None):
            b, c, y, x = h.shape
            r = self.t(F.relu(self.c(h.reshape(b, c, y * x))))
            return h + r.reshape(b, c, y, x)

    class GN5D(nn.Module):  # GroupNorm by moments over (C/G, H, W) of a 5-D view, as Keras/TF exporters write it, then SiLU
        def __init__(self):
            super().__init__()
            self.w, self.b = nn.Parameter(torch.rand(1, C, 1, 1) + 0.5), nn.Parameter(torch.randn(1, C, 1, 1) * 0.1)
            self.c = nn.Conv2d(C, C, 3, 1, 1)

        def forward(self, h, pad=None):
            b, c, y, x = h.shape
            g = self.c(h).reshape(b, 4, c // 4, y, x)
            mu = g.mean((2, 3, 4), keepdim=True)
            var = ((g - mu) ** 2).mean((2, 3, 4), keepdim=True)
            z = ((g - mu) / torch.sqrt(var + 1e-5)).reshape(b, c, y, x) * self.w + self.b
            return h + z * torch.sigmoid(z)


    class NHWCConvs(nn.Module):  # Keras through tf2onnx: NHWC activations, Transpose around every Conv, BiasAdd, Relu6 (Clip)
        def __init__(self):
            super().__init__()
            self.c1, self.c2 = nn.Conv2d(C, C, 3, 1, 1, bias=False), nn.Conv2d(C, C, 3, 1, 1, bias=False)
            self.b1, self.b2 = nn.Parameter(torch.randn(C) * 0.1), nn.Parameter(torch.randn(C) * 0.1)

        def forward(self, h, pad=None):
            x = h.permute(0, 2, 3, 1)  # NHWC
            x = torch.clamp(self.c1(x.permute(0, 3, 1, 2)).permute(0, 2, 3, 1) + self.b1, 0.0, 6.0)
            x = torch.clamp(self.c2(x.permute(0, 3, 1, 2)).permute(0, 2, 3, 1) + self.b2, 0.0, 6.0)
            return h + x.permute(0, 3, 1, 2)

    class UnshuffleHead(nn.Module):  # PixelUnshuffle (space to depth) → Conv → PixelShuffle (depth to space)
        def __init__(self):
            super().__init__()
            self.c = nn.Conv2d(4 * C, 4 * C, 3, 1, 1)

        def forward(self, h, pad=None):
            return h + F.pixel_shuffle(F.relu(self.c(F.pixel_unshuffle(h, 2))), 2)

    class ResizeScalesSizes(nn.Module):  # a stride-2 Conv, ConvTranspose back, Resize by sizes (bilinear) and by scales (0.5, nearest)
        def __init__(self):
            super().__init__()
            self.d, self.t = nn.Conv2d(C, 2 * C, 3, 2, 1), nn.ConvTranspose2d(2 * C, C, 2, 2)

        def forward(self, h, pad=None):
            z = F.relu(self.d(h))
            a = F.interpolate(z, size=h.shape[-2:], mode="bilinear", align_corners=False)[:, :C]
            small = F.interpolate(h, scale_factor=0.5, mode="nearest")
            return h + self.t(z + F.pad(small, (0, 0, 0, 0, 0, C))) + a


    class INReduceHW(nn.Module):  # InstanceNorm written as ReduceMean over (H, W) (no Reshape), centred variance, affine, LeakyReLU
        def __init__(self):
            super().__init__()
            self.w, self.b = nn.Parameter(torch.rand(1, C, 1, 1) + 0.5), nn.Parameter(torch.randn(1, C, 1, 1) * 0.1)
            self.c = nn.Conv2d(C, C, 3, 1, 1)

        def forward(self, h, pad=None):
            mu = h.mean((2, 3), keepdim=True)
            var = (h - mu).pow(2).mean((2, 3), keepdim=True)
            return h + self.c(F.leaky_relu((h - mu) / torch.sqrt(var + 1e-5) * self.w + self.b, 0.2))

    class RowColLSTM(nn.Module):  # kraken/ocropy's 2-D LSTM: rows as sequences (permute, reshape (b·H, W, C)), a bidirectional
        def __init__(self):      # LSTM, back; then the columns the same way
            super().__init__()
            self.r = nn.LSTM(C, C // 2, batch_first=True, bidirectional=True)
            self.c = nn.LSTM(C, C // 2, batch_first=True, bidirectional=True)

        def forward(self, h, pad=None):
            b, c, y, x = h.shape
            r = self.r(h.permute(0, 2, 3, 1).reshape(b * y, x, c))[0].reshape(b, y, x, c)
            col = self.c(r.permute(0, 2, 1, 3).reshape(b * x, y, c))[0].reshape(b, x, y, c)
            return h + col.permute(0, 3, 2, 1)

    class SwinWindow(nn.Module):  # Swin: cyclic shift by roll (Slice + Concat), window partition (Reshape/Transpose), window
        def __init__(self):      # attention with a relative position bias Gathered from a learned table, merged, shifted back
            super().__init__()
            ws = self.ws = 4
            self.qkv, self.o = nn.Linear(C, 3 * C), nn.Linear(C, C)
            self.table = nn.Parameter(torch.randn((2 * ws - 1) ** 2, 2) * 0.5)
            yy, xx = torch.meshgrid(torch.arange(ws), torch.arange(ws), indexing="ij")
            co = torch.stack([yy.flatten(), xx.flatten()])
            rel = (co[:, :, None] - co[:, None, :]).permute(1, 2, 0) + (ws - 1)
            self.register_buffer("index", (rel[..., 0] * (2 * ws - 1) + rel[..., 1]).long())

        def forward(self, h, pad=None):
            b, c, hh, ww = h.shape
            ws, n = self.ws, self.ws * self.ws
            x = torch.roll(h.permute(0, 2, 3, 1), (-2, -2), (1, 2))
            win = x.reshape(b, hh // ws, ws, ww // ws, ws, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, n, c)
            m = win.shape[0]
            q, k, v = self.qkv(win).reshape(m, n, 3, 2, c // 2).permute(2, 0, 3, 1, 4)
            bias = self.table[self.index.reshape(-1)].reshape(n, n, 2).permute(2, 0, 1)[None].to(h.dtype)
            a = torch.softmax(q @ k.transpose(-1, -2) * (c // 2) ** -0.5 + bias, -1) @ v
            out = self.o(a.transpose(1, 2).reshape(m, n, c))
            out = out.reshape(b, hh // ws, ww // ws, ws, ws, c).permute(0, 1, 3, 2, 4, 5).reshape(b, hh, ww, c)
            return h + torch.roll(out, (2, 2), (1, 2)).permute(0, 3, 1, 2)

    # --- fuzz21: ConvNeXt, MobileViT, EfficientFormer (pooling mixer), a U-Net concat skip, CenterNet's MaxPool NMS
    class ConvNeXtBlock(nn.Module):  # depthwise 7×7, permute to channels-last, LayerNorm over C, Linear ×4, GELU, Linear,
        def __init__(self):         # layer scale γ (1e-1 here, 1e-6 at init in the paper), permute back, residual
            super().__init__()
            self.dw = nn.Conv2d(C, C, 7, padding=3, groups=C)
            self.ln, self.p1, self.p2 = nn.LayerNorm(C, eps=1e-6), nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
            self.gamma = nn.Parameter(torch.rand(C) * 0.2 + 0.05)

        def forward(self, h, pad=None):
            x = self.dw(h).permute(0, 2, 3, 1)
            x = self.gamma * self.p2(F.gelu(self.p1(self.ln(x))))
            return h + x.permute(0, 3, 1, 2)

    class ConvNeXtV2GRN(nn.Module):  # ConvNeXt-V2: the V1 block with Global Response Normalization after the GELU:
        def __init__(self):             # Gx = ‖x‖₂ over (H, W) (ReduceL2 or Pow/ReduceSum/Sqrt), Nx = Gx / (mean_C(Gx) + ε),
            super().__init__()          # γ·(x·Nx) + β + x, channels-last
            self.dw = nn.Conv2d(C, C, 7, padding=3, groups=C)
            self.ln, self.p1, self.p2 = nn.LayerNorm(C, eps=1e-6), nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
            self.g, self.b = nn.Parameter(torch.rand(1, 1, 1, 4 * C) * 0.5), nn.Parameter(torch.randn(1, 1, 1, 4 * C) * 0.1)

        def forward(self, h, pad=None):
            x = F.gelu(self.p1(self.ln(self.dw(h).permute(0, 2, 3, 1))))
            gx = torch.norm(x, p=2, dim=(1, 2), keepdim=True)
            nx = gx / (gx.mean(dim=-1, keepdim=True) + 1e-6)
            x = self.g * (x * nx) + self.b + x
            return h + self.p2(x).permute(0, 3, 1, 2)

    class MobileViTBlock(nn.Module):  # local 3×3 + 1×1 convs, unfold into 2×2 patches (Reshape/Transpose to (b·4, N, d)),
        def __init__(self):          # a pre-norm transformer layer (LayerNorm, attention, SiLU MLP), fold back, 1×1 conv,
            super().__init__()       # Concat with the input, a 3×3 fusion conv
            d = 12
            self.d = d
            self.local = nn.Sequential(nn.Conv2d(C, C, 3, 1, 1), nn.BatchNorm2d(C), nn.SiLU(), nn.Conv2d(C, d, 1, bias=False))
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.f1, self.f2 = nn.Linear(d, 2 * d), nn.Linear(2 * d, d)
            self.proj = nn.Sequential(nn.Conv2d(d, C, 1, bias=False), nn.BatchNorm2d(C), nn.SiLU())
            self.fuse = nn.Conv2d(2 * C, C, 3, 1, 1)

        def forward(self, h, pad=None):
            b, c, hh, ww = h.shape
            d, p = self.d, 2
            x = self.local(h)  # (b, d, H, W)
            x = x.reshape(b * d * (hh // p), p, ww // p, p).transpose(1, 2).reshape(b, d, -1, p * p).permute(0, 3, 2, 1)
            x = x.reshape(b * p * p, -1, d)  # (b·4, N, d)
            n = x.shape[1]
            q, k, v = self.qkv(self.ln1(x)).reshape(-1, n, 3, d).permute(2, 0, 1, 3)
            x = x + self.o(torch.softmax(q @ k.transpose(1, 2) * d ** -0.5, -1) @ v)
            x = x + self.f2(F.silu(self.f1(self.ln2(x))))
            x = x.reshape(b, p * p, n, d).permute(0, 3, 2, 1).reshape(b * d * (hh // p), ww // p, p, p)
            x = x.transpose(1, 2).reshape(b, d, hh, ww)
            return h + self.fuse(torch.cat([h, self.proj(x)], 1))

    class PoolMixer(nn.Module):  # EfficientFormer/PoolFormer's Meta4D: x + γ1·(AvgPool 3×3 (count_include_pad=False) − x),
        def __init__(self):     # then x + γ2·Conv-MLP (1×1, BatchNorm, GELU, 1×1, BatchNorm)
            super().__init__()
            self.g1, self.g2 = nn.Parameter(torch.rand(C, 1, 1) * 0.5 + 0.1), nn.Parameter(torch.rand(C, 1, 1) * 0.5 + 0.1)
            self.m = nn.Sequential(nn.Conv2d(C, 2 * C, 1), nn.BatchNorm2d(2 * C), nn.GELU(), nn.Conv2d(2 * C, C, 1), nn.BatchNorm2d(C))

        def forward(self, h, pad=None):
            x = h + self.g1 * (F.avg_pool2d(h, 3, 1, 1, count_include_pad=False) - h)
            return x + self.g2 * self.m(x)

    class UNetSkip(nn.Module):  # a U-Net level: down by MaxPool, two 3×3 convs, up by ConvTranspose ×2 and by Resize (bilinear),
        def __init__(self):    # Concat with the encoder's features along channels, a 3×3 conv reducing them
            super().__init__()
            self.e = nn.Sequential(nn.Conv2d(C, C, 3, 1, 1), nn.ReLU())
            self.m = nn.Sequential(nn.Conv2d(C, 2 * C, 3, 1, 1), nn.ReLU(), nn.Conv2d(2 * C, 2 * C, 3, 1, 1), nn.ReLU())
            self.up = nn.ConvTranspose2d(2 * C, C, 2, 2)
            self.red = nn.Conv2d(3 * C + C, C, 3, 1, 1)
            self.side = nn.Conv2d(2 * C, C, 1)

        def forward(self, h, pad=None):
            e = self.e(h)
            m = self.m(F.max_pool2d(e, 2))
            r = F.interpolate(self.side(m), scale_factor=2.0, mode="bilinear", align_corners=False)
            return h + self.red(torch.cat([e, self.up(m), r, h], 1))

    class CenterNetNMS(nn.Module):  # CenterNet's heatmap head: sigmoid heatmap, a 3×3 MaxPool (stride 1), keep = Equal(pool, heat)
        def __init__(self):        # cast to float, the peaks' scores; then read on by a conv
            super().__init__()
            self.hm, self.c = nn.Conv2d(C, C, 3, 1, 1), nn.Conv2d(C, C, 1)

        def forward(self, h, pad=None):
            heat = torch.sigmoid(self.hm(h))
            keep = (F.max_pool2d(heat, 3, 1, 1) == heat).to(heat.dtype)
            return h + self.c(heat * keep)

    img = {
        "conv_bn_relu": ConvBN, "depthwise_hswish": lambda: ConvBN(C, nn.Hardswish()), "conv_gelu": lambda: ConvBN(1, nn.GELU()),
        "groupnorm": lambda: Wrap(nn.GroupNorm(2, C)), "groupnorm_out": GNOut,
        "maxpool_ceil_bilinear": lambda: Down("max_ceil", "bilinear", False),
        "avgpool_ceil_nearest": lambda: Down("avg_ceil", "nearest", None),
        "adaptive_bilinear_ac": lambda: Down("adaptive", "bilinear", True),
        "convtranspose": UpTrans, "upsample_nearest": lambda: Upsample("nearest"),
        "upsample_bilinear_ac": lambda: Upsample("bilinear"), "pixel_shuffle": Shuffle, "se_global": SE,
        "reflect_conv": ReflectConv, "conv3d": Conv3d, "channel_gather_clamp": ChannelGather, "flatten_linear": FlattenMix,
        "mish_img": lambda: Wrap(nn.Mish()),
        "instancenorm_out": INOut, "vit_patch_cls": ViTPatch, "dfl_yolo": DFLImg,
        "layernorm_axis1": LNChannelsFirst, "layernorm_transposed": LNTransposed, "resize_decoder": ResizeDecoder,
        "vit_fp16": ViTBlock,
        "conv_variants": ConvVariants, "groupnorm_elu": GNChannels, "conv1d_dilated": Conv1dDilated,
        "groupnorm_5d": GN5D,
        "nhwc_convs": NHWCConvs, "unshuffle_head": UnshuffleHead, "resize_scales_sizes": ResizeScalesSizes,
        "instnorm_reduce_hw": INReduceHW, "lstm_2d_rowcol": RowColLSTM, "swin_window": SwinWindow,
        "convnext_block": ConvNeXtBlock, "convnextv2_grn": ConvNeXtV2GRN, "mobilevit_block": MobileViTBlock, "poolformer_mixer": PoolMixer,
        "unet_concat_skip": UNetSkip, "centernet_maxpool_nms": CenterNetNMS,
    }
    return {"seq": seq, "img": img}


def _composite(spec: "ModuleSpec"):
    """The torch module a spec names (seeded: the same spec gives the same weights)."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    torch.manual_seed(spec.seed)
    table = _blocks()[spec.domain]

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList(table[b]() for b in spec.blocks)
            if spec.domain == "seq":
                self.inp = nn.Linear(D, D)
                self.emb = nn.Embedding(VOCAB, D) if "ids" in spec.inputs else None
                self.head = nn.Linear(D, 6)
            else:
                self.inp = nn.Conv2d(3, C, 3, 1, 1)
                self.head = nn.Conv2d(C, 4, 1)
                # image-to-image: a super-resolution head (Conv → DepthToSpace ×2 + the input upsampled, Clip to [0, 1])
                self.sr = nn.Conv2d(C, 12, 3, 1, 1) if "image" in spec.outputs else None

        def forward(self, *args):
            feed = dict(zip(spec.inputs, args))
            pad = None
            x = feed["x"]
            if spec.extra.get("x32"):  # an fp16 model fed float32: a Cast at the input
                x = x.to(self.inp.weight.dtype)
            if spec.domain == "seq":
                h = self.inp(x)
                if self.emb is not None:
                    h = h + self.emb(feed["ids"])
                if "mask" in feed:
                    pad = feed["mask"] < 0.5
                    pad = pad & (torch.arange(pad.shape[1]) > 0)  # never a fully padded row
            else:
                h = self.inp(x)
            for blk in self.blocks:
                if hasattr(blk, "wants"):  # the int64 inputs it reads (HF's attention_mask, token_type_ids)
                    h = blk(h, *(feed[k] for k in blk.wants))
                else:
                    h = blk(h, feed.get("amask") if getattr(blk, "int_mask", False) else pad)
            y = self.head(h)
            if pad is not None:
                y = y.masked_fill(pad[..., None], 0.0)
            outs = [y]
            for extra in spec.outputs[1:]:
                red = y.mean(1) if spec.domain == "seq" else y.mean((2, 3))
                if extra == "argmax":
                    outs.append(y.argmax(-1 if spec.domain == "seq" else 1))
                elif extra == "topk":
                    v, i = torch.topk(red, 2, -1)
                    outs += [v, i]
                elif extra == "bool":
                    outs.append(red > 0)
                elif extra == "pooled":
                    outs.append(F.softmax(red, -1))
                elif extra == "count":
                    outs.append((y > 0).sum(-1).to(torch.int32))
                elif extra == "scalar":  # a rank-0 output (a loss-like summary)
                    outs.append(y.abs().mean())
                elif extra == "kp_argmax":  # landmarks: ArgMax over each flattened heatmap, (x, y) by Mod/Div
                    idx = y.flatten(2).argmax(-1)
                    outs.append(torch.stack([idx % y.shape[-1], torch.div(idx, y.shape[-1], rounding_mode="floor")], -1))
                elif extra == "kp_soft":  # soft-argmax: Softmax over the flattened heatmap, coordinate grids' weighted sums
                    hh, ww = y.shape[-2:]
                    p = F.softmax(y.flatten(2) * 4, -1)
                    gx = (torch.arange(ww, dtype=torch.float32) / ww).repeat(hh).to(y.dtype)  # Range has no float16
                    gy = (torch.arange(hh, dtype=torch.float32) / hh).repeat_interleave(ww).to(y.dtype)
                    outs.append(torch.stack([(p * gx).sum(-1), (p * gy).sum(-1)], -1))
                elif extra == "image":  # super-resolution: DepthToSpace, residual add of the input, Clip to [0, 1]
                    up = F.interpolate(feed["x"].to(h.dtype) * 0.5 + 0.5, scale_factor=2.0, mode="nearest")
                    outs.append(torch.clamp(F.pixel_shuffle(self.sr(h), 2) + up, 0.0, 1.0))
            return tuple(outs)

    return Net().eval()


@dataclass
class ModuleSpec:
    """One drawn module: its blocks, inputs/outputs, exporter, opset, dtype and axes."""

    index: int
    seed: int
    domain: str
    blocks: list[str]
    inputs: list[str]
    outputs: list[str]
    exporter: str
    opset: int
    fp16: bool
    dynamic_seq: bool
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        tag = "fp16." if self.fp16 else ""
        return f"m{self.index:03d}.{self.domain}.{self.exporter}{self.opset}.{tag}{'+'.join(self.blocks)}"[:180]

    def feeds(self, n: int, seed: int) -> list[dict[str, np.ndarray]]:
        """Plausible data: unit-normal features with a per-feature scale, tokens, padding masks."""
        rng = np.random.default_rng(seed)
        dt = np.float16 if self.fp16 else np.float32
        xdt = np.float32 if self.extra.get("x32") else dt  # an fp16 model whose input stays float32 (Cast inside)
        out = []
        for _ in range(n):
            f: dict[str, np.ndarray] = {}
            t = int(rng.integers(6, 17)) if self.dynamic_seq else int(self.extra.get("t", T))
            if self.domain == "seq":
                f["x"] = (rng.normal(0, 1, (1, t, D)) * np.linspace(0.5, 2, D)).astype(xdt)
                if "ids" in self.inputs:
                    f["ids"] = rng.integers(0, VOCAB, (1, t)).astype(np.int64)
                if "mask" in self.inputs:
                    f["mask"] = (np.arange(t)[None] < rng.integers(t // 2, t + 1)).astype(dt)
                if "amask" in self.inputs:  # HF's attention_mask: int64, 1 = token, 0 = padding
                    f["amask"] = (np.arange(t)[None] < rng.integers(t // 2, t + 1)).astype(np.int64)
                if "ttype" in self.inputs:  # token_type_ids: a first segment of 0s, a second of 1s
                    f["ttype"] = (np.arange(t)[None] >= rng.integers(1, t)).astype(np.int64)
                if "pkey" in self.inputs:  # a decoder's cache: past keys and values, unit-normal as projections give
                    f["pkey"] = rng.normal(0, 1, (1, 2, KV_LEN, D // 2)).astype(dt)
                    f["pval"] = rng.normal(0, 1, (1, 2, KV_LEN, D // 2)).astype(dt)
            else:
                f["x"] = rng.normal(0, 1, (1, 3, HW, HW)).astype(xdt)
            out.append({k: f[k] for k in self.inputs})
        return out


def draw(index: int, seed: int, only: frozenset[str] | None = None, outs: frozenset[str] | None = None) -> ModuleSpec:
    """Module ``index`` of the campaign with ``seed``: 1-3 blocks of one domain, extras at random.
    ``only`` restricts the blocks drawn (a campaign on a few spellings); a domain with fewer than
    three of them draws fewer."""
    rng = np.random.default_rng([seed, index])
    table = _blocks()
    domains = {d: sorted(b for b in table[d] if only is None or b in only) for d in table}
    domain = "seq" if rng.random() < 0.6 else "img"
    if not domains[domain]:
        domain = "img" if domain == "seq" else "seq"
    names = domains[domain]
    blocks = [str(b) for b in rng.choice(names, min(len(names), int(rng.integers(1, 4))), replace=False)]
    inputs = ["x"]
    if domain == "seq":
        if rng.random() < 0.4:
            inputs.append("ids")
        if rng.random() < 0.5 or any("mask" in b and b not in INT_MASK_BLOCKS or b == "mha" for b in blocks):
            inputs.append("mask")
        if any(b in INT_MASK_BLOCKS for b in blocks):
            inputs.append("amask")
        if any(b in TTYPE_BLOCKS for b in blocks):
            inputs.append("ttype")
        if any(b in KV_BLOCKS for b in blocks):
            inputs += ["pkey", "pval"]
    kinds = [k for k in OUTPUT_KINDS[domain] if outs is None or k in outs]
    outputs = ["y"] + [str(o) for o in rng.choice(kinds, min(len(kinds), int(rng.integers(0 if outs is None else 1, 3))), replace=False)]
    exporter, opset = EXPORTS[int(rng.integers(len(EXPORTS)))]
    if exporter == "torchscript" and opset < 14 and any(b in TRILU_BLOCKS for b in blocks):
        opset = 15
    if exporter == "torchscript" and opset < 13 and any(b in OPSET13_BLOCKS for b in blocks):
        opset = 13
    if exporter == "dynamo" and any(b in TORCHSCRIPT_BLOCKS for b in blocks):
        exporter, opset = "torchscript", 17
    if exporter == "dynamo" and opset == 23 and any(b in ATTN23_BLOCKS for b in blocks):
        opset = 20
    fp16 = bool(rng.random() < 0.15) or any(b in FP16_BLOCKS or b in FP16_NATIVE_BLOCKS for b in blocks)
    return ModuleSpec(index, int(seed * 1000 + index), domain, blocks, inputs, outputs, exporter, opset,
                      fp16=fp16, dynamic_seq=domain == "seq" and bool(rng.random() < 0.5) and not UNROLLED_BLOCKS & set(blocks),
                      extra={"x32": True} if any(b in FP16_BLOCKS for b in blocks) else {})


def sweep(index: int, only: frozenset[str] | None = None) -> tuple[ModuleSpec, str]:
    """Module ``index`` of the sweep: every block alone, once per exporter (TorchScript 17, dynamo 18),
    with every input and output kind of its domain; the preset goes round the list."""
    cases = [(dom, b, e) for dom, table in _blocks().items() for b in sorted(table) if only is None or b in only
             for e in (("torchscript", 17), ("dynamo", 18))]
    dom, block, (exporter, opset) = cases[index % len(cases)]
    if block in TORCHSCRIPT_BLOCKS:
        exporter, opset = "torchscript", 17
    inputs = (["x", "ids", "mask"] + (["amask"] if block in INT_MASK_BLOCKS else []) + (["ttype"] if block in TTYPE_BLOCKS else [])
              + (["pkey", "pval"] if block in KV_BLOCKS else []) if dom == "seq" else ["x"])
    outputs = ["y", "argmax", "topk", "count"] + (["kp_argmax", "kp_soft", "image"] if dom == "img" else [])
    spec = ModuleSpec(index, 9000 + index, dom, [block], inputs, outputs, exporter, opset,
                      fp16=block in FP16_BLOCKS or block in FP16_NATIVE_BLOCKS, dynamic_seq=dom == "seq" and block not in UNROLLED_BLOCKS,
                      extra={"x32": True} if block in FP16_BLOCKS else {})
    return spec, PRESETS[index % len(PRESETS)]


def output_names(spec: ModuleSpec) -> list[str]:
    names = []
    for o in spec.outputs:
        names += ["topk_v", "topk_i"] if o == "topk" else [o]
    return names


def export(spec: ModuleSpec, path: Path, net: Any = None) -> Path:
    """Write the spec's module with its exporter and opset; batch (and maybe sequence) symbolic.
    ``net``: the module to write in place of the spec's freshly seeded one (bench/fuzz_silent.py trains it first)."""
    import torch

    net = _composite(spec) if net is None else net
    sample = spec.feeds(2, 0)
    if spec.dynamic_seq:
        sample = [{k: v for k, v in f.items()} for f in spec.feeds(1, 0)] * 2
    args = tuple(torch.from_numpy(np.concatenate([f[k] for f in sample])) for k in spec.inputs)
    if spec.fp16:
        net = net.half()
    path.parent.mkdir(parents=True, exist_ok=True)
    outs = output_names(spec)
    if spec.exporter == "dynamo":
        b = torch.export.Dim("batch", min=1, max=64)
        s = torch.export.Dim("seq", min=2, max=256)
        shapes = tuple({0: b, 1: s} if spec.dynamic_seq and k in ("x", "ids", "mask", "amask", "ttype") else {0: b}
                       for k in spec.inputs)
        torch.onnx.export(net, args, str(path), dynamo=True, opset_version=spec.opset, input_names=list(spec.inputs),
                          output_names=outs, dynamic_shapes=(shapes,), verbose=False,
                          external_data=False)
    else:
        axes = {k: ({0: "batch", 1: "seq"} if spec.dynamic_seq and k in ("x", "ids", "mask", "amask", "ttype") else {0: "batch"})
                for k in spec.inputs}
        axes.update({k: {0: "batch"} for k in outs})
        torch.onnx.export(net, args, str(path), dynamo=False, opset_version=spec.opset, input_names=list(spec.inputs),
                          output_names=outs, dynamic_axes=axes)
    return path


# ----------------------------------------------------------------------------- one quantization

def _session(path: Path):
    import onnxruntime as ort

    o = ort.SessionOptions()
    o.intra_op_num_threads, o.inter_op_num_threads, o.log_severity_level = 1, 1, 3
    return ort.InferenceSession(str(path), o, providers=["CPUExecutionProvider"])


def run_one(src: Path, preset: str, calib: list[dict], held: list[dict], out: Path) -> dict:
    """Quantize ``src`` with ``preset`` (defaults); judge the result in stock onnxruntime."""
    import onnxptq
    from onnxptq.errors import DOCUMENTED_ERRORS

    row: dict[str, Any] = {"preset": preset}
    c0 = time.process_time()
    try:
        res = onnxptq.quantize(str(src), preset, data=list(calib), output=str(out))
    except DOCUMENTED_ERRORS as exc:
        row.update(status="documented error", error=f"{type(exc).__name__}: {_first(exc)}")
        return row
    except Exception as exc:  # noqa: BLE001 - the finding
        row.update(status="raw exception", error=f"{type(exc).__name__}: {_first(exc)}", trace=traceback.format_exc()[-2500:])
        return row
    row["cpu_s"] = round(time.process_time() - c0, 2)
    row["floor"] = ("broken: " + ",".join(res.floor.broken)) if res.floor is not None and res.floor.broken else (
        "held" if res.floor is not None else "-")
    row["kept_float"] = len((res.repair or {}).get("kept_float", [])) if isinstance(res.repair, dict) else 0
    try:
        q = _session(out)
    except Exception as exc:  # noqa: BLE001
        row.update(status="does not load", error=f"{type(exc).__name__}: {_first(exc)}")
        return row
    f = _session(src)
    worst, nan = 1.0, []
    try:
        got = [q.run(None, feed) for feed in held]
    except Exception as exc:  # noqa: BLE001
        row.update(status="does not run", error=f"{type(exc).__name__}: {_first(exc)}")
        return row
    ref = [f.run(None, feed) for feed in held]
    names = [o.name for o in f.get_outputs()]
    int_agree = []
    for i, name in enumerate(names):
        a = [np.asarray(r[i]) for r in ref]
        b = [np.asarray(g[i]) for g in got]
        if any(x.shape != y.shape or x.dtype != y.dtype for x, y in zip(a, b)):
            row.update(status="wrong output", error=f"output {name}: shape/dtype {b[0].shape}/{b[0].dtype} != {a[0].shape}/{a[0].dtype}")
            return row
        if a[0].dtype.kind != "f":
            int_agree.append(float(np.mean([np.mean(x == y) for x, y in zip(a, b)])))
            continue
        af = np.concatenate([x.astype(np.float64).ravel() for x in a])
        bf = np.concatenate([y.astype(np.float64).ravel() for y in b])
        fin = np.isfinite(af)
        if (~np.isfinite(bf) & fin).any():
            nan.append(name)
        af, bf = af[fin & np.isfinite(bf)], bf[fin & np.isfinite(bf)]
        den = np.linalg.norm(af) * np.linalg.norm(bf)
        worst = min(worst, float(af @ bf / den) if den > 0 else float(np.allclose(af, bf)))
    row["cosine"] = round(worst, 5)
    if int_agree:
        row["int_agreement"] = round(min(int_agree), 4)
    if nan:
        row.update(status="NaN where float has none", error=f"outputs {','.join(nan)}")
    else:
        row["status"] = "ok"
    return row


def _first(exc: BaseException) -> str:
    s = str(exc).strip()
    return s.splitlines()[0][:300] if s else ""


def _child(args, queue) -> None:
    logging.disable(logging.WARNING)
    try:
        queue.put(run_one(*args))
    except BaseException as exc:  # noqa: BLE001
        queue.put({"preset": args[1], "status": "raw exception", "error": f"{type(exc).__name__}: {_first(exc)}",
                   "trace": traceback.format_exc()[-2500:]})


def _export_child(spec: ModuleSpec, src: Path, queue) -> None:
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            export(spec, src)
        queue.put("")
    except Exception as exc:  # noqa: BLE001
        queue.put(f"{type(exc).__name__}: {_first(exc)}")


def _export_forked(spec: ModuleSpec, src: Path, timeout: float) -> str:
    """Export in a child: '' when it wrote the model, else why not (an exception, a crash, a timeout)."""
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_export_child, args=(spec, src, q))
    p.start()
    try:
        failed = q.get(timeout=timeout)
    except Exception:  # noqa: BLE001 - no answer: the child died
        failed = None
    p.join(5)
    if p.is_alive():
        p.kill()
    return failed if failed is not None else f"exporter crashed (exit code {p.exitcode})"


def _float_child(src: Path, feeds: list[dict], queue) -> None:
    try:
        session = _session(src)
        for feed in feeds:
            session.run(None, feed)
        queue.put("")
    except Exception as exc:  # noqa: BLE001
        queue.put(f"{type(exc).__name__}: {_first(exc)}")


def _float_runs_forked(src: Path, feeds: list[dict], timeout: float) -> str:
    """'' when onnxruntime loads and runs the float export, else why not (onnxruntime segfaults on some)."""
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_float_child, args=(src, feeds, q))
    p.start()
    try:
        broken = q.get(timeout=timeout)
    except Exception:  # noqa: BLE001
        broken = None
    p.join(5)
    if p.is_alive():
        p.kill()
    return broken if broken is not None else f"onnxruntime crashed on the float model (exit code {p.exitcode})"


def group_key(row: dict) -> str:
    """Failures grouped by kind and message with numbers, quoted names and node names masked."""
    msg = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", row.get("error", ""))
    msg = re.sub(r"/[\w./-]+", "<path>", msg)
    msg = re.sub(r"\d+", "N", msg)
    return f"{row['status']} | {msg[:160]}"


def _repro(row: dict, spec: ModuleSpec, src: Path, calib: list[dict], out_dir: Path) -> dict:
    tag = hashlib.sha1(group_key(row).encode()).hexdigest()[:8]
    rdir = out_dir / "repro"
    rdir.mkdir(parents=True, exist_ok=True)
    model, data = rdir / f"{tag}.onnx", rdir / f"{tag}.npz"
    import onnx

    onnx.save(onnx.load(str(src)), str(model))  # one file: dynamo writes its weights beside the model
    np.savez(data, **{f"{i}__{k}": v for i, f in enumerate(calib) for k, v in f.items()})
    cmd = (f"cd /work/wt/exportfuzz && PYTHONPATH=src:. python -c \"import numpy as np, onnxptq; d = np.load('{data}'); "
           f"fs = [{{k.split('__')[1]: d[k] for k in d.files if k.startswith(f'{{i}}__')}} for i in range({len(calib)})]; "
           f"onnxptq.quantize('{model}', '{row['preset']}', data=fs)\"")
    return {"model": str(model), "data": str(data), "command": cmd}


def markdown(paths: list[str]) -> str:
    """Counts by status per campaign file, then the failure groups over all of them (for RESULTS.md)."""
    lines = ["| campaign | modules | quantizations | ok | floor held / broken (ok rows) | documented error | raw exception "
             "| does not load/run | NaN | timeout/crash | export failed / float does not run |", "|" + " --- |" * 11]
    groups: dict[str, list[dict]] = collections.defaultdict(list)
    for path in paths:
        rows = json.loads(Path(path).read_text())["rows"]
        n = collections.Counter(r["status"] for r in rows)
        ok = [r for r in rows if r["status"] == "ok"]
        held = sum(r.get("floor") == "held" for r in ok)
        lines.append(f"| {Path(path).name} | {len({r['module'] for r in rows})} | {sum(r['preset'] != '*' for r in rows)} | {n['ok']} "
                     f"| {held} / {len(ok) - held} | {n['documented error']} | {n['raw exception']} "
                     f"| {n['does not load'] + n['does not run'] + n['wrong output']} | {n['NaN where float has none']} "
                     f"| {n['timeout'] + n['crashed']} | {n['export failed']} / {n['float does not run']} |")
        for r in rows:
            if r["status"] not in ("ok",):
                groups[f"{Path(path).name}: {group_key(r)}"].append(r)
    lines += ["", "| campaign: kind, message | count | presets | exporters | blocks (most common) |", "| --- | --- | --- | --- | --- |"]
    for key, rs in sorted(groups.items()):
        blocks = ", ".join(b for b, _ in collections.Counter(b for r in rs for b in r.get("blocks", [])).most_common(3))
        lines.append(f"| {key.replace('|', '/')} | {len(rs)} | {' '.join(sorted({r['preset'] for r in rs}))} "
                     f"| {' '.join(sorted({r['exporter'] + str(r['opset']) for r in rs}))} | {blocks} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markdown", nargs="+", help="print the tables of these campaign files and exit")
    ap.add_argument("--modules", type=int, default=30)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--sweep", action="store_true", help="each block alone per exporter, one preset each (sweep())")
    ap.add_argument("--presets", default=",".join(PRESETS))
    ap.add_argument("--blocks", help="comma-separated block names: draw (or sweep) only these")
    ap.add_argument("--outputs", help="comma-separated extra output kinds: draw 1-2 of these only (OUTPUT_KINDS)")
    ap.add_argument("--calib", type=int, default=16)
    ap.add_argument("--held", type=int, default=8)
    ap.add_argument("--timeout", type=float, default=180)
    ap.add_argument("--out-dir", default="/work/cache/exportfuzz")
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.markdown:
        print(markdown(a.markdown))
        return 0
    import torch

    torch.set_num_threads(1)
    logging.disable(logging.WARNING)
    out_dir = Path(a.out_dir)
    mdir = out_dir / ("models.sweep" if a.sweep else f"models.seed{a.seed}")
    rows: list[dict] = json.loads(Path(a.json).read_text())["rows"] if Path(a.json).exists() else []
    done = {(r["module"], r["preset"]) for r in rows}
    t0 = time.time()
    for index in range(a.start, a.start + a.modules):
        only = frozenset(a.blocks.split(",")) if a.blocks else None
        outs = frozenset(a.outputs.split(",")) if a.outputs else None
        spec, presets = (sweep(index, only) if a.sweep else (draw(index, a.seed, only, outs), a.presets))
        base = {"module": spec.name, "exporter": spec.exporter, "opset": spec.opset, "fp16": spec.fp16,
                "blocks": spec.blocks, "inputs": spec.inputs, "outputs": spec.outputs, "dynamic_seq": spec.dynamic_seq}
        src = mdir / f"m{index:03d}.onnx"
        failed = _export_forked(spec, src, a.timeout)
        if failed:  # the exporter's failure (torch segfaults on some fp16 graphs), not ours
            rows.append({**base, "preset": "*", "status": "export failed", "error": failed})
            print(json.dumps(rows[-1]), flush=True)
            continue
        import onnx

        x_dims = onnx.load(str(src), load_external_data=False).graph.input[0].type.tensor_type.shape.dim
        if spec.dynamic_seq and len(x_dims) > 1 and x_dims[1].HasField("dim_value"):
            spec.dynamic_seq = False  # the exporter specialised the sequence axis (dynamo around RNNs, a loop it unrolled)
            spec.extra["t"] = x_dims[1].dim_value  # to the sample's length, not T: feed that length
            base["dynamic_seq"] = False
        calib, held = spec.feeds(a.calib, 1), spec.feeds(a.held, 1000)
        broken = _float_runs_forked(src, calib[:2], a.timeout)
        if broken:  # the export itself does not load or run in onnxruntime (a segfault, even): not ours to judge
            rows.append({**base, "preset": "*", "status": "float does not run", "error": broken})
            print(json.dumps(rows[-1]), flush=True)
            continue
        for preset in presets.split(","):
            if (spec.name, preset) in done:
                continue
            out = mdir / "q" / f"m{index:03d}.{preset}.onnx"
            out.parent.mkdir(parents=True, exist_ok=True)
            ctx = mp.get_context("fork")
            q = ctx.Queue()
            p = ctx.Process(target=_child, args=((src, preset, calib, held, out), q))
            p.start()
            try:
                row = q.get(timeout=a.timeout)
            except Exception:  # noqa: BLE001
                row = {"preset": preset, "status": "timeout", "error": f"> {a.timeout:g} s"}
            p.join(5)
            if p.is_alive():
                p.kill()
            if p.exitcode not in (0, None) and "status" not in row:
                row = {"preset": preset, "status": "crashed", "error": f"exit code {p.exitcode}"}
            row = {**base, **row}
            if row["status"] not in ("ok", "documented error"):
                row["repro"] = _repro(row, spec, src, calib, out_dir)
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k not in ("trace", "repro", "blocks", "inputs", "outputs")}), flush=True)
            Path(a.json).write_text(json.dumps({"seed": a.seed, "rows": rows}, indent=1))
    Path(a.json).write_text(json.dumps({"seed": a.seed, "rows": rows, "seconds": round(time.time() - t0)}, indent=1))
    summarize(rows)
    return 0


def summarize(rows: list[dict]) -> None:
    """Counts by status; failure groups with their count, presets, blocks and one reproducer."""
    print("status counts:", dict(collections.Counter(r["status"] for r in rows).most_common()))
    groups: dict[str, list[dict]] = collections.defaultdict(list)
    for r in rows:
        if r["status"] not in ("ok", "documented error"):
            groups[group_key(r)].append(r)
    for key, rs in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        print(f"{len(rs):4d}  {key}\n      presets {sorted({r['preset'] for r in rs})} exporters {sorted({r['exporter'] + str(r['opset']) for r in rs})}"
              f"\n      blocks {collections.Counter(b for r in rs for b in r.get('blocks', [])).most_common(4)}"
              f"\n      repro {rs[0].get('repro', {}).get('command', '-')}")
    floors = collections.Counter(r.get("floor", "-").split(":")[0] for r in rows if r["status"] == "ok")
    print("floor verdicts (ok rows):", dict(floors))


if __name__ == "__main__":
    raise SystemExit(main())
