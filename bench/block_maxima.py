"""Block maxima in onnxruntime's CPU kernels: one reduction over the block axis vs two stages (issue 26 item 3).

The block quantizers take the maxima of |x| per block from a ``(rows, bs, post)`` view. onnxruntime
reduces over that axis fast when ``rows >= 2`` and slowly when ``rows == 1`` (a batch-1 activation
whose channels are one block: the reduction is then over a leading axis). This times, on one
intra-op thread, thread CPU time, median of ``--runs`` rounds taken round-robin, per shape
``C,H,W,bs`` (a ``1xCxHxW`` tensor blocked along C, ``rows = C/bs``):

* ``one stage``: ReduceMax and ReduceMin of x over the block axis, ``Max(max, -min)`` (the bodies
  before ``onnx_ops.body.max_by_halves``);
* ``halves``: the same on a ``(2·rows, bs/2, post)`` view, then the two half-maxima of each block
  merged by ``Split`` + ``Max`` (``max_by_halves``);
* ``one pass``: one elementwise op over the tensor (``Abs``), for scale;

and checks that both give the maxima of |x| bit for bit.

    python bench/block_maxima.py 16,384,384,16 24,192,192,24 64,96,96,32 16,384,384,8 [--runs 15]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper


def _session(nodes: list, shape: list[int], inits: list) -> ort.InferenceSession:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def cases(c: int, h: int, w: int, bs: int) -> dict[str, ort.InferenceSession]:
    n = helper.make_node
    rows, post = c // bs, h * w

    def ints(name: str, *values: int):
        return numpy_helper.from_array(np.array(values, np.int64), name)

    shape = [1, c, h, w]
    one = [n("Reshape", ["x", "v"], ["a"]), n("ReduceMax", ["a", "ax"], ["m1"]), n("ReduceMin", ["a", "ax"], ["m2"]),
           n("Neg", ["m2"], ["n2"]), n("Max", ["m1", "n2"], ["y"])]
    halves = [n("Reshape", ["x", "v2"], ["a"]), n("ReduceMax", ["a", "ax"], ["m1"]), n("ReduceMin", ["a", "ax"], ["m2"]),
              n("Neg", ["m2"], ["n2"]), n("Max", ["m1", "n2"], ["h"]), n("Reshape", ["h", "v3"], ["h2"]),
              n("Split", ["h2"], ["p1", "p2"], axis=1, num_outputs=2), n("Max", ["p1", "p2"], ["y"])]
    return {
        "one stage": _session(one, shape, [ints("v", rows, bs, post), ints("ax", 1)]),
        "halves": _session(halves, shape, [ints("v2", 2 * rows, bs // 2, post), ints("v3", rows, 2, post), ints("ax", 1)]),
        "one pass": _session([n("Abs", ["x"], ["y"])], shape, []),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("shapes", nargs="+", help="C,H,W,bs (bs even, dividing C)")
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args()
    print(f"onnxruntime {ort.__version__}, one intra-op thread, thread CPU ms, median of {args.runs} rounds\n")
    print("| 1xCxHxW, blocks of bs along C | rows | one stage ms | halves ms | one pass ms | halves ÷ one stage | same bits |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for spec in args.shapes:
        c, h, w, bs = (int(v) for v in spec.split(","))
        sessions = cases(c, h, w, bs)
        x = np.random.default_rng(c + h + bs).standard_normal((1, c, h, w)).astype(np.float32)
        times: dict[str, list[float]] = {k: [] for k in sessions}
        for _ in range(args.runs):
            for k, s in sessions.items():
                t = time.thread_time()
                s.run(None, {"x": x})
                times[k].append(time.thread_time() - t)
        ms = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        want = np.abs(x).reshape(c // bs, bs, h * w).max(axis=1).reshape(-1)
        same = all(np.array_equal(sessions[k].run(None, {"x": x})[0].reshape(-1).view(np.uint32), want.view(np.uint32))
                   for k in ("one stage", "halves"))
        print(f"| 1x{c}x{h}x{w}, bs {bs} | {c // bs} | {ms['one stage']:.3f} | {ms['halves']:.3f} | {ms['one pass']:.3f} | "
              f"{ms['halves'] / ms['one stage']:.2f} | {'yes' if same else 'NO'} |")


if __name__ == "__main__":
    main()
