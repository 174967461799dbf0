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


def feeds(model: onnx.ModelProto, n: int, seed: int, offset: float) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = []
    inits = {i.name for i in model.graph.initializer}
    for _ in range(n):
        f = {}
        for i in model.graph.input:
            if i.name in inits:
                continue
            tt = i.type.tensor_type
            shape = [d.dim_value if d.dim_value else (1 if j == 0 else 12) for j, d in enumerate(tt.shape.dim)]
            dt = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
            if dt.kind == "f":
                bias = offset * np.linspace(-1, 1, shape[1]).reshape([1, -1] + [1] * (len(shape) - 2)) if len(shape) > 1 else 0.0
                f[i.name] = (rng.normal(0, 1, shape) + bias).astype(dt)
            elif dt.kind == "b":
                f[i.name] = np.ones(shape, bool)
            else:
                f[i.name] = rng.integers(0, 2 if "mask" in i.name else 40, shape).astype(dt)
        out.append(f)
    return out


def main() -> None:
    import onnxptq
    from onnxptq import get_preset

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--presets", default="BF16,FP16,A8W8,MX9")
    ap.add_argument("--offset", type=float, default=4.0)
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
            got = [q.run(None, fd) for fd in fresh]
            worst = 1.0
            for k in range(len(ref[0])):
                x = np.concatenate([r[k].astype(np.float64).ravel() for r in ref])
                y = np.concatenate([g[k].astype(np.float64).ravel() for g in got])
                if ref[0][k].dtype.kind == "f" and np.linalg.norm(x) * np.linalg.norm(y) > 0:
                    worst = min(worst, float(x @ y / (np.linalg.norm(x) * np.linalg.norm(y))))
            prod = {o: n.op_type for n in res.model.graph.node for o in n.output}
            src_prod = {o: n.op_type for n in m.graph.node for o in n.output}
            inside = sorted(t.name for t in res.plan.tensors.values()
                            if t.role == "activation" and (prod.get(t.name) in INSIDE or src_prod.get(t.name) in INSIDE))
            print(f"{path.split('/')[-1]:28s} {preset:6s} cosine {worst:.6f}  planned inside: {len(inside)} {inside[:6]}", flush=True)


if __name__ == "__main__":
    main()
