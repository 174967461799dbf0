"""Issue 27: the same small nets written by torch's two ONNX exporters, quantized side by side.

torch 2.13's default exporter (``torch.onnx.export(..., dynamo=True)``: torch.export + onnxscript,
its default opset, its own LayerNormalization/Gelu/attention decompositions, initializers folded
its own way) writes most of the models users hand us; the zoo and the outside models are almost all
older TorchScript (``dynamo=False``) or non-torch exports. This script builds six small
architectures (each under 5 M parameters), trains each for a few seconds on a synthetic task so
that its outputs mean something, exports the SAME weights with both exporters (dynamo at its
default opset, TorchScript at opset 17, both with a symbolic batch), and an fp16 variant of one;
then runs every preset with defaults on each export and tables agreement with float, the floor's
verdict, repair's kept nodes and quantize CPU seconds, dynamo and TorchScript rows side by side.

    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/exporters.py \\
        --json /work/cache/exporters/rows.json --md /work/cache/exporters/rows.md

``build(name, exporter, out_dir)`` is reusable by tests (one model, one exporter, seconds).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import time
import traceback
from pathlib import Path
from typing import Callable

import numpy as np

Feed = dict[str, np.ndarray]
PRESETS = ("BF16", "FP16", "A16W8", "A8W8", "BFP16", "MX9", "MXINT8", "MXFP8_E4M3")
EXPORTERS = ("dynamo", "torchscript")


def floor(preset: str) -> float:
    """The agreement every preset should reach (bench/newmodels.py's floors)."""
    return 0.95 if preset in ("A8W8", "MXFP8_E4M3") else 0.97


# ----------------------------------------------------------------------------- the nets

def _nets():
    """The architectures, built lazily so importing this module needs no torch."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    class Block(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int):
            super().__init__()
            self.c1, self.b1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
            self.c2, self.b2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
            self.skip = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                         if stride != 1 or cin != cout else nn.Identity())

        def forward(self, x):
            y = F.relu(self.b1(self.c1(x)))
            return F.relu(self.b2(self.c2(y)) + self.skip(x))

    class ResNet(nn.Module):
        def __init__(self, classes: int = 10):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
            self.layers = nn.Sequential(Block(16, 16, 1), Block(16, 32, 2), Block(32, 64, 2))
            self.fc = nn.Linear(64, classes)

        def forward(self, x):
            return self.fc(self.layers(self.stem(x)).mean((2, 3)))

    class ViT(nn.Module):
        """Patch embedding, two encoder layers (nn.MultiheadAttention inside), a key-padding mask input."""

        def __init__(self, classes: int = 10, dim: int = 64):
            super().__init__()
            self.patch = nn.Conv2d(3, dim, 4, 4)
            self.pos = nn.Parameter(torch.randn(1, 64, dim) * 0.02)
            layer = nn.TransformerEncoderLayer(dim, 4, 128, dropout=0.0, activation="gelu", batch_first=True,
                                               norm_first=True)
            self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            self.norm = nn.LayerNorm(dim)
            self.head = nn.Linear(dim, classes)

        def forward(self, x, mask):
            t = self.patch(x).flatten(2).transpose(1, 2) + self.pos
            pad = mask < 0.5  # True: padded token
            t = self.enc(t, src_key_padding_mask=pad)
            w = mask.unsqueeze(-1)
            return self.head(self.norm((t * w).sum(1) / w.sum(1).clamp(min=1.0)))

    class SDPAEncoder(nn.Module):
        """A text-like encoder with F.scaled_dot_product_attention and an additive attention mask."""

        def __init__(self, vocab_dim: int = 32, dim: int = 64, classes: int = 8):
            super().__init__()
            self.inp = nn.Linear(vocab_dim, dim)
            self.qkv = nn.ModuleList(nn.Linear(dim, 3 * dim) for _ in range(2))
            self.out = nn.ModuleList(nn.Linear(dim, dim) for _ in range(2))
            self.ln1 = nn.ModuleList(nn.LayerNorm(dim) for _ in range(2))
            self.ln2 = nn.ModuleList(nn.LayerNorm(dim) for _ in range(2))
            self.ff = nn.ModuleList(nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
                                    for _ in range(2))
            self.head = nn.Linear(dim, classes)

        def forward(self, x, mask):
            h = self.inp(x)
            b, t, d = h.shape
            bias = (1.0 - mask)[:, None, None, :] * -1e4
            for i in range(2):
                q, k, v = self.qkv[i](self.ln1[i](h)).reshape(b, t, 3, 4, d // 4).permute(2, 0, 3, 1, 4)
                a = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
                h = h + self.out[i](a.transpose(1, 2).reshape(b, t, d))
                h = h + self.ff[i](self.ln2[i](h))
            return self.head(h)  # per-token classes

    class UNet(nn.Module):
        def __init__(self, classes: int = 3):
            super().__init__()

            def cbr(i, o):
                return nn.Sequential(nn.Conv2d(i, o, 3, 1, 1), nn.BatchNorm2d(o), nn.ReLU(),
                                     nn.Conv2d(o, o, 3, 1, 1), nn.BatchNorm2d(o), nn.ReLU())

            self.e1, self.e2, self.e3 = cbr(3, 16), cbr(16, 32), cbr(32, 64)
            self.u2, self.d2 = nn.ConvTranspose2d(64, 32, 2, 2), cbr(64, 32)
            self.u1, self.d1 = nn.ConvTranspose2d(32, 16, 2, 2), cbr(32, 16)
            self.head = nn.Conv2d(16, classes, 1)

        def forward(self, x):
            a = self.e1(x)
            b = self.e2(F.max_pool2d(a, 2))
            c = self.e3(F.max_pool2d(b, 2))
            b = self.d2(torch.cat([self.u2(c), b], 1))
            return self.head(self.d1(torch.cat([self.u1(b), a], 1)))

    class CRNN(nn.Module):
        def __init__(self, classes: int = 12):
            super().__init__()
            self.cnn = nn.Sequential(nn.Conv2d(1, 32, 3, 1, 1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d((2, 1)),
                                     nn.Conv2d(32, 64, 3, 1, 1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d((2, 1)))
            self.rnn = nn.LSTM(64 * 4, 64, batch_first=True, bidirectional=True)
            self.gru = nn.GRU(128, 64, batch_first=True)
            self.fc = nn.Linear(64, classes)

        def forward(self, x):  # x: (B, 1, 16, T)
            f = self.cnn(x)
            f = f.flatten(1, 2).transpose(1, 2)  # (B, T, 256)
            f, _ = self.rnn(f)
            f, _ = self.gru(f)
            return self.fc(f)  # per-step classes

    class SE(nn.Module):
        def __init__(self, c: int):
            super().__init__()
            self.a, self.b = nn.Conv2d(c, max(4, c // 4), 1), nn.Conv2d(max(4, c // 4), c, 1)

        def forward(self, x):
            s = F.adaptive_avg_pool2d(x, 1)
            return x * torch.sigmoid(self.b(F.silu(self.a(s))))

    class MBConv(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int, act):
            super().__init__()
            mid = cin * 4
            self.body = nn.Sequential(nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), act(),
                                      nn.Conv2d(mid, mid, 3, stride, 1, groups=mid, bias=False), nn.BatchNorm2d(mid), act(),
                                      SE(mid), nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout))
            self.res = stride == 1 and cin == cout

        def forward(self, x):
            y = self.body(x)
            return x + y if self.res else y

    class MobileNet(nn.Module):
        def __init__(self, classes: int = 10):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.Hardswish())
            self.blocks = nn.Sequential(MBConv(16, 16, 1, nn.SiLU), MBConv(16, 24, 2, nn.Hardswish),
                                        MBConv(24, 24, 1, nn.SiLU), MBConv(24, 40, 2, nn.Hardswish))
            self.head = nn.Sequential(nn.Conv2d(40, 128, 1), nn.Hardswish())
            self.fc = nn.Linear(128, classes)

        def forward(self, x):
            return self.fc(self.head(self.blocks(self.stem(x))).mean((2, 3)))

    class Detector(nn.Module):
        """A backbone with separate score (sigmoid) and box (ltrb distances) heads per 8x8 cell."""

        def __init__(self):
            super().__init__()
            self.backbone = nn.Sequential(
                nn.Conv2d(3, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.ReLU(),
                nn.Conv2d(16, 32, 3, 2, 1), nn.BatchNorm2d(32), nn.ReLU(),
                nn.Conv2d(32, 64, 3, 2, 1), nn.BatchNorm2d(64), nn.ReLU())
            self.score = nn.Sequential(nn.Conv2d(64, 32, 3, 1, 1), nn.ReLU(), nn.Conv2d(32, 1, 1))
            self.box = nn.Sequential(nn.Conv2d(64, 32, 3, 1, 1), nn.ReLU(), nn.Conv2d(32, 4, 1))

        def forward(self, x):
            f = self.backbone(x)
            return torch.sigmoid(self.score(f)).flatten(1), F.relu(self.box(f)).flatten(2).transpose(1, 2) * 8.0

    return {"resnet": ResNet, "vit_mha": ViT, "sdpa_encoder": SDPAEncoder, "unet": UNet, "crnn": CRNN,
            "mobilenet_se": MobileNet, "detector": Detector}


# ----------------------------------------------------------------------------- synthetic tasks

def _images(rng: np.random.Generator, n: int, classes: int = 10, size: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """Class = which of `classes` fixed colour/stripe prototypes an image shows, under noise and a shift."""
    protos = np.random.default_rng(7).normal(0, 1, (classes, 3, size, size)).astype(np.float32)
    yy, xx = np.mgrid[:size, :size] / size
    for c in range(classes):  # a low-frequency pattern per class, so that convs see structure
        protos[c] = 0.3 * protos[c] + np.sin((c + 1) * np.pi * (xx * np.cos(c) + yy * np.sin(c)))[None] * (1 + c % 3) / 2
    y = rng.integers(0, classes, n)
    x = protos[y] + rng.normal(0, 0.6, (n, 3, size, size)).astype(np.float32)
    x = np.roll(x, int(rng.integers(-3, 4)), axis=3)
    return x.astype(np.float32), y


def _shapes(rng: np.random.Generator, n: int, size: int = 32) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Images with one bright rectangle and one dark disc on textured noise: segmentation labels
    (0 ground, 1 rectangle, 2 disc), the rectangle's 8x8-cell score map and its box (x0, y0, x1, y1)."""
    x = rng.normal(0, 0.5, (n, 3, size, size)).astype(np.float32)
    seg = np.zeros((n, size, size), np.int64)
    score = np.zeros((n, (size // 8) ** 2), np.float32)
    boxes = np.zeros((n, 4), np.float32)
    yy, xx = np.mgrid[:size, :size]
    for i in range(n):
        w, h = rng.integers(6, 14, 2)
        x0, y0 = rng.integers(0, size - w), rng.integers(0, size - h)
        cy, cx, r = *rng.integers(6, size - 6, 2), rng.integers(3, 6)
        disc = (yy - cy) ** 2 + (xx - cx) ** 2 <= r * r
        seg[i][disc] = 2
        seg[i, y0:y0 + h, x0:x0 + w] = 1
        x[i][:, disc] -= 1.5
        x[i, :, y0:y0 + h, x0:x0 + w] += np.array([2.0, 1.0, 0.5], np.float32)[:, None, None]
        cell = ((y0 + h // 2) // 8) * (size // 8) + (x0 + w // 2) // 8
        score[i, cell] = 1.0
        boxes[i] = (x0, y0, x0 + w, y0 + h)
    return x, seg, score, boxes


def _sequences(rng: np.random.Generator, n: int, t: int = 32, classes: int = 12) -> tuple[np.ndarray, np.ndarray]:
    """(B, 1, 16, T) 'spectrograms': each step's class is a band pattern, held for runs of steps."""
    pats = np.random.default_rng(11).normal(0, 1, (classes, 16)).astype(np.float32)
    y = np.repeat(rng.integers(0, classes, (n, t // 4)), 4, axis=1)
    x = pats[y].transpose(0, 2, 1)[:, None] + rng.normal(0, 0.7, (n, 1, 16, t)).astype(np.float32)
    return x.astype(np.float32), y


def _tokens(rng: np.random.Generator, n: int, t: int = 24, classes: int = 8) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Token vectors (B, T, 32) with a padding mask; a token's class depends on itself and the
    sequence's mean over its valid tokens (so attention matters)."""
    emb = np.random.default_rng(5).normal(0, 1, (classes, 32)).astype(np.float32)
    ids = rng.integers(0, classes, (n, t))
    x = emb[ids] + rng.normal(0, 0.3, (n, t, 32)).astype(np.float32)
    lengths = rng.integers(t // 2, t + 1, n)
    mask = (np.arange(t)[None] < lengths[:, None]).astype(np.float32)
    x = x * mask[..., None]
    majority = np.array([np.bincount(ids[i, :lengths[i]], minlength=classes).argmax() for i in range(n)])
    y = (ids + majority[:, None]) % classes
    return x.astype(np.float32), mask, y


def _vit_mask(rng: np.random.Generator, n: int) -> np.ndarray:
    keep = rng.integers(40, 65, n)
    return (np.arange(64)[None] < keep[:, None]).astype(np.float32)


def feeds(name: str, n: int, seed: int, dtype=np.float32) -> list[Feed]:
    """n single-sample feeds of the model's training distribution (one seed: calibration, another: held out)."""
    rng = np.random.default_rng(seed)
    if name in ("resnet", "mobilenet_se", "resnet_fp16"):
        x, _ = _images(rng, n)
        return [{"x": x[i:i + 1].astype(dtype)} for i in range(n)]
    if name == "vit_mha":
        x, _ = _images(rng, n)
        m = _vit_mask(rng, n)
        return [{"x": x[i:i + 1], "mask": m[i:i + 1]} for i in range(n)]
    if name == "sdpa_encoder":
        x, m, _ = _tokens(rng, n)
        return [{"x": x[i:i + 1], "mask": m[i:i + 1]} for i in range(n)]
    if name in ("unet", "detector"):
        x = _shapes(rng, n)[0]
        return [{"x": x[i:i + 1]} for i in range(n)]
    if name == "crnn":
        x, _ = _sequences(rng, n)
        return [{"x": x[i:i + 1]} for i in range(n)]
    raise KeyError(name)


def _train(name: str, net, steps: int) -> None:
    """A few seconds of Adam on the synthetic task: enough for outputs that carry a decision."""
    import torch
    import torch.nn.functional as F

    rng = np.random.default_rng(123)
    opt = torch.optim.Adam(net.parameters(), 3e-3)
    net.train()
    for _ in range(steps):
        if name in ("resnet", "mobilenet_se"):
            x, y = _images(rng, 32)
            loss = F.cross_entropy(net(torch.from_numpy(x)), torch.from_numpy(y))
        elif name == "vit_mha":
            x, y = _images(rng, 32)
            loss = F.cross_entropy(net(torch.from_numpy(x), torch.from_numpy(_vit_mask(rng, 32))), torch.from_numpy(y))
        elif name == "sdpa_encoder":
            x, m, y = _tokens(rng, 32)
            logits = net(torch.from_numpy(x), torch.from_numpy(m))
            loss = (F.cross_entropy(logits.transpose(1, 2), torch.from_numpy(y), reduction="none") * torch.from_numpy(m)).mean()
        elif name == "unet":
            x, seg, _, _ = _shapes(rng, 16)
            loss = F.cross_entropy(net(torch.from_numpy(x)), torch.from_numpy(seg))
        elif name == "crnn":
            x, y = _sequences(rng, 32)
            loss = F.cross_entropy(net(torch.from_numpy(x)).transpose(1, 2), torch.from_numpy(y))
        elif name == "detector":
            x, _, score, boxes = _shapes(rng, 32)
            s, b = net(torch.from_numpy(x))
            cells = torch.from_numpy(score.argmax(1))
            picked = b[torch.arange(len(cells)), cells]
            loss = F.binary_cross_entropy(s, torch.from_numpy(score)) * 4 + F.smooth_l1_loss(picked, torch.from_numpy(boxes)) / 8
        else:
            raise KeyError(name)
        opt.zero_grad()
        loss.backward()
        opt.step()
    net.eval()


INPUTS = {"vit_mha": ("x", "mask"), "sdpa_encoder": ("x", "mask")}
OUTPUTS = {"detector": ("score", "boxes")}


def trained(name: str, steps: int = 40, cache: Path | None = None):
    """The net, trained (or loaded from `cache`/<name>.pt so both exporters see the same weights)."""
    import torch

    base = name.removesuffix("_fp16")
    torch.manual_seed(0)
    net = _nets()[base]()
    pt = cache / f"{base}.pt" if cache else None
    if pt and pt.exists():
        net.load_state_dict(torch.load(pt))
        net.eval()
        return net
    if steps:
        _train(base, net, steps)
    net.eval()
    if pt:
        torch.save(net.state_dict(), pt)
    return net


def export(name: str, net, exporter: str, path: Path) -> Path:
    """Write `net` with one exporter: dynamo at its default opset, TorchScript at opset 17; batch symbolic."""
    import torch

    fp16 = name.endswith("_fp16")
    sample = feeds(name, 2, 0, np.float16 if fp16 else np.float32)
    args = tuple(torch.from_numpy(np.concatenate([f[k] for f in sample])) for k in sample[0])
    inputs = INPUTS.get(name.removesuffix("_fp16"), ("x",))
    outputs = OUTPUTS.get(name, ("y",))
    if fp16:
        net = net.half()
    path.parent.mkdir(parents=True, exist_ok=True)
    if exporter == "dynamo":
        batch = torch.export.Dim("batch", min=1, max=64)
        torch.onnx.export(net, args, str(path), dynamo=True, input_names=list(inputs), output_names=list(outputs),
                          dynamic_shapes={k: {0: batch} for k in _arg_names(net)})
    else:
        torch.onnx.export(net, args, str(path), dynamo=False, opset_version=17, input_names=list(inputs),
                          output_names=list(outputs), dynamic_axes={k: {0: "batch"} for k in inputs + outputs})
    return path


def _arg_names(net) -> list[str]:
    import inspect

    return list(inspect.signature(net.forward).parameters)


def build(name: str, exporter: str, out_dir: Path, steps: int = 40) -> Path:
    """One model written by one exporter (cached in out_dir); the weights come from <name>.pt there."""
    path = Path(out_dir) / f"{name}.{exporter}.onnx"
    if not path.exists():
        export(name, trained(name, steps, Path(out_dir)), exporter, path)
    return path


# ----------------------------------------------------------------------------- metrics

def _argmax_agreement(output: int, axis: int):
    def metric(ref, test) -> float:
        a, b = np.concatenate([r[output] for r in ref]), np.concatenate([t[output] for t in test])
        return float((a.argmax(axis) == b.argmax(axis)).mean())

    return metric


def _det_agreement(ref, test) -> float:
    """Same best cell, and its box within 1 px (of 32), per image."""
    hits = 0
    for r, t in zip(ref, test):
        cr, ct = int(r[0].argmax()), int(t[0].argmax())
        hits += cr == ct and float(np.abs(r[1][0, cr] - t[1][0, ct]).max()) <= 1.0
    return hits / len(ref)


METRICS: dict[str, tuple[str, Callable]] = {
    "resnet": ("top-1", _argmax_agreement(0, -1)),
    "resnet_fp16": ("top-1", _argmax_agreement(0, -1)),
    "mobilenet_se": ("top-1", _argmax_agreement(0, -1)),
    "vit_mha": ("top-1", _argmax_agreement(0, -1)),
    "sdpa_encoder": ("per-token class", _argmax_agreement(0, -1)),
    "crnn": ("per-step class", _argmax_agreement(0, -1)),
    "unet": ("per-pixel class", _argmax_agreement(0, 1)),
    "detector": ("best cell + box within 1 px", _det_agreement),
}
MODELS = ("resnet", "vit_mha", "sdpa_encoder", "unet", "crnn", "mobilenet_se", "detector", "resnet_fp16")


def _cosine(ref, test) -> float:
    worst = 1.0
    for i in range(len(ref[0])):
        a = np.concatenate([np.asarray(r[i], np.float64).ravel() for r in ref])
        b = np.concatenate([np.asarray(t[i], np.float64).ravel() for t in test])
        worst = min(worst, float(a @ b / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-30)))
    return worst


def _runner(path):
    import onnxruntime as ort

    o = ort.SessionOptions()
    o.intra_op_num_threads, o.inter_op_num_threads, o.log_severity_level = 1, 1, 3
    s = ort.InferenceSession(str(path), o, providers=["CPUExecutionProvider"])
    return lambda f: s.run(None, f)


def run_one(name: str, exporter: str, preset: str, calib: list[Feed], held: list[Feed], out_dir: Path) -> dict:
    """Quantize one export with one preset (defaults), evaluate against float on held-out feeds."""
    import onnx

    import onnxptq
    from testkit.log_capture import capture_warnings

    warnings = capture_warnings(300)
    src = build(name, exporter, out_dir)
    out = out_dir / "q" / f"{name}.{exporter}.{preset}.onnx"
    out.parent.mkdir(parents=True, exist_ok=True)
    row = {"model": name, "exporter": exporter, "preset": preset, "floor": floor(preset), "metric": METRICS[name][0]}
    c0 = time.process_time()
    try:
        res = onnxptq.quantize(str(src), preset, data=list(calib), output=str(out))
    except Exception as exc:  # recorded, never fatal
        row.update(status="exception", error=f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}",
                   trace=traceback.format_exc()[-3000:])
        return row
    row["quantize_cpu_s"] = round(time.process_time() - c0, 2)
    rep = res.repair if isinstance(res.repair, dict) else {}
    row["n_kept"] = len(rep.get("kept_float", []))
    row["floor_verdict"] = ("broken: " + ",".join(res.floor.broken)) if res.floor is not None and res.floor.broken else (
        "held" if res.floor is not None else "-")
    row["plan_nodes"] = len(res.plan.nodes)
    q = onnx.load(str(out), load_external_data=False)
    row["q_ops"] = sum(n.op_type in ("QuantizeLinear", "DequantizeLinear") or n.domain == "onnxptq" for n in q.graph.node)
    row["warnings"] = warnings[:4]
    ref, test = _runner(src), _runner(out)
    r, t = [ref(f) for f in held], [test(f) for f in held]
    row["agreement"] = round(METRICS[name][1](r, t), 4)
    row["cosine"] = round(_cosine(r, t), 5)
    row["status"] = "ok" if row["agreement"] >= floor(preset) else ("below floor, warned" if warnings else "below floor, SILENT")
    return row


def _child(args, queue):
    try:
        queue.put(run_one(*args))
    except BaseException as exc:  # noqa: BLE001
        queue.put({"model": args[0], "exporter": args[1], "preset": args[2], "status": "exception", "error": repr(exc)[:300]})


def table(rows: list[dict]) -> str:
    """Dynamo and TorchScript rows of the same (model, preset) side by side."""
    by = {(r["model"], r["exporter"], r["preset"]): r for r in rows}
    lines = ["| model | metric | preset | agreement dynamo / ts | cosine dynamo / ts | plan nodes d / ts | kept float d / ts "
             "| floor verdict d / ts | quantize CPU s d / ts | status dynamo / ts |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]

    def f(r, k, fmt="{}"):
        return "-" if r is None or r.get(k) is None else fmt.format(r[k])

    for model in dict.fromkeys(r["model"] for r in rows):
        for preset in PRESETS:
            d, t = by.get((model, "dynamo", preset)), by.get((model, "torchscript", preset))
            if d is None and t is None:
                continue
            st = [("-" if r is None else r["status"] + (": " + r["error"][:120] if r.get("error") else "")) for r in (d, t)]
            lines.append(f"| {model} | {(d or t)['metric']} | {preset} | {f(d, 'agreement', '{:.3f}')} / {f(t, 'agreement', '{:.3f}')} "
                         f"| {f(d, 'cosine', '{:.4f}')} / {f(t, 'cosine', '{:.4f}')} | {f(d, 'plan_nodes')} / {f(t, 'plan_nodes')} "
                         f"| {f(d, 'n_kept')} / {f(t, 'n_kept')} | {f(d, 'floor_verdict')} / {f(t, 'floor_verdict')} "
                         f"| {f(d, 'quantize_cpu_s')} / {f(t, 'quantize_cpu_s')} | {st[0]} / {st[1]} |")
    return "\n".join(lines) + "\n"


def probes(out_dir: Path) -> list[dict]:
    """The SDPA encoder beyond the defaults: a symbolic sequence dim (feeds of 8-24 tokens) with
    both exporters, and dynamo at opset 18 (erf GELU) and 23 (the Attention op)."""
    import onnxruntime as ort
    import torch

    import onnxptq

    net = trained("sdpa_encoder", cache=Path(out_dir))

    def varied(n: int, seed: int) -> list[Feed]:
        r = np.random.default_rng(seed)
        out = []
        for _ in range(n):
            x, m, _ = _tokens(r, 1, t=int(r.integers(8, 25)))
            out.append({"x": x, "mask": np.ones_like(m)})
        return out

    calib, held = varied(16, 1), varied(16, 2)
    args = tuple(torch.from_numpy(v) for v in calib[0].values())
    names = dict(input_names=["x", "mask"], output_names=["y"])
    b, s = torch.export.Dim("batch", min=1, max=64), torch.export.Dim("seq", min=2, max=512)
    paths = {"dynamo, symbolic seq": out_dir / "probe.dyn_seq.dynamo.onnx", "torchscript, symbolic seq": out_dir / "probe.dyn_seq.ts.onnx",
             "dynamo opset 18": out_dir / "probe.opset18.onnx", "dynamo opset 23": out_dir / "probe.opset23.onnx"}
    torch.onnx.export(net, args, str(paths["dynamo, symbolic seq"]), dynamo=True, **names,
                      dynamic_shapes={"x": {0: b, 1: s}, "mask": {0: b, 1: s}})
    torch.onnx.export(net, args, str(paths["torchscript, symbolic seq"]), dynamo=False, opset_version=17, **names,
                      dynamic_axes={"x": {0: "b", 1: "s"}, "mask": {0: "b", 1: "s"}, "y": {0: "b", 1: "s"}})
    for ops in (18, 23):
        torch.onnx.export(net, args, str(paths[f"dynamo opset {ops}"]), dynamo=True, opset_version=ops, **names,
                          dynamic_shapes={"x": {1: s}, "mask": {1: s}})
    rows = []
    for label, path in paths.items():
        for preset in ("A8W8", "BFP16", "MXFP8_E4M3"):
            row = {"probe": label, "preset": preset}
            out = path.with_suffix(f".{preset}.onnx")
            try:
                res = onnxptq.quantize(str(path), preset, data=calib, output=str(out))
                a, q = ort.InferenceSession(str(path)), ort.InferenceSession(str(out))
                row["agreement"] = round(float(np.mean([(a.run(None, f)[0].argmax(-1) == q.run(None, f)[0].argmax(-1)).mean()
                                                        for f in held])), 4)
                row["n_kept"] = len((res.repair or {}).get("kept_float", []))
            except Exception as exc:  # recorded
                row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--exporters", default=",".join(EXPORTERS))
    ap.add_argument("--presets", default=",".join(PRESETS))
    ap.add_argument("--calib", type=int, default=16)
    ap.add_argument("--held", type=int, default=64)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--out-dir", default="/work/cache/exporters/models")
    ap.add_argument("--export-only", action="store_true")
    ap.add_argument("--probes", action="store_true", help="run probes() (symbolic seq, opsets 18/23) instead of the table")
    ap.add_argument("--json", required=True)
    ap.add_argument("--md", required=True)
    a = ap.parse_args()
    out_dir = Path(a.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if a.probes:
        Path(a.json).write_text(json.dumps(probes(out_dir), indent=1))
        return
    rows = json.loads(Path(a.json).read_text()) if Path(a.json).exists() else []
    for name in a.models.split(","):
        dtype = np.float16 if name.endswith("_fp16") else np.float32
        calib, held = feeds(name, a.calib, 1, dtype), feeds(name, a.held, 1000, dtype)
        for exporter in a.exporters.split(","):
            try:
                build(name, exporter, out_dir)
            except Exception as exc:  # an export failure is a row too
                row = {"model": name, "exporter": exporter, "preset": "*", "status": "export failed",
                       "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
                print(json.dumps(row), flush=True)
                continue
            if a.export_only:
                continue
            for preset in a.presets.split(","):
                ctx = mp.get_context("fork")
                q = ctx.Queue()
                p = ctx.Process(target=_child, args=((name, exporter, preset, calib, held, out_dir), q))
                p.start()
                try:
                    row = q.get(timeout=a.timeout)
                except Exception:
                    row = {"model": name, "exporter": exporter, "preset": preset, "status": "timeout", "error": f"> {a.timeout} s"}
                p.join(5)
                if p.is_alive():
                    p.kill()
                rows = [r for r in rows if (r["model"], r["exporter"], r["preset"]) != (name, exporter, preset)] + [row]
                Path(a.json).write_text(json.dumps(rows, indent=1))
                print(json.dumps({k: v for k, v in row.items() if k != "trace"}), flush=True)
    Path(a.md).write_text(table(rows))


if __name__ == "__main__":
    main()
