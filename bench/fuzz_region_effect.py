"""What a structure-rule change does to outputs (fuzz20): quantize each model with each preset (repair off, so the
figure is the plan's own), and print the worst float output's cosine against float on fresh feeds and how many
planned activations a normalization or softmax makes inside (reductions, roots, Exp/Log, Erf/Tanh). Run once per
library tree and compare the lines:

    PYTHONPATH=/work/main/src:.:bench OMP_NUM_THREADS=1 python bench/fuzz_region_effect.py --presets BF16,A8W8 MODEL.onnx ...
    PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 python bench/fuzz_region_effect.py --presets BF16,A8W8 MODEL.onnx ...

Feeds: unit-normal float inputs with a per-channel offset (``--offset``: a common mode normalizations remove),
symbolic dims 1 (batch) or 12; int inputs 0/1 (masks) or small ids.
"""

from __future__ import annotations

import _common  # noqa: F401  (puts the repository root on sys.path)
import argparse
import logging

import numpy as np
import onnx
import onnxruntime as ort

INSIDE = frozenset("ReduceMean ReduceSum ReduceSumSquare ReduceL2 ReduceMax GlobalAveragePool Sqrt Reciprocal Pow Exp Log Erf Tanh Softplus".split())


def _value(info: onnx.ValueInfoProto, rng: np.random.Generator, offset: float) -> np.ndarray:
    """One input: symbolic dims 1 (the first) or 12; floats unit-normal plus ``offset`` × a ramp over axis 1."""
    tt = info.type.tensor_type
    shape = [d.dim_value or (1 if j == 0 else 12) for j, d in enumerate(tt.shape.dim)]
    dt = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
    if dt.kind == "b":
        return np.ones(shape, bool)
    if dt.kind != "f":
        return rng.integers(0, 2 if "mask" in info.name else 40, shape).astype(dt)
    ramp = np.linspace(-1, 1, shape[1]).reshape([1, -1] + [1] * (len(shape) - 2)) if len(shape) > 1 else 0.0
    return (rng.normal(0, 1, shape) + offset * ramp).astype(dt)


def feeds(model: onnx.ModelProto, n: int, seed: int, offset: float) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    names = {i.name for i in model.graph.initializer}
    return [{i.name: _value(i, rng, offset) for i in model.graph.input if i.name not in names} for _ in range(n)]


def worst_cosine(ref: list[list[np.ndarray]], got: list[list[np.ndarray]]) -> float:
    """The lowest cosine over the float outputs, each pooled over the feeds."""
    worst = 1.0
    for k, first in enumerate(ref[0]):
        x, y = (np.concatenate([r[k].astype(np.float64).ravel() for r in runs]) for runs in (ref, got))
        den = np.linalg.norm(x) * np.linalg.norm(y)
        if first.dtype.kind == "f" and den > 0:
            worst = min(worst, float(x @ y / den))
    return worst


def main() -> None:
    import onnxptq
    from onnxptq import get_preset

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag, how in (("models", {"nargs": "+"}), ("--presets", {"default": "BF16,FP16,A8W8,MX9"}),
                      ("--offset", {"type": float, "default": 4.0, "help": "the common mode a normalization removes"})):
        ap.add_argument(flag, **how)
    a = ap.parse_args()
    logging.disable(logging.WARNING)
    for path in a.models:
        m = onnx.load(path)
        calib, fresh = feeds(m, 24, 0, a.offset), feeds(m, 16, 1, a.offset)
        f = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        ref = [f.run(None, fd) for fd in fresh]
        for preset in a.presets.split(","):
            res = onnxptq.quantize(m, get_preset(preset).replace(repair=False), data=calib)
            q = ort.InferenceSession(res.model.SerializeToString(), providers=["CPUExecutionProvider"])
            worst = worst_cosine(ref, [q.run(None, fd) for fd in fresh])
            prod = {o: n.op_type for n in res.model.graph.node for o in n.output}
            src_prod = {o: n.op_type for n in m.graph.node for o in n.output}
            inside = sorted(t.name for t in res.plan.tensors.values()
                            if t.role == "activation" and (prod.get(t.name) in INSIDE or src_prod.get(t.name) in INSIDE))
            print(f"{path.split('/')[-1]:28s} {preset:6s} cosine {worst:.6f}  planned inside: {len(inside)} {inside[:6]}", flush=True)


if __name__ == "__main__":
    main()
