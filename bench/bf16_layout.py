"""Issue 26 item 3 (BF16 ≤ 1.2× float): where a BF16 Conv net's extra time goes, and what the
rounding points would cost in other forms.

A BF16 model rounds each Conv input with a ``Cast(bfloat16) → Cast(float)`` pair. onnxruntime's
CPU NCHWc transformer blocks Conv chains (and fuses their HardSwish/Relu and residual Add), but a
Cast has no NCHWc kernel: every pair costs a ``ReorderOutput`` before it and a ``ReorderInput``
after it besides its own two passes, and the Conv loses its fused activation. This script
shows that structure (the optimised graph's op counts, float against BF16) and times the BF16
file against the same graph with every activation Cast pair rewritten as

* ``dwconv``: the Veltkamp split ``hi = c + (x - c)``, ``c = x·(2^16 + 1)``, written as two
  depthwise 1×1 Convs with fused Sum inputs (``b = Conv(x, -K) + x``, ``hi = Conv(x, K) + b``),
  ops the NCHWc transformer keeps blocked (only on 4-D tensors of a channel count divisible by 8;
  others keep their Cast pair); bf16's round-to-nearest-even on every normal float
  below 2^111 (checked here against ml_dtypes), not elsewhere: -0 gives +0, a subnormal keeps 8
  significant bits (bf16 has fewer there), ±Inf and |x| >= ~2^112 give NaN;
* ``dwconv-between``: ``dwconv`` only where the pair sits between blocked ops (its input from a
  Conv, directly or through an op the NCHWc transformer keeps blocked; every reader a Conv or
  an Add), the other pairs kept;
* ``arith``: the same split with elementwise ``Mul``/``Sub`` (onnxruntime keeps them in NCHW);
* ``none``: no rounding at all (the float model with BF16 weights: the floor of any form).

For each form: thread-CPU ratio to float (median of per-round ratios, rounds interleaved, one
intra-op thread) and whether its output is bit-identical to the Cast-pair file's on the feed.

``--shapes 16x384,64x56,...`` times instead one built block per ``CxHW``: a 3×3 Conv + HardSwish,
the rounding (none, Cast pair, ``dwconv``), a 1×1 Conv; ratios to the block without rounding.

    PYTHONPATH=src:. OMP_NUM_THREADS=1 python bench/bf16_layout.py FLOAT.onnx BF16.onnx [--runs 15]
    PYTHONPATH=src:. OMP_NUM_THREADS=1 python bench/bf16_layout.py --shapes 16x384,16x192,64x56,256x14 [--runs 25]
"""

from __future__ import annotations

import _common  # noqa: F401  (the repository root on sys.path)
import argparse
import collections
import os
import tempfile
import time

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper, shape_inference

K = 2.0**16 + 1.0  # Veltkamp constant: float32 (24 bits) split to bf16's 8 significant bits


def _activation_pairs(m: onnx.ModelProto) -> list[tuple[onnx.NodeProto, onnx.NodeProto]]:
    """``Cast(bf16) → Cast(float)`` pairs on activations (a pair on an initializer is a weight)."""
    inits = {i.name for i in m.graph.initializer}
    prod = {o: n for n in m.graph.node for o in n.output}
    pairs = []
    for n in m.graph.node:
        first = prod.get(n.input[0]) if n.op_type == "Cast" and n.input else None
        if (first is not None and first.op_type == "Cast" and n.attribute[0].i == TensorProto.FLOAT
                and first.attribute[0].i == TensorProto.BFLOAT16 and first.input[0] not in inits):
            pairs.append((first, n))
    return pairs


#: Ops onnxruntime 1.32's NCHWc transformer runs blocked or fuses into a blocked Conv.
_BLOCKED = {"Conv", "Add", "Sum", "Relu", "Sigmoid", "Tanh", "HardSwish", "HardSigmoid", "LeakyRelu", "Clip",
            "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "Concat"}


def _between_blocked(m: onnx.ModelProto, x: str, y: str) -> bool:
    """Whether the pair ``x → y`` sits between blocked ops: ``x`` comes from a Conv (directly or
    through a fused activation / residual Add of Convs) and every reader of ``y`` is a Conv or an
    Add. Elsewhere the Cast pair's reorders are paid anyway (float reorders there too)."""
    prod = {o: n for n in m.graph.node for o in n.output}
    n = prod.get(x)
    if n is None or n.op_type not in _BLOCKED:
        return False
    if n.op_type != "Conv" and not all(i in prod and prod[i].op_type in _BLOCKED for i in n.input[:1]):
        return False
    readers = [r for r in m.graph.node if y in r.input]
    return bool(readers) and all(r.op_type in ("Conv", "Add") for r in readers)


def rewrite(m: onnx.ModelProto, form: str) -> onnx.ModelProto:
    """``m`` with every activation Cast pair of known channel count replaced by ``form``."""
    m = onnx.ModelProto.FromString(m.SerializeToString())
    inferred = shape_inference.infer_shapes(m)
    dims = {v.name: [d.dim_value if d.HasField("dim_value") else None for d in v.type.tensor_type.shape.dim]
            for v in list(inferred.graph.value_info) + list(inferred.graph.input)}
    replace: dict[str, list[onnx.NodeProto]] = {}  # by the node's (first) output name
    drop: set[str] = set()
    for first, second in _activation_pairs(m):
        x, y = first.input[0], second.output[0]
        shape = dims.get(x)
        if form in ("dwconv", "dwconv-between"):
            if not shape or len(shape) != 4 or not shape[1] or shape[1] % 8:
                continue  # not a blocked (NCHWc) tensor: a depthwise Conv there runs in NCHW
            if form == "dwconv-between" and not _between_blocked(m, x, y):
                continue
            c = shape[1]
            wp, wn = numpy_helper.from_array(np.full((c, 1, 1, 1), K, np.float32), y + "_kp"), \
                numpy_helper.from_array(np.full((c, 1, 1, 1), -K, np.float32), y + "_kn")
            m.graph.initializer.extend([wp, wn])
            new = [helper.make_node("Conv", [x, wn.name], [y + "_a"], group=c), helper.make_node("Add", [y + "_a", x], [y + "_b"]),
                   helper.make_node("Conv", [x, wp.name], [y + "_c"], group=c), helper.make_node("Add", [y + "_c", y + "_b"], [y])]
        elif form == "arith":
            k = numpy_helper.from_array(np.array(K, np.float32), y + "_k")
            m.graph.initializer.append(k)
            new = [helper.make_node("Mul", [x, k.name], [y + "_c"]), helper.make_node("Sub", [y + "_c", x], [y + "_d"]),
                   helper.make_node("Sub", [y + "_c", y + "_d"], [y])]
        else:
            new = [helper.make_node("Identity", [x], [y])]
        drop.add(first.output[0])
        replace[second.output[0]] = new
    nodes = []
    for n in m.graph.node:
        if n.output and n.output[0] in drop:
            continue
        nodes.extend(replace.get(n.output[0] if n.output else "", [n]))
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    return m


def optimized_ops(data: bytes) -> dict[str, int]:
    """Op counts of onnxruntime's optimised graph (default level, one thread); the fused
    activations of Conv nodes counted as ``Conv+<act>``."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    path = tempfile.mktemp(suffix=".onnx")
    so.optimized_model_filepath = path
    so.log_severity_level = 3
    ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    g = onnx.load(path).graph
    os.remove(path)
    counts: collections.Counter = collections.Counter()
    for n in g.node:
        act = [a.s.decode() for a in n.attribute if a.name == "activation"]
        counts[n.op_type + (f"+{act[0]}" if act else "")] += 1
    return dict(counts.most_common())


def veltkamp_exact(samples: int = 1 << 20) -> tuple[int, int]:
    """(mismatches, checked): the ``dwconv`` form against ml_dtypes' bf16 rounding on normal
    floats below 2^111, ties and near-ties included, through onnxruntime's NCHWc kernels."""
    c = 16
    eye = numpy_helper.from_array(np.ones((c, 1, 1, 1), np.float32), "one")
    kp = numpy_helper.from_array(np.full((c, 1, 1, 1), K, np.float32), "kp")
    kn = numpy_helper.from_array(np.full((c, 1, 1, 1), -K, np.float32), "kn")
    nodes = [helper.make_node("Conv", ["x", "one"], ["x1"], group=c),  # NCHWc producer
             helper.make_node("Conv", ["x1", "kn"], ["a"], group=c), helper.make_node("Add", ["a", "x1"], ["b"]),
             helper.make_node("Conv", ["x1", "kp"], ["cc"], group=c), helper.make_node("Add", ["cc", "b"], ["h"]),
             helper.make_node("Conv", ["h", "one"], ["y"], group=c)]
    hw = int(np.sqrt(samples // c))
    shape = [1, c, hw, hw]
    g = helper.make_graph(nodes, "velt", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], [eye, kp, kn])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    bad = total = 0
    for trial in range(8):
        n = c * hw * hw
        exp = rng.integers(1, 238, size=n, dtype=np.uint32) << 23  # normal, below 2^111
        if trial % 2:
            low = rng.choice(np.array([0x8000, 0x7FFF, 0x8001, 0x0000, 0xFFFF], np.uint32), size=n)
            bits = exp | (rng.integers(0, 1 << 7, size=n, dtype=np.uint32) << 16) | low
        else:
            bits = exp | rng.integers(0, 1 << 23, size=n, dtype=np.uint32)
        bits |= rng.integers(0, 2, size=n, dtype=np.uint32) << 31
        x = bits.view(np.float32).reshape(shape)
        y = sess.run(None, {"x": x})[0]
        ref = x.astype(ml_dtypes.bfloat16).astype(np.float32)
        bad += int((y.view(np.uint32) != ref.view(np.uint32)).sum())
        total += n
    return bad, total


def _block(c: int, hw: int, form: str) -> bytes:
    """Conv 3×3 + HardSwish → rounding ``form`` (none, cast, dwconv) → Conv 1×1, on 1×c×hw×hw."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array((rng.standard_normal((c, c, 3, 3)) * 0.1).astype(np.float32), "w1")
    w2 = numpy_helper.from_array((rng.standard_normal((c, c, 1, 1)) * 0.1).astype(np.float32), "w2")
    kp = numpy_helper.from_array(np.full((c, 1, 1, 1), K, np.float32), "kp")
    kn = numpy_helper.from_array(np.full((c, 1, 1, 1), -K, np.float32), "kn")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a0"], pads=[1, 1, 1, 1]), helper.make_node("HardSwish", ["a0"], ["a"])]
    if form == "cast":
        nodes += [helper.make_node("Cast", ["a"], ["q"], to=TensorProto.BFLOAT16), helper.make_node("Cast", ["q"], ["r"], to=TensorProto.FLOAT)]
    elif form == "dwconv":
        nodes += [helper.make_node("Conv", ["a", "kn"], ["b0"], group=c), helper.make_node("Add", ["b0", "a"], ["b"]),
                  helper.make_node("Conv", ["a", "kp"], ["cc"], group=c), helper.make_node("Add", ["cc", "b"], ["r"])]
    else:
        nodes.append(helper.make_node("Identity", ["a"], ["r"]))
    nodes.append(helper.make_node("Conv", ["r", "w2"], ["y"]))
    shape = [1, c, hw, hw]
    g = helper.make_graph(nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], [w1, w2, kp, kn])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    return m.SerializeToString()


def time_shapes(specs: str, runs: int) -> None:
    """The per-shape table of ``--shapes`` (see the module docstring)."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    so.log_severity_level = 3
    print("| C×H×W | no rounding ms | Cast pair × | dwconv × |")
    print("|---|---:|---:|---:|")
    for spec in specs.split(","):
        c, hw = (int(v) for v in spec.split("x"))
        sessions = {f: ort.InferenceSession(_block(c, hw, f), so, providers=["CPUExecutionProvider"]) for f in ("none", "cast", "dwconv")}
        feed = {"x": np.random.default_rng(1).standard_normal((1, c, hw, hw)).astype(np.float32)}
        times: dict[str, list[float]] = {f: [] for f in sessions}
        for _ in range(runs):
            for f, sess in sessions.items():
                t = time.thread_time()
                sess.run(None, feed)
                times[f].append(time.thread_time() - t)
        base = np.array(times["none"])
        ratio = {f: np.median(np.array(t) / base) for f, t in times.items()}
        print(f"| {c}×{hw}×{hw} | {np.median(base) * 1e3:.2f} | {ratio['cast']:.2f} | {ratio['dwconv']:.2f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("float_model", nargs="?")
    ap.add_argument("bf16_model", nargs="?")
    ap.add_argument("--shapes", default="", help="time built blocks C x HW instead of a model pair")
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--forms", default="dwconv,arith,none")
    args = ap.parse_args()
    if args.shapes:
        time_shapes(args.shapes, args.runs)
        return
    if not (args.float_model and args.bf16_model):
        ap.error("give FLOAT.onnx and BF16.onnx, or --shapes")
    bf16 = onnx.load(args.bf16_model)
    variants = {"float": open(args.float_model, "rb").read(), "BF16 (Cast pairs)": bf16.SerializeToString()}
    for form in args.forms.split(","):
        variants[f"BF16 {form}"] = rewrite(bf16, form).SerializeToString()
    print(f"onnxruntime {ort.__version__}; {len(_activation_pairs(bf16))} activation Cast pairs in {args.bf16_model}")
    for name, data in variants.items():
        print(f"  {name}: {optimized_ops(data)}")
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    so.log_severity_level = 3
    sessions = {k: ort.InferenceSession(v, so, providers=["CPUExecutionProvider"]) for k, v in variants.items()}
    inp = sessions["float"].get_inputs()[0]
    shape = [d if isinstance(d, int) and d > 0 else 1 for d in inp.shape]
    feed = {inp.name: np.random.default_rng(1).random(shape).astype(np.float32)}
    outs = {k: s.run(None, feed)[0] for k, s in sessions.items()}
    times: dict[str, list[float]] = {k: [] for k in sessions}
    for _ in range(args.runs):
        for k, s in sessions.items():
            t = time.thread_time()
            s.run(None, feed)
            times[k].append(time.thread_time() - t)
    ref = outs["BF16 (Cast pairs)"]
    print("\n| form | ms (thread CPU, median) | × float (median of rounds) | spread (min–max) | output = Cast pairs' |")
    print("|---|---:|---:|---|---|")
    for k, ts in times.items():
        r = np.array(ts) / np.array(times["float"])
        same = np.array_equal(outs[k].view(np.uint32), ref.view(np.uint32))
        print(f"| {k} | {np.median(ts) * 1e3:.2f} | {np.median(r):.2f} | {r.min():.2f}–{r.max():.2f} | {'yes' if same else 'no'} |")
    if "dwconv" in args.forms:
        bad, total = veltkamp_exact()  # the same rounding in both dwconv forms
        print(f"\ndwconv rounding against ml_dtypes bf16 (normal floats < 2^111, ties included): {bad} of {total} differ")


if __name__ == "__main__":
    main()
