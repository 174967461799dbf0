"""BF16/FP16 files: where each rounding sits, and how close each tree's files stay to float (bf16lat19).

The plan rounds once per fused group (pipeline/plan/float_fusion.py). Two readings of files quantized
beforehand (``DIR/<model>_<preset>.onnx``, e.g. by two trees of the library):

``where FILE...``
    every Cast-pair rounding by what makes the rounded tensor (a producer's op type; for an Add/Mul
    the producers of its operands) and what reads the rounded value, counted per file. A rounding
    between a Conv and its activation, inside a written-out GRU cell or on a MatMul before its
    bias shows up as ``Conv -> Relu``, ``Add(Slice,Slice) -> Sigmoid``, ``MatMul -> Add``.

``agree --models M,... --presets P,... --trees label=DIR,...``
    per zoo model and preset, against the float model on its held-out feeds: the zoo's own metric,
    the worst output cosine, and the relative RMS error of all float outputs pooled
    (‖q − f‖ / ‖f‖), one column per tree.

    PYTHONPATH=src:.:bench python bench/bf16_fused_groups.py where /tmp/new/*_BF16.onnx
    PYTHONPATH=src:.:bench python bench/bf16_fused_groups.py agree --models romanizer_decoder \\
        --presets BF16,FP16 --trees base=/tmp/base,new=/tmp/new
"""

from __future__ import annotations

import argparse
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto

import _common  # noqa: F401 - the repository root (testkit/) on sys.path

from testkit import zoo  # noqa: E402

_NARROW = (TensorProto.BFLOAT16, TensorProto.FLOAT16)


def roundings(path: str) -> Counter:
    """(what makes the rounded tensor, what reads the rounding) → count, for one file."""
    graph = onnx.load(path, load_external_data=False).graph
    producer = {o: n for n in graph.node for o in n.output}
    readers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
    for n in graph.node:
        for i in n.input:
            readers[i].append(n)
    inits = {t.name for t in graph.initializer}

    def made_by(name: str) -> str:
        node = producer.get(name)
        return node.op_type if node is not None else "init" if name in inits else "INPUT"

    found: Counter = Counter()
    for n in graph.node:
        if n.op_type != "Cast" or n.attribute[0].i not in _NARROW:
            continue
        source = made_by(n.input[0])
        node = producer.get(n.input[0])
        if node is not None and node.op_type in ("Add", "Mul", "Sub"):
            source += "(" + ",".join(made_by(i) for i in node.input) + ")"
        read = sorted(r.op_type for back in readers[n.output[0]] for r in readers[back.output[0]])
        found[(source, ",".join(read) or "graph output")] += 1
    return found


def agreement(name: str, presets: list[str], trees: list[tuple[str, str]]) -> list[str]:
    """Markdown rows: ``| model | preset | metric / cosine / rel. RMS error | ... |`` per preset."""
    model = zoo.get(name)
    feeds = model.samples("heldout")
    ref = zoo.session_runner(model.path())
    refs = [ref(f) for f in feeds]
    rows = []
    for preset in presets:
        cells = []
        for _, folder in trees:
            test = zoo.session_runner(str(Path(folder) / f"{name}_{preset}.onnx"))
            metric = model.metric(ref, test, feeds, model.root())
            cosine = zoo.output_cosine(ref, test, feeds)
            err = norm = 0.0
            for feed, want in zip(feeds, refs):
                for a, b in zip(want, test(feed)):
                    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
                    if np.issubdtype(np.asarray(a).dtype, np.floating) and a.shape == b.shape:
                        err += float(((a - b) ** 2).sum())
                        norm += float((a ** 2).sum())
            rel = np.sqrt(err / norm) if norm else float("nan")
            cells.append(f"{metric:.4f} / {cosine:.6f} / {rel:.2e}")
        rows.append(f"| {name} | {preset} | " + " | ".join(cells) + " |")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("where")
    w.add_argument("files", nargs="+")
    a = sub.add_parser("agree")
    a.add_argument("--models", required=True)
    a.add_argument("--presets", default="BF16,FP16")
    a.add_argument("--trees", required=True, help="label=DIR,...")
    args = ap.parse_args()
    if args.cmd == "where":
        for path in args.files:
            found = roundings(path)
            print(f"{Path(path).name}: {sum(found.values())} roundings")
            for (source, read), count in found.most_common():
                print(f"    {count:4d}  {source} -> {read}")
        return
    trees = [tuple(t.split("=", 1)) for t in args.trees.split(",")]
    print("| model | preset | " + " | ".join(f"{label}: metric / cosine / rel. RMS error" for label, _ in trees) + " |")
    print("|---|---|" + "---|" * len(trees))
    for name in args.models.split(","):
        for row in agreement(name, args.presets.split(","), trees):
            print(row, flush=True)


if __name__ == "__main__":
    main()
