"""The packed weights' decoding chains of delivered files, by themselves: how many full-size steps
each chain runs, how many values its steps produce against the weights they decode, and what
onnxruntime's constant folding of them costs at session creation (issue 26 item 1, branch packed14).

For each file the decode nodes (every default-domain node whose inputs are initializers or other
decode nodes' outputs, in graph order) are cut out as a model of their own whose outputs are all
their values; it is run once unoptimised to size every value, then created ``--rounds`` times with
``ORT_ENABLE_BASIC`` (constant folding computes the whole chain; CPU seconds of the process, best
of the rounds) and, for reference, at ``ORT_DISABLE_ALL`` (creation alone). A **full-size step** is
a node whose outputs hold at least half as many values as the weights decoded (the group's codes
cast, multiplied, split, reshaped, transposed; a Gather of a table; Div/Mod on fields); MX9's
shift fields (one per two values) count.

    PYTHONPATH=src OMP_NUM_THREADS=1 nice -n 5 python bench/packed_decode_steps.py FILE.onnx [FILE.onnx ...] --rounds 5

Why: blockquant13 found the folding of these chains 0.03-0.20 s of every session creation and
named the chain's length (~25 full-size steps a weight group) as the cause; packed14 cut the
steps (int8 codes + Cast, fields by BitShift) and this script is how the before/after was read.
"""

from __future__ import annotations

import argparse
import collections
import time

import onnx
import onnxruntime as ort
from onnx import helper


def decode_model(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[onnx.NodeProto], set[str]]:
    """The model of ``model``'s decode nodes alone (every value an output), those nodes, and the
    names of the decoded values the rest of the graph reads (the weights)."""
    g = model.graph
    const = {t.name for t in g.initializer}
    nodes = []
    for n in g.node:
        if n.op_type != "Constant" and n.domain in ("", "ai.onnx") and all(i in const or i == "" for i in n.input):
            nodes.append(n)
            const.update(n.output)
    made = {o for n in nodes for o in n.output}
    picked = {id(n) for n in nodes}
    used = {i for n in g.node if id(n) not in picked for i in n.input if i in made} | {o.name for o in g.output if o.name in made}
    need = {i for n in nodes for i in n.input}
    outs = [o for n in nodes for o in n.output]
    dm = helper.make_model(helper.make_graph(nodes, "decode", [], [helper.make_empty_tensor_value_info(o) for o in outs],
                                             [t for t in g.initializer if t.name in need]),
                           opset_imports=model.opset_import, ir_version=model.ir_version)
    return dm, nodes, used


def _create(blob: bytes, level: ort.GraphOptimizationLevel) -> float:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    so.graph_optimization_level = level
    t = time.process_time()
    ort.InferenceSession(blob, so, providers=["CPUExecutionProvider"])
    return time.process_time() - t


def measure(path: str, rounds: int) -> dict:
    dm, nodes, used = decode_model(onnx.load(path))
    blob = dm.SerializeToString()
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    outs = [o for n in nodes for o in n.output]
    vals = ort.InferenceSession(blob, so, providers=["CPUExecutionProvider"]).run(None, {})
    sizes = dict(zip(outs, (v.size for v in vals)))
    nbytes = dict(zip(outs, (v.nbytes for v in vals)))
    del vals
    weights = sum(sizes[u] for u in used)
    produced = sum(sizes.values())
    full: collections.Counter = collections.Counter()
    by_op: collections.Counter = collections.Counter()  # bytes each op type's folded outputs hold
    for n in nodes:
        by_op[n.op_type] += sum(nbytes[o] for o in n.output)
        if sum(sizes[o] for o in n.output) * 2 >= max(1, max((sizes[u] for u in used), default=1)):
            full[n.op_type] += 1
    folded = min(_create(blob, ort.GraphOptimizationLevel.ORT_ENABLE_BASIC) for _ in range(rounds))
    plain = min(_create(blob, ort.GraphOptimizationLevel.ORT_DISABLE_ALL) for _ in range(rounds))
    stored = sum(len(t.raw_data) or onnx.numpy_helper.to_array(t).nbytes for t in dm.graph.initializer)
    return {"file": path, "nodes": len(nodes), "weights": weights, "produced": produced, "full": full,
            "fold_s": folded - plain, "produced_bytes": sum(nbytes.values()), "stored_bytes": stored,
            "weight_bytes": sum(nbytes[u] for u in used), "bytes_by_op": by_op}


HEADER = ("| file | decode nodes | weight values | produced ÷ weights | full-size steps (largest weight's half) | folding s |\n"
          "|---|---:|---:|---:|---|---:|")


BYTES_HEADER = ("| file | fp32 weights MB | stored ÷ weights | folded outputs ÷ weights (all held at once) | by op (÷ weights) |\n"
                "|---|---:|---:|---:|---|")


def bytes_row(r: dict) -> str:
    """The load-peak attribution of :func:`measure`'s result: onnxruntime keeps every folded
    output until its constant-folding pass ends, so the chain's share of the peak is the stored
    initializers plus the sum of every folded output, in bytes, here over the weights' float bytes."""
    w = max(r["weight_bytes"], 1)
    ops = ", ".join(f"{k} {v / w:.2f}" for k, v in r["bytes_by_op"].most_common() if v / w >= 0.01)
    return (f"| {r['file']} | {w / 1e6:.2f} | {r['stored_bytes'] / w:.2f} | {r['produced_bytes'] / w:.2f} | {ops} |")


def row(r: dict) -> str:
    """One table row of :func:`measure`'s result."""
    kinds = ", ".join(f"{k} {v}" for k, v in r["full"].most_common())
    return (f"| {r['file']} | {r['nodes']} | {r['weights']} | {r['produced'] / max(r['weights'], 1):.1f} | "
            f"{sum(r['full'].values())}: {kinds} | {r['fold_s']:.3f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--rounds", type=int, default=5, help="creations per file and level (best of)")
    ap.add_argument("--bytes", action="store_true", help="the table of folded bytes by op (the load peak's share)")
    args = ap.parse_args()
    print(BYTES_HEADER if args.bytes else HEADER)
    for f in args.files:
        r = measure(f, args.rounds)
        print(bytes_row(r) if args.bytes else row(r), flush=True)


if __name__ == "__main__":
    main()
