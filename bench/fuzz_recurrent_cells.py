"""Which tensors of a written-out recurrent cell carry BF16's loss (fuzz16's "left alone" (3)).

A recurrent cell stepped in Python (``nn.LSTMCell`` in a loop, a GRU cell under dynamo) exports as
one copy of the cell per step: the steps share their weight initializers, and the state ``h`` (and
an LSTM's ``c``) made by one step is read by the next. This script rounds chosen sets of the
tensors BF16's plan rounds to bfloat16 (a Cast pair after each, the weights rounded in place; the
all-planned set reproduces the library's build exactly) and judges each variant against float on
fresh feeds the way the fuzz floor reads a sequence head: per-position arg-max agreement and whole
reads (every position of a sequence agreeing). Sets are decided by dataflow only:

- by the reader's role: weights, dot-product inputs (read by a Gemm/MatMul), gate pre-activations
  (read by Sigmoid/Tanh or made by the gates' Split), gate outputs, the rest;
- by the recurrence: the steps of one cell are the Gemm/MatMul nodes sharing one weight
  initializer; a tensor is *fed back* when it is read by a step and made from an earlier step of
  the same cell (the state ``h`` into the recurrent product), *on the cycle* when it lies between two
  steps of one cell (gates, ``c``, ``h``);
- one dot-product input at a time, by its reader.

    PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 python bench/fuzz_recurrent_cells.py \\
        --model /work/cache/fuzz16/silent_s22/models.seed22/m003.onnx --t 12 --fresh 256
"""

from __future__ import annotations

import _common  # noqa: F401  (puts the repository root on sys.path)
import argparse
import collections
import logging

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import export_fuzz as ef


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _outputs(model: onnx.ModelProto, feeds: list[dict[str, np.ndarray]], name: str) -> np.ndarray:
    s = _session(model)
    return np.concatenate([s.run([name], f)[0] for f in feeds])


def rounded(model: onnx.ModelProto, names: set[str]) -> onnx.ModelProto:
    """``model`` with every tensor of ``names`` rounded to bfloat16: initializers in place, activations by
    a Cast pair after their producer (graph inputs at the top), graph outputs through an Identity."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    for t in g.initializer:
        if t.name in names:
            a = numpy_helper.to_array(t).astype(np.float32)
            t.CopyFrom(numpy_helper.from_array(a.astype(ml_dtypes.bfloat16).astype(np.float32), t.name))
    inits = {t.name for t in g.initializer}
    ren = {n: n + "__bf" for n in names if n not in inits}

    def pair(name: str) -> list[onnx.NodeProto]:
        return [helper.make_node("Cast", [name], [name + "__b"], to=TensorProto.BFLOAT16),
                helper.make_node("Cast", [name + "__b"], [name + "__bf"], to=TensorProto.FLOAT)]

    nodes = [n for i in g.input if i.name in ren for n in pair(i.name)]
    for node in g.node:
        for k, inp in enumerate(node.input):
            if inp in ren:
                node.input[k] = ren[inp]
        nodes.append(node)
        nodes += [n for o in node.output if o in ren for n in pair(o)]
    del g.node[:]
    g.node.extend(nodes)
    for o in g.output:
        if o.name in ren:
            g.node.append(helper.make_node("Identity", [ren[o.name]], [o.name + "__out"]))
            o.name += "__out"
    return out


class Cells:
    """The model's dataflow: producers, readers, and the steps of each unrolled cell."""

    def __init__(self, model: onnx.ModelProto) -> None:
        g = model.graph
        self.inits = {t.name for t in g.initializer}
        self.prod = {o: n for n in g.node for o in n.output}
        self.cons: dict[str, list[onnx.NodeProto]] = collections.defaultdict(list)
        for n in g.node:
            for i in n.input:
                self.cons[i].append(n)
        by_weight: dict[str, list[str]] = collections.defaultdict(list)
        for n in g.node:
            if n.op_type in ("Gemm", "MatMul") and len(n.input) > 1 and n.input[1] in self.inits:
                by_weight[n.input[1]].append(n.name)
        self.step_of = {s: w for w, steps in by_weight.items() if len(steps) > 1 for s in steps}
        self.up: dict[str, set[str]] = {}  # tensor -> cells of the steps upstream of it
        for n in g.node:
            cells = set().union(*(self.up.get(i, set()) for i in n.input))
            if n.name in self.step_of:
                cells = cells | {self.step_of[n.name]}
            for o in n.output:
                self.up[o] = cells
        self.down: dict[str, set[str]] = collections.defaultdict(set)  # tensor -> cells of the steps it reaches
        for n in reversed(list(g.node)):
            for o in n.output:
                for c in self.cons[o]:
                    if c.name in self.step_of:
                        self.down[o].add(self.step_of[c.name])
                    for o2 in c.output:
                        self.down[o] |= self.down[o2]

    def role(self, t: str) -> str:
        if t in self.inits:
            return "weight"
        p = self.prod.get(t)
        readers = {c.op_type for c in self.cons[t]}
        if readers & {"Sigmoid", "Tanh"} or (p is not None and p.op_type == "Split"):
            return "gate pre-activation"
        if p is not None and p.op_type in ("Sigmoid", "Tanh"):
            return "gate output"
        if readers & {"Gemm", "MatMul"}:
            return "dot-product input"
        return "other"

    def fed_back(self, t: str) -> bool:
        own = {self.step_of[c.name] for c in self.cons[t] if c.name in self.step_of}
        return bool(own & self.up.get(t, set()))

    def on_cycle(self, t: str) -> bool:
        return bool(self.up.get(t, set()) & self.down.get(t, set()))

    def reader(self, t: str) -> str:
        return "|".join(sorted(f"{c.op_type}:{c.input[1] if len(c.input) > 1 else ''}" for c in self.cons[t]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--t", type=int, default=ef.T, help="the (static) sequence length the model was exported at")
    ap.add_argument("--calib", type=int, default=32)
    ap.add_argument("--fresh", type=int, default=256)
    ap.add_argument("--output", default="y")
    ap.add_argument("--presets", default="BF16,A8W8,MX9", help="presets the library builds are judged for")
    a = ap.parse_args()
    logging.disable(logging.WARNING)
    import onnxptq

    model = onnx.load(a.model)
    inputs = [i.name for i in model.graph.input]
    spec = ef.ModuleSpec(0, 0, "seq", [], inputs, [a.output], "dynamo", 18, False, False, {"t": a.t})
    calib, fresh = spec.feeds(a.calib, 1), spec.feeds(a.fresh, 50_000)
    ref = _outputs(model, fresh, a.output)

    def score(y: np.ndarray) -> str:
        same = ref.argmax(-1) == y.argmax(-1)
        cos = float((ref * y).sum() / np.linalg.norm(ref) / np.linalg.norm(y))
        return f"| {same.mean():.4f} | {same.all(-1).mean():.4f} | {cos:.6f} |"

    res = onnxptq.quantize(model, onnxptq.get_preset("BF16").replace(repair=False), calib)
    planned = set(res.plan.tensors)
    print("| tensors rounded to bfloat16 | count | positions agreeing | reads agreeing | cosine |\n| --- | --- | --- | --- | --- |")
    print(f"| the library's BF16 build (repair off) | {len(planned)} {score(_outputs(res.model, fresh, a.output))}")
    print(f"| simulated: every planned tensor | {len(planned)} {score(_outputs(rounded(model, planned), fresh, a.output))}")
    cells = Cells(model)
    groups: dict[str, set[str]] = collections.defaultdict(set)
    for t in planned:
        groups[cells.role(t)].add(t)
    groups["fed back (state into a recurrent product)"] = {t for t in planned if cells.fed_back(t)}
    groups["on a cell's cycle (gates, c, h)"] = {t for t in planned if cells.on_cycle(t)}
    for name, members in sorted(groups.items()):
        print(f"| only {name} | {len(members)} {score(_outputs(rounded(model, members), fresh, a.output))}")
        print(f"| all but {name} | {len(planned - members)} {score(_outputs(rounded(model, planned - members), fresh, a.output))}")
    by_reader: dict[str, set[str]] = collections.defaultdict(set)
    for t in groups["dot-product input"]:
        by_reader[("fed back, " if cells.fed_back(t) else "") + cells.reader(t)].add(t)
    for name, members in sorted(by_reader.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        if len(members) > 1 or not name.startswith("fed back"):
            print(f"| only the dot-product inputs read by {name} | {len(members)} {score(_outputs(rounded(model, members), fresh, a.output))}")
    # The library itself, per preset (repair off): the plain build; the cells' non-product nodes on a cycle kept
    # float (gates, the state updates; the products quantized: the candidate structure rule); every node on a cycle
    # float, products too.
    cycle_nodes = {n.name for n in model.graph.node if any(cells.on_cycle(o) for o in n.output)}
    products = {n for n in cycle_nodes if n in cells.step_of}
    print("\n| preset | build | nodes kept float | positions agreeing | reads agreeing | cosine |\n| --- | --- | --- | --- | --- | --- |")
    for preset in a.presets.split(","):
        base = onnxptq.get_preset(preset).replace(repair=False)
        for label, kept in (("plain", set()), ("state path float, products quantized", cycle_nodes - products),
                            ("every node on a cycle float", cycle_nodes)):
            q = onnxptq.quantize(model, base.replace(nodes_to_exclude=tuple(sorted(kept))), calib).model
            print(f"| {preset} | {label} | {len(kept)} {score(_outputs(q, fresh, a.output))}", flush=True)
    top2 = np.sort(ref, -1)[..., -2:]
    margin = top2[..., 1] - top2[..., 0]
    print(f"\nfloat arg-max margins: {margin.size} positions, {int((margin < 1e-3).sum())} below 1e-3, "
          f"{int((margin < 1e-2).sum())} below 1e-2, median {float(np.median(margin)):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
