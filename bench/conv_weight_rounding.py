"""Which Conv's weight rounding alone costs a model its output, and why (issue 27, branch u2netp).

For a model of bench/newmodels.py (or any ONNX file with ``--feeds-from``), on ``--feeds`` of its
calibration feeds (seed 1): every Conv's recorded float input is run through that one Conv twice
in onnxruntime, with its float weight and with the weight rounded per output channel to symmetric
int8 (the A8W8/A16W8 weight grid), and the Conv's output SQNR under that rounding is printed beside
the weight's own SQNR, the largest input-channel mean |mean| (a near-constant "DC" input channel),
and the ratio of the largest input column's max |w| to the median column's. A NumPy/onnxruntime
simulation, no quantization pipeline: it names the layers whose weight grid is ill-conditioned by
the data it meets (a large constant input channel whose large weights cancel in float), which a
weight-only SQNR cannot see. ``--quantize PRESETS`` then quantizes the model with repair off, as
is and with ``--exclude`` nodes kept float, and prints the task metric, output cosine and CPU s.

    NEWMODELS11_SRC=/work/cache/newmodels11/src PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 \\
        python bench/conv_weight_rounding.py u2netp --feeds 2 --quantize A16W8,A8W8,MXFP8_E4M3 --exclude Conv_787
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
import newmodels as nm  # noqa: E402


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def int8_per_channel(w: np.ndarray) -> np.ndarray:
    """Symmetric int8 per output channel (axis 0), dequantized: the integer presets' Conv weight grid."""
    mx = np.abs(w).max(axis=tuple(range(1, w.ndim)), keepdims=True)
    scale = np.where(mx > 0, mx / 127.0, 1.0)
    return (np.clip(np.round(w / scale), -127, 127) * scale).astype(np.float32)


def _sqnr(ref: np.ndarray, test: np.ndarray) -> float:
    err = float(np.sum((ref.astype(np.float64) - test) ** 2))
    return 10 * np.log10(float(np.sum(ref.astype(np.float64) ** 2)) / max(err, 1e-30))


def scan(model: onnx.ModelProto, feeds: list[dict]) -> list[tuple]:
    """One row per Conv with a constant 4-D weight: (output SQNR dB, weight SQNR dB, node, weight shape,
    largest input-channel |mean|, input column max|w| ratio max/median)."""
    g = model.graph
    inits = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    convs = [n for n in g.node if n.op_type == "Conv" and n.input[1] in inits and inits[n.input[1]].ndim == 4]
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    have = {o.name for o in probe.graph.output}
    probe.graph.output.extend(onnx.ValueInfoProto(name=n.input[0]) for n in convs if n.input[0] not in have)
    s = _session(probe)
    wanted = sorted({n.input[0] for n in convs})
    recorded = [dict(zip(wanted, s.run(wanted, f))) for f in feeds]
    rows = []
    for n in convs:
        w = inits[n.input[1]]
        wq = int8_per_channel(w)
        extra = [inits[n.input[2]]] if len(n.input) > 2 and n.input[2] else []
        outs = []
        for weight in (w, wq):
            ins = [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, None)]
            node = helper.make_node("Conv", ["x", "w"] + (["b"] if extra else []), ["y"])
            node.attribute.extend(n.attribute)
            init = [numpy_helper.from_array(weight, "w")] + [numpy_helper.from_array(b, "b") for b in extra]
            one = helper.make_model(helper.make_graph([node], "one", ins, [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)], init),
                                    opset_imports=[helper.make_opsetid("", 13)])
            cs = _session(one)
            outs.append(np.concatenate([cs.run(None, {"x": r[n.input[0]]})[0].ravel() for r in recorded]))
        x = np.concatenate([r[n.input[0]] for r in recorded])
        dc = float(np.abs(x.mean(axis=(0, 2, 3))).max())
        cols = np.abs(w).max(axis=(0, 2, 3))
        rows.append((_sqnr(outs[0], outs[1]), _sqnr(w, wq), n.name, tuple(w.shape), dc, float(cols.max() / max(np.median(cols), 1e-30))))
    return sorted(rows)


def quantize_rows(name: str, path: Path, presets: list[str], exclude: tuple[str, ...], calib: int, held: int) -> None:
    import onnxptq
    from onnxptq.config.presets import get_preset
    from testkit import zoo

    _, make, metric_name, metric = nm.MODELS[name]
    cal, hold = make(calib, 1), make(held, 1000)
    ref = nm._memo(zoo.session_runner(path), hold)
    out_dir = Path("/work/cache/u2netp/conv_weight_rounding")
    out_dir.mkdir(parents=True, exist_ok=True)
    for preset in presets:
        for excl in ((), exclude):
            out = out_dir / f"{name}.{preset}.{'excl' if excl else 'plain'}.onnx"
            c0 = time.process_time()
            cfg = dataclasses.replace(get_preset(preset), repair=False, nodes_to_exclude=excl)
            onnxptq.quantize(str(path), cfg, data=list(cal), output=str(out))
            cpu = time.process_time() - c0
            test = nm._memo(zoo.session_runner(out), hold)
            print(f"{name} {preset} repair off, float {list(excl) or 'none'}: {metric_name} {metric(ref, test, hold, None):.4f}, "
                  f"cosine {zoo.output_cosine(ref, test, hold):.5f} ({cpu:.1f} CPU s quantize)", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--feeds", type=int, default=2)
    ap.add_argument("--top", type=int, default=8)
    ap.add_argument("--quantize", default="")
    ap.add_argument("--exclude", default="")
    ap.add_argument("--calib", type=int, default=12)
    ap.add_argument("--held", type=int, default=8)
    a = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)
    rel, make, *_ = nm.MODELS[a.model]
    path = nm.SRC / rel
    model = onnx.load(str(path))
    c0 = time.process_time()
    rows = scan(model, make(a.feeds, 1))
    print(f"{a.model}: {len(rows)} Convs, int8 per-channel weight rounding alone ({time.process_time() - c0:.1f} CPU s)")
    print("out SQNR dB | weight SQNR dB | node | weight | max input-channel |mean| | column max|w| max/median")
    for r in rows[: a.top]:
        print(f"{r[0]:6.1f} | {r[1]:6.1f} | {r[2]} | {r[3]} | {r[4]:.3g} | {r[5]:.1f}")
    if a.quantize:
        quantize_rows(a.model, path, a.quantize.split(","), tuple(x for x in a.exclude.split(",") if x), a.calib, a.held)


if __name__ == "__main__":
    main()
