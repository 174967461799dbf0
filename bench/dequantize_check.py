"""onnxptq.conversion.dequantize_dynamic on real models: float models come back byte-identical (the rewrite touches
only onnxruntime's dynamic-int8 patterns); int8-only models come back float, and the recovered model's outputs are
compared with the shipped int8 model's on random feeds of the declared shapes (dynamic dims set to --dim).

    PYTHONPATH=src:. OMP_NUM_THREADS=1 python bench/dequantize_check.py MODEL.onnx [MODEL.onnx ...] [--dim 8]

Prints one line per model: identical / recovered (the ops rewritten, the output cosine) / the error.
"""

from __future__ import annotations

import argparse
import collections
import sys

import numpy as np
import onnx

from onnxptq.conversion.dequantize import dequantize_dynamic
from onnxptq.graph.check import quantized_node_counts

DTYPES = {1: np.float32, 6: np.int32, 7: np.int64, 9: np.bool_, 10: np.float16}


def _feed(model: onnx.ModelProto, dim: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    inits = {t.name for t in model.graph.initializer}
    feed = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        t = vi.type.tensor_type
        shape = [d.dim_value if d.dim_value > 0 else dim for d in t.shape.dim]
        dtype = DTYPES.get(t.elem_type, np.float32)
        feed[vi.name] = (rng.integers(0, 4, shape) if np.issubdtype(dtype, np.integer) else rng.normal(0, 1, shape)).astype(dtype)
    return feed


def check(path: str, dim: int) -> str:
    import onnxruntime as ort

    model = onnx.load(path)
    before = quantized_node_counts(model)
    try:
        out = dequantize_dynamic(model, path)
    except Exception as exc:  # reported, the next model goes on
        return f"{path}: {type(exc).__name__}: {exc}"
    if not before:
        same = out.SerializeToString() == model.SerializeToString()
        return f"{path}: float model, {'identical' if same else 'CHANGED'} ({len(model.graph.node)} nodes)"
    feed = _feed(model, dim, np.random.default_rng(0))
    a = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)
    b = ort.InferenceSession(out.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)
    cos = [float(np.dot(x.ravel(), y.ravel()) / (np.linalg.norm(x) * np.linalg.norm(y) + 1e-30))
           for x, y in zip(a, b) if np.issubdtype(x.dtype, np.floating)]
    same = [float(np.mean(x == y)) for x, y in zip(a, b) if not np.issubdtype(x.dtype, np.floating)]
    ops = collections.Counter(n.op_type for n in out.graph.node)
    return (f"{path}: int8 ({', '.join(f'{k} {op}' for op, k in before.most_common())}) -> float "
            f"({ops['MatMul']} MatMul, {ops['LSTM']} LSTM), vs the int8 model: "
            + (f"worst output cosine {min(cos):.5f}" if cos else "")
            + (f"{'; ' if cos else ''}integer outputs equal {min(same):.3f}" if same else ""))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="+")
    ap.add_argument("--dim", type=int, default=8)
    a = ap.parse_args()
    for path in a.models:
        print(check(path, a.dim), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
