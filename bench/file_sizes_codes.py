"""How far the element codes of an MX float format can shrink: per model, the entropy of the codes
its weights quantize to, against the bits a packed file stores (issue 26 item 2: MXFP6 <= 0.20x).

Why: MXFP6 stores 6 bits an element (a 4-bit and a 2-bit plane) and a byte a block of 32, 6.25
bits, 0.195 of the fp32 weights; the 14-model median file spends ~0.028 more (kept floats, node
records). Only a code form below 6 bits could close that, and standard ops that fold decode
fixed-width fields, or ranks with an escape stream (the exponents' form): this prints the codes'
entropy (no layout decodable by folding beats it), the best ``k``-bit rank + escape layout
(ranks of the ``2^k - 1`` most frequent codes, the others escaped to a stream of 6-bit codes) and
the file ratio each would leave, with the rest of the file (what is not element codes) as measured.

The codes are the reference's (``formats.mx``: OCP shared exponent, half-even rounding), blocks of
32 along a conv's input channels (axis 1) and a MatMul/Gemm weight's first axis (the emit rule
for the weights this list holds); float initializers of >= 2 dims and >= 64 elements.

    PYTHONPATH=src:.:bench python bench/file_sizes_codes.py --models zoo:oww_hey_mycroft,nm:dnsmos_p808 \\
        [--rows run.json]   # a file_sizes.py run: the measured MXFP6 ratio beside
"""

from __future__ import annotations

import argparse
import json

import _common  # noqa: F401 - the repository root on sys.path
import ml_dtypes
import numpy as np
import onnx
from onnx import numpy_helper

import file_sizes as fs

DTYPES = {"fp6_e3m2": (ml_dtypes.float6_e3m2fn, 6), "fp6_e2m3": (ml_dtypes.float6_e2m3fn, 6),
          "fp4_e2m1": (ml_dtypes.float4_e2m1fn, 4)}
BLOCK = 32


def codes_of(w: np.ndarray, element: str) -> np.ndarray:
    """The element codes (uint8, the type's bits) the reference gives ``w``'s blocks."""
    from onnxptq.formats import mx

    fmt = mx.ELEMENT_FORMATS[element]
    axis = 1 if w.ndim > 2 else 0
    rows = np.moveaxis(w.astype(np.float64), axis, -1).reshape(-1, w.shape[axis])
    length = rows.shape[1]
    nb = -(-length // BLOCK)
    xb = np.zeros((rows.shape[0], nb * BLOCK))
    xb[:, :length] = rows
    xb = xb.reshape(rows.shape[0], nb, BLOCK)
    exp = mx.shared_exponent(np.abs(xb).max(axis=-1, keepdims=True), fmt)
    q = mx.quantize_elements(xb / np.exp2(exp), fmt, 2).astype(np.float32)
    # the padding of a short last block is no element: its codes are not stored
    return q.astype(DTYPES[element][0]).view(np.uint8).reshape(rows.shape[0], -1)[:, :length].reshape(-1)


def escape_bits(p: np.ndarray, width: int) -> tuple[int, float]:
    """The fewest bits an element of a ``k``-bit rank + escape layout (escaped codes at ``width``)."""
    srt = np.sort(p)[::-1]
    best = (width, float(width))
    for k in range(1, width):
        bits = k + float(srt[(1 << k) - 1:].sum()) * width
        if bits < best[1]:
            best = (k, bits)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", required=True)
    ap.add_argument("--rows", help="a file_sizes.py --json run (its MXFP6/MXFP4 ratios beside)")
    args = ap.parse_args()
    measured = {}
    if args.rows:
        for r in json.load(open(args.rows)):
            if "ratio" in r:
                measured[(r["model"], r["preset"])] = r["ratio"]
    preset = {"fp6_e3m2": "MXFP6_E3M2", "fp6_e2m3": "MXFP6_E2M3", "fp4_e2m1": "MXFP4"}
    print("| model | element | elements | entropy (bits) | rank + escape (k, bits) | stored | "
          "file now | file at the entropy | file at rank + escape |")
    print("|---|---|---:|---:|---|---:|---:|---:|---:|")
    for spec in args.models.split(","):
        path, _ = fs.model_source(spec)
        model = onnx.load(path)
        fp32 = fs.total_bytes(path)
        weights = [numpy_helper.to_array(t) for t in model.graph.initializer]
        weights = [w for w in weights if w.dtype == np.float32 and w.ndim >= 2 and w.size >= 64]
        if not weights:  # (weights in Constant nodes: not read here)
            continue
        for element, (_, width) in DTYPES.items():
            codes = np.concatenate([codes_of(w, element) for w in weights])
            p = np.bincount(codes, minlength=256) / codes.size
            p = p[p > 0]
            h = float(-(p * np.log2(p)).sum())
            k, esc = escape_bits(p, width)
            now = measured.get((spec, preset[element]))
            # a code bit less an element is codes.size / 8 bytes less of the file
            at = "" if now is None else f"{now - (width - h) * codes.size / 8 / fp32:.4f}"
            at_esc = "" if now is None else f"{now - (width - esc) * codes.size / 8 / fp32:.4f}"
            print(f"| {spec} | {element} | {codes.size} | {h:.2f} | {k}, {esc:.2f} | {width} | "
                  f"{'' if now is None else f'{now:.4f}'} | {at} | {at_esc} |")


if __name__ == "__main__":
    main()
