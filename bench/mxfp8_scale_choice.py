"""MXFP8's dot-product operands, tensor by tensor: what each scale and element choice costs (mxfp820).

For each ``--sources`` row (bench/mxfp8_attention.py's rows) one plain MXFP8_E4M3 build (``repair=False``) names the
activations it encodes (its quantizer calls' data inputs, each with its block axis); the same build with every call
replaced by ``Identity`` is the float model as prepared, run on ``--fresh`` feeds (2 by default) to capture those tensors. Each
is then fake-quantized by the NumPy reference on its own block axis, 32 a block, as:

* ``floor``: OCP's exponent ``floor(log2 amax) − 8`` (the preset; microxcaling's);
* ``round``: ``round(log2 amax) − 8`` (one up where the maximum's mantissa is ≥ √2);
* ``ceil``: the smallest exponent whose grid holds the maximum, ``ceil(log2(amax / 448))`` (NVIDIA's MXFP8 recipe,
  our ``scale_search=3``);
* ``nosat``: OCP's exponent with the E4M3 grid continued past 448 (480, 512 kept): what saturation alone costs;
* ``amax``: a scale of exactly ``amax / 448`` (not a power of two, so not MX: an FP32 block scale, the bound of
  what any scale choice can give an E4M3 element);
* ``int8``: MXINT8 (OCP's exponent, 6 fraction bits of the block maximum).

The figure is the SQNR in dB (10·log10 Σx² / Σ(x − q)²) over the captured feeds, with the tensor's reader: a
depthwise convolution (one input channel per group: each output sums only kh·kw products), another convolution,
or a MatMul/Gemm, and its reduction length.

    PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 nice -n 5 python bench/mxfp8_scale_choice.py --sources rec --fresh 2 --json out.json
"""

from __future__ import annotations

import copy
import json
from typing import Any

import ml_dtypes
import numpy as np
import onnx

import _common  # noqa: F401  (the repository root on sys.path)

from mxfp8_attention import load_row, plain_config, row_arguments, write_json
from mxfp8_floatback import OUR_DOMAIN
from testkit import zoo

VARIANTS = ("floor", "round", "ceil", "nosat", "amax", "int8")


def quantize(x: np.ndarray, axis: int, variant: str) -> np.ndarray:
    """``x`` (float32) fake-quantized as ``variant`` (module docstring), blocks of 32 along ``axis``."""
    from onnxptq.formats import fake_quantize
    from onnxptq.formats.blocks import from_blocks, to_blocks

    if variant == "int8":
        return fake_quantize(x, "mx", element_dtype="int8", axis=axis, block_size=32, rounding_mode=2)
    if variant == "floor":
        return fake_quantize(x, "mx", element_dtype="fp8_e4m3", axis=axis, block_size=32, rounding_mode=2)
    if variant == "ceil":
        return fake_quantize(x, "mx", element_dtype="fp8_e4m3", axis=axis, block_size=32, rounding_mode=2, scale_search=3)
    ax = axis % x.ndim if x.ndim > 1 else 0
    blocks, view = to_blocks(np.atleast_1d(x).astype(np.float32), ax, 32)
    b = blocks.astype(np.float64)
    amax = np.abs(b).max(axis=-1, keepdims=True)
    with np.errstate(divide="ignore"):
        lg = np.log2(np.where(amax > 0, amax, 1.0))
    exp = (np.round(lg) if variant == "round" else np.floor(lg)) - 8
    exp = np.maximum(exp, -127)
    if variant == "amax":
        exp = np.log2(np.where(amax > 0, amax, 1.0) / 448.0)
    v = b / np.exp2(exp)
    if variant == "nosat":  # E4M3's grid without its top: 3 mantissa bits at every normal magnitude
        a = np.abs(v)
        e = np.maximum(np.floor(np.log2(np.where(a > 0, a, 1.0))), -6)
        q = np.copysign(np.rint(a / np.exp2(e - 3)) * np.exp2(e - 3), v)
    else:
        q = np.minimum(np.abs(v), 448.0).astype(np.float32).astype(ml_dtypes.float8_e4m3fn).astype(np.float64)
        q = np.copysign(q, v)
    y = (q * np.exp2(exp)).astype(np.float32)
    return from_blocks(y, view).reshape(x.shape)


def reader(model: onnx.ModelProto, name: str, shapes: dict[str, np.ndarray]) -> tuple[str, int | None]:
    """The kind of dot product reading ``name`` (through its quantizer call) and its reduction length."""
    inits = {i.name: i for i in model.graph.initializer}
    quantized = {n.output[0] for n in model.graph.node if n.domain == OUR_DOMAIN and n.input and n.input[0] == name}
    for node in model.graph.node:
        if not (set(node.input) & (quantized | {name})):
            continue
        if node.op_type == "Conv":
            group = next((a.i for a in node.attribute if a.name == "group"), 1)
            kernel = next((list(a.ints) for a in node.attribute if a.name == "kernel_shape"), None)
            w = inits.get(node.input[1])
            if kernel is None and w is not None:
                kernel = list(w.dims[2:])
            x = shapes.get(name)
            channels = int(x.shape[1]) if x is not None and x.ndim > 1 else None
            k = int(np.prod(kernel)) * (channels // group if channels else 1) if kernel is not None else None
            return ("depthwise conv" if group > 1 and channels == group else "conv"), k
        if node.op_type in ("MatMul", "Gemm"):
            x = shapes.get(name)
            return "matmul", (int(x.shape[-1]) if x is not None and x.ndim else None)
    return "other", None


def main(argv: list[str] | None = None) -> int:
    import onnxptq

    ap = row_arguments(__doc__.split("\n\n")[0])
    ap.set_defaults(fresh=2)
    args = ap.parse_args(argv)
    out: list[dict[str, Any]] = []
    for source in args.sources.split(","):
        row = load_row(source, args.calib, args.fresh)
        plain = onnxptq.quantize(row.path, plain_config(), data=row.calib)
        calls = {n.input[0]: next((a.i for a in n.attribute if a.name == "axis"), 1)
                 for n in plain.model.graph.node if n.domain == OUR_DOMAIN and len(n.output) == 1}
        probe = copy.deepcopy(plain.model)
        for node in probe.graph.node:
            if node.domain == OUR_DOMAIN and len(node.output) == 1:
                node.op_type, node.domain = "Identity", ""
                del node.attribute[:]
                del node.input[1:]
        known = {o.name for o in probe.graph.output}
        probe.graph.output.extend(onnx.ValueInfoProto(name=t) for t in calls if t not in known)
        run = zoo.session_runner(probe)
        names = [o.name for o in probe.graph.output]
        captured: dict[str, list[np.ndarray]] = {t: [] for t in calls}
        for feed in row.fresh:
            for n, v in zip(names, run(feed)):
                if n in captured and isinstance(v, np.ndarray) and v.dtype == np.float32:
                    captured[n].append(v)
        for t, axis in calls.items():
            if not captured[t]:
                continue
            kind, k = reader(plain.model, t, {t: captured[t][0]})
            rec: dict[str, Any] = {"row": row.name, "tensor": t, "reader": kind, "k": k, "axis": axis}
            for variant in VARIANTS:
                sig = err = 0.0
                for x in captured[t]:
                    q = quantize(x, axis, variant).astype(np.float64)
                    finite = np.isfinite(x)
                    sig += float(np.sum(x[finite].astype(np.float64) ** 2))
                    err += float(np.sum((x[finite] - q[finite]) ** 2))
                rec[variant] = round(10 * np.log10(sig / err), 2) if err > 0 and sig > 0 else None
            out.append(rec)
            print(json.dumps(rec), flush=True)
        by: dict[str, list[dict[str, Any]]] = {}
        for r in out:
            if r["row"] == row.name:
                by.setdefault(r["reader"], []).append(r)
        for kind, rs in by.items():
            med = {v: round(float(np.median([r[v] for r in rs if r[v] is not None])), 2) for v in VARIANTS}
            print(json.dumps({"row": row.name, "reader": kind, "tensors": len(rs), "median_sqnr_db": med}), flush=True)
    write_json(out, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
