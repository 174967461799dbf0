"""Per-group SQNR of every per-group normalizer's input under one per-tensor uint8 grid (issue 27, branch terrain8).

For a model of bench/newmodels.py: the float activations that an InstanceNormalization reads
(directly, or through a Reshape to [N, G, -1]: a written-out GroupNorm) on ``--feeds`` of its feeds;
each gets one asymmetric uint8 grid over its min/max on all of them, and its worst (sample, group)
SQNR as the normalizer sees it (group variance + epsilon over the variance of the rounding error,
pipeline/norm_groups.py) is printed beside its whole-tensor SQNR and its group standard deviations'
spread. A NumPy simulation over onnxruntime's float values (no quantization pipeline), so it tells
what a per-tensor 8-bit grid does to these tensors whatever the plan then decides.

    python bench/norm_group_sqnr.py terrain_unet --feeds 4
"""

from __future__ import annotations

import argparse
import collections

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

import newmodels as nm


def normalizer_inputs(model: onnx.ModelProto) -> dict[str, tuple[int | None, float]]:
    """``{tensor: (groups or None for per channel, epsilon)}`` for each InstanceNormalization's input."""
    g = model.graph
    producer = {o: n for n in g.node for o in n.output}
    inits = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    out: dict[str, tuple[int | None, float]] = {}
    for n in g.node:
        if n.op_type != "InstanceNormalization":
            continue
        eps = next((a.f for a in n.attribute if a.name == "epsilon"), 1e-5)
        r = producer.get(n.input[0])
        shape = inits.get(r.input[1]) if r is not None and r.op_type == "Reshape" else None
        if shape is not None and shape.size == 3:
            out[r.input[0]] = (int(shape[1]), eps)
        else:
            out[n.input[0]] = (None, eps)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--feeds", type=int, default=4)
    a = ap.parse_args()
    rel, make, *_ = nm.MODELS[a.model]
    model = onnx.load(str(nm.SRC / rel))
    wanted = normalizer_inputs(model)
    have = {o.name for o in model.graph.output}
    model.graph.output.extend(onnx.ValueInfoProto(name=t) for t in wanted if t not in have)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = list(wanted)
    values = [dict(zip(names, session.run(names, f))) for f in make(a.feeds, 1)]
    rows = []
    for t, (groups, eps) in wanted.items():
        lo = min(0.0, min(float(v[t].min()) for v in values))
        hi = max(0.0, max(float(v[t].max()) for v in values))
        scale = (hi - lo) / 255 or 1.0
        zp = np.round(-lo / scale)
        worst = whole = np.inf
        spread = 1.0
        for v in values:
            x = v[t].astype(np.float64)
            q = (np.clip(np.round(x / scale) + zp, 0, 255) - zp) * scale
            n, c = x.shape[:2]
            xg, eg = x.reshape(n, groups or c, -1), (q - x).reshape(n, groups or c, -1)
            var = xg.var(axis=2)
            worst = min(worst, float(np.min(10 * np.log10((var + eps) / np.maximum(eg.var(axis=2), 1e-300)))))
            whole = min(whole, float(10 * np.log10(np.mean(x * x) / max(np.mean((q - x) ** 2), 1e-300))))
            sd = np.sqrt(var)
            spread = max(spread, float(sd.max() / max(sd.min(), 1e-30)))
        rows.append((worst, whole, spread, t, lo, hi))
    rows.sort()
    bands = collections.Counter(b for r in rows for b in (6, 10, 20) if r[0] < b)
    print(f"{a.model}: {len(rows)} normalizer inputs; worst group below 6 dB: {bands[6]}, below 10: {bands[10]}, below 20: {bands[20]}")
    for worst, whole, spread, t, lo, hi in rows:
        print(f"{worst:7.1f} dB worst group  {whole:5.1f} dB whole  group-std spread {spread:9.3g}  {t}  [{lo:.3g}, {hi:.3g}]")


if __name__ == "__main__":
    main()
