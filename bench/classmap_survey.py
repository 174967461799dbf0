"""Which outputs the class-logit map reading (analysis/class_maps.py, "Class logits") takes, on every model at hand.

Two passes over the zoo (testkit/zoo.py), the shipped models (/work/shared/models) and bench/newmodels.py's models
whose files are on this machine:

* ``structure`` (cheap: graphs only): every float graph output of rank ≥ 3, its declared shape, whether
  ``class_maps.logit_maps`` finds a 1×1 class Conv behind it, and what it reads from where it does not (the first
  node of the walk that is no data movement);
* ``data`` (runs float on ``--feeds`` feeds of each model named, or of every model with a structural hit and the
  zoo's): for each multi-channel float output (rank ≥ 3, a non-leading axis of 2-512 values beside another axis
  longer than 1), along its candidate class axis (the structural one, else axis 1 and the last axis), the shift
  share (analysis/head_kind.shift_share) against independent columns' ``1 / sqrt(C − 1)``, the classes float's
  arg-max reads at ≥ 1 % of positions, and whether ``class_maps.logit_axis`` takes it.

    PYTHONPATH=src:.:bench python bench/classmap_survey.py structure > /work/cache/classmap19/structure.jsonl
    PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 python bench/classmap_survey.py data --feeds 2 [--models a,b] > .../data.jsonl

One JSON line per output; a model whose file or data is absent here prints one line with its error.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import onnx

from onnxptq.analysis.class_maps import LOGIT_STEPS, logit_axis, logit_maps
from onnxptq.analysis.head_kind import shift_share

SHIPPED = Path("/work/shared/models")


def _entries() -> Iterator[tuple[str, Callable[[], Path], Callable[[int], list] | None]]:
    """``(name, path, make feeds)`` of every model: the zoo's, the shipped two (no feeds: structure only), newmodels'."""
    import newmodels as nm
    from testkit import zoo

    for m in zoo.ZOO:
        yield m.name, m.path, (lambda n, m=m: m.make(m.root(), n, 1))
    for p in sorted(SHIPPED.glob("*.onnx")):
        yield p.stem, (lambda p=p: p), None
    for name, (rel, make, _, _) in nm.MODELS.items():
        yield name, (lambda rel=rel: nm.SRC / rel), (lambda n, make=make: make(n, 1))


def _declared(model: onnx.ModelProto) -> dict[str, tuple[int | None, ...]]:
    out = {}
    for o in model.graph.output:
        t = o.type.tensor_type
        if o.type.HasField("tensor_type") and t.HasField("shape"):
            out[o.name] = tuple(d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim)
    return out


def _reads_from(model: onnx.ModelProto, name: str) -> str:
    """The op the walk of ``logit_maps`` stops at, behind output ``name`` (what it reads from, in words)."""
    producer = {o: n for n in model.graph.node for o in n.output if o}
    tensor, ops = name, []
    for _ in range(8):
        node = producer.get(tensor)
        if node is None:
            break
        ops.append(node.op_type)
        if node.op_type not in LOGIT_STEPS:
            break
        tensor = node.input[0] if node.input else ""
    return " <- ".join(ops) or "graph input"


def structure() -> None:
    for name, path, _ in _entries():
        try:
            model = onnx.load(str(path()), load_external_data=False)
        except Exception as exc:  # noqa: BLE001 - a model absent here: said, not fatal
            print(json.dumps({"model": name, "error": f"{type(exc).__name__}: {str(exc)[:100]}"}), flush=True)
            continue
        found = logit_maps(model)
        for out, shape in _declared(model).items():
            if len(shape) >= 3:
                print(json.dumps({"model": name, "output": out, "shape": shape, "logit_map": found.get(out),
                                  "reads": _reads_from(model, out)}), flush=True)


def _axes(shape: tuple[int, ...], structural: tuple[int, int] | None) -> list[int]:
    """The candidate class axes of a multi-channel output of ``shape`` (module docstring)."""
    if structural is not None:
        return [structural[0]]
    found = []
    for axis in (1, len(shape) - 1):
        others = [d for i, d in enumerate(shape) if i not in (0, axis)]
        if 2 <= shape[axis] <= 512 and any(d > 1 for d in others) and axis not in found:
            found.append(axis)
    return found


def data(feeds: int, only: str) -> None:
    from testkit import zoo

    for name, path, make in _entries():
        if only and name not in only.split(","):
            continue
        try:
            model = onnx.load(str(path()), load_external_data=False)
            found = logit_maps(model)
            if make is None or (not only and not found and name not in zoo.BY_NAME):
                continue
            run = zoo.session_runner(path())
            names = [o.name for o in model.graph.output]
            outs = [run(f) for f in make(feeds)]
        except Exception as exc:  # noqa: BLE001 - a model whose source is absent here: said, not fatal
            print(json.dumps({"model": name, "error": f"{type(exc).__name__}: {str(exc)[:100]}"}), flush=True)
            continue
        for k, out in enumerate(names):
            values = [np.asarray(o[k]) for o in outs]
            if not all(np.issubdtype(v.dtype, np.floating) and v.ndim >= 3 for v in values):
                continue
            for axis in _axes(values[0].shape, found.get(out)):
                c = values[0].shape[axis]
                rows = [np.moveaxis(v, axis, -1).reshape(-1, c) for v in values if v.shape[axis] == c]
                share, positions = shift_share([r[:: max(1, r.shape[0] // 16384)] for r in rows])
                top = np.concatenate([r.argmax(-1) for r in rows])
                wins = int(np.sum(np.bincount(top, minlength=c) >= 0.01 * top.size))
                print(json.dumps({"model": name, "output": out, "shape": values[0].shape, "axis": axis,
                                  "structural": found.get(out) is not None, "share": round(share, 6) if math.isfinite(share) else None,
                                  "independent": round(1 / math.sqrt(c - 1), 4), "classes_winning_1pct": wins,
                                  "data_says_logits": logit_axis(values, axis, c),
                                  "taken": found.get(out) is not None and logit_axis(values, axis, c)}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("structure", "data"))
    parser.add_argument("--feeds", type=int, default=2)
    parser.add_argument("--models", default="")
    args = parser.parse_args()
    sys.setrecursionlimit(10000)
    structure() if args.what == "structure" else data(args.feeds, args.models)


if __name__ == "__main__":
    main()
