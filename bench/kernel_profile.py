"""Where onnxruntime's CPU provider spends the time of a float and a quantized PP-OCR model, per kernel.

Quantizes PP-OCRv4 rec or PP-OCR cls with A8W8 (64 rendered lines, seed 1; ``--runtime cpu`` or
``npu``), then runs the float and the quantized model with onnxruntime's profiler (one intra-op
thread, ``--runs`` inferences of one rendered line) and prints, per op type of the optimised graph,
the summed median kernel time, and with ``--nodes`` the Conv-like kernels one by one, the float
model's and the quantized model's side by side (both follow the graph order, so the rows match on
these two models; QLinearConv against Conv/FusedConv shows which layers are slower in integers).

``--lut`` also times a variant of the quantized model in which every ``DequantizeLinear →
HardSwish/HardSigmoid → QuantizeLinear`` (scalar parameters) is replaced by ``Cast(int32) →
Gather`` on a 256-entry uint8 table computed from the same float function: bit-exact, standard
ONNX, and the question of issue 16 was whether it is faster.

    python bench/kernel_profile.py [--model cls] [--runs 50] [--nodes] [--lut] [--runtime cpu]

The machine is shared: kernel times under load are inflated alike for both models, so compare
the two columns, not the microseconds with another run.
"""

from __future__ import annotations

import _common  # the repository root on sys.path (testkit), the bench's session helper
import dataclasses
import argparse
import collections
import json
import os
import statistics
import tempfile

import numpy as np
import onnx
from onnx import helper, numpy_helper


def profile(model: str, feed: dict[str, np.ndarray], runs: int) -> list[tuple[str, str, float]]:
    """(op type, node name, median µs) of every kernel onnxruntime ran, in execution order."""
    sess = _common.session(model, 1, inter_op_threads=1, profile=os.path.join(tempfile.mkdtemp(prefix="onnxptq_profile_"), "p"))
    for _ in range(runs):
        sess.run(None, feed)
    with open(sess.end_profiling()) as f:
        events = json.load(f)
    times: dict[str, list[float]] = collections.defaultdict(list)
    ops: dict[str, str] = {}
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            times[e["name"]].append(e["dur"])
            ops[e["name"]] = e["args"]["op_name"]
    return [(ops[k], k[: -len("_kernel_time")], statistics.median(v)) for k, v in times.items()]


def lookup_tables(model: onnx.ModelProto) -> onnx.ModelProto:
    """``DQ → HardSwish/HardSigmoid → Q`` (scalar, 8-bit) as ``Cast(int32) → Gather`` on a table."""
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    producer = {o: n for n in g.node for o in n.output}
    readers: dict[str, list[onnx.NodeProto]] = collections.defaultdict(list)
    for n in g.node:
        for i in n.input:
            readers[i].append(n)
    replace: dict[int, list[onnx.NodeProto]] = {}
    drop: set[int] = set()
    for node in g.node:
        if node.op_type not in ("HardSwish", "HardSigmoid"):
            continue
        dq = producer.get(node.input[0])
        out = readers.get(node.output[0], [])
        if dq is None or dq.op_type != "DequantizeLinear" or len(out) != 1 or out[0].op_type != "QuantizeLinear":
            continue
        q = out[0]
        if len(readers[dq.output[0]]) != 1 or not all(n in inits for n in (*dq.input[1:3], *q.input[1:3])):
            continue
        s_in, z_in = (numpy_helper.to_array(inits[n]) for n in dq.input[1:3])
        s_out, z_out = (numpy_helper.to_array(inits[n]) for n in q.input[1:3])
        if s_in.size != 1 or s_out.size != 1 or z_in.dtype != np.uint8 or z_out.dtype != np.uint8:
            continue
        x = ((np.arange(256, dtype=np.int32) - int(z_in)).astype(np.float32) * s_in.astype(np.float32)).astype(np.float32)
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type == "HardSwish":
            y = x * np.clip(x * np.float32(1 / 6) + np.float32(0.5), 0, 1)
        else:
            y = np.clip(np.float32(attrs.get("alpha", 0.2)) * x + np.float32(attrs.get("beta", 0.5)), 0, 1)
        table = np.clip(np.rint(y / s_out.astype(np.float32)) + int(z_out), 0, 255).astype(np.uint8)
        g.initializer.append(numpy_helper.from_array(table, node.name + "_table"))
        replace[id(node)] = [
            helper.make_node("Cast", [dq.input[0]], [node.name + "_index"], to=onnx.TensorProto.INT32, name=node.name + "_cast"),
            helper.make_node("Gather", [node.name + "_table", node.name + "_index"], [q.output[0]], axis=0, name=node.name + "_lut"),
        ]
        drop |= {id(dq), id(q)}
    nodes = [m for n in g.node if id(n) not in drop for m in replace.get(id(n), [n])]
    del g.node[:]
    g.node.extend(nodes)
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="cls", choices=["cls", "rec"])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--runtime", default="cpu")
    parser.add_argument("--nodes", action="store_true", help="Conv-like kernels one by one, float beside quantized")
    parser.add_argument("--lut", action="store_true", help="also the lookup-table variant of the quantized model")
    args = parser.parse_args()

    import onnxptq
    from testkit import ocr
    from testkit.models import model_path

    path = str(model_path(args.model))
    if args.model == "rec":
        calib = ocr.render_lines(64, seed=1, characters=ocr.load_characters(onnx.load(path)))[0]
    else:
        calib = ocr.render_cls(64, seed=1)[0]
    config = onnxptq.get_preset("A8W8").replace(runtime=args.runtime)
    config = config.replace(calibration=dataclasses.replace(config.calibration, progress=False))
    quantized = onnxptq.quantize(path, config, [{"x": calib[i:i + 8]} for i in range(0, 64, 8)], eval_samples=0).model
    out = tempfile.mkdtemp(prefix="onnxptq_kernels_")
    variants = {"float": path, "A8W8": os.path.join(out, "a8w8.onnx")}
    onnx.save(quantized, variants["A8W8"])
    if args.lut:
        variants["A8W8 + lookup tables"] = os.path.join(out, "lut.onnx")
        onnx.save(lookup_tables(quantized), variants["A8W8 + lookup tables"])
    feed = {"x": calib[:1]}
    outputs = {k: _common.session(f).run(None, feed)[0] for k, f in variants.items()}
    if args.lut:
        same = np.array_equal(outputs["A8W8"], outputs["A8W8 + lookup tables"])
        tables = sum(n.op_type == "Gather" for n in onnx.load(variants["A8W8 + lookup tables"]).graph.node)
        print(f"{tables} DQ → HardSwish/HardSigmoid → Q replaced by lookup tables; output identical to the A8W8 model's: {same}")
    rows = {k: profile(f, feed, args.runs) for k, f in variants.items()}
    print(f"load average {os.getloadavg()[0]:.1f}; median µs per kernel over {args.runs} runs, summed by op type\n")
    for k, r in rows.items():
        by_op: dict[str, float] = collections.Counter()
        for op, _, us in r:
            by_op[op] += us
        print(f"{k}: total {sum(by_op.values()):.0f} µs, " + ", ".join(f"{op} {us:.0f}" for op, us in by_op.most_common()))
    if args.nodes:
        conv = ("Conv", "FusedConv", "QLinearConv")
        left = [r for r in rows["float"] if r[0] in conv]
        right = [r for r in rows["A8W8"] if r[0] in conv]
        print("\n| float kernel | µs | A8W8 kernel | µs | node |\n|---|---:|---|---:|---|")
        for (op_a, _, a), (op_b, name, b) in zip(left, right):
            print(f"| {op_a} | {a:.0f} | {op_b} | {b:.0f} | {name} |")


if __name__ == "__main__":
    main()
