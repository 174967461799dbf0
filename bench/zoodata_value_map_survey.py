"""Every dense single-channel output at hand: which are value maps (a height, a depth, a spectrogram), what bounds them.

issue 27 / zoo20 item 2, before any reading is added: terrain_unet's ``denoised`` (a heightfield in the package's
asinh model space) is judged by its pooled cosine and passes its four block-format rows that break the user's height
reading. A reading for such maps must be decided by structure and data, never a name, so first every output it could
take is listed, as classmap19 listed 167 outputs for class-logit maps (bench/classmap_survey.py):

* ``structure`` (graphs only): every float graph output of the zoo (testkit/zoo.py), the shipped models and
  bench/newmodels.py's models whose files are here, its declared shape and the walk back through data movement
  (``RELAYOUTS``, ``Cast``, ``Identity``) to the op that makes it, and whether a bounding activation (Sigmoid,
  Softmax, LogSoftmax, Tanh, HardSigmoid) or a ``Clip`` is on that walk;
* ``data`` (float on ``--feeds`` feeds of each model whose output could be one channel by its declared shape): the
  output's shape as run, whether it is a dense single-channel 2-D map (after the batch axis: ``[1, H, W]`` or
  ``[H, W]`` with H, W ≥ 8), its value range, the share of cells at the range's ends (a clipped or saturated map),
  and the correlation of neighbouring cells along each spatial axis (a field of values, not a table of
  independent scores).

    PYTHONPATH=src:.:bench python bench/zoodata_value_map_survey.py structure > structure.jsonl
    PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 python bench/zoodata_value_map_survey.py data --feeds 2 [--models a,b] > data.jsonl

One JSON line per output; a model whose file or data is absent here prints one line with its error.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import onnx

import _common  # noqa: F401  (the repository root on sys.path)

from classmap_survey import _entries  # the same models, in the same order, as classmap19's survey
from onnxptq.graph.ops import RELAYOUTS
from onnxptq.graph.walk import constant_names, dataflow

#: ops a walk back from an output passes through (they move or retype values, not make them)
MOVES = RELAYOUTS | {"Cast", "Identity"}
#: ops that bound an output to a fixed range (a probability, a gate)
BOUNDING = frozenset(("Sigmoid", "Softmax", "LogSoftmax", "Tanh", "HardSigmoid"))
FLOATS = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16, onnx.TensorProto.DOUBLE}


def _step(node: onnx.NodeProto, consts: set[str]) -> str | None:
    """The input a walk back follows through ``node``: data movement and ``Clip`` pass their first input on, an
    affine op by one constant its other input (it keeps a bound); None where ``node`` makes the values."""
    if node.op_type in MOVES or node.op_type == "Clip":
        return node.input[0] if node.input else None
    if node.op_type in ("Mul", "Add", "Sub", "Div") and sum(i in consts for i in node.input) == 1:
        return next(i for i in node.input if i not in consts)
    return None


def _walk(model: onnx.ModelProto, name: str) -> tuple[list[str], bool, bool]:
    """The ops from output ``name`` back to the op that makes it (:func:`_step`; that op last), whether a bounding
    activation is among them, and whether a ``Clip`` is."""
    producer, _ = dataflow(model.graph.node)
    consts = constant_names(model.graph)
    ops: list[str] = []
    tensor: str | None = name
    while tensor is not None and tensor in producer and len(ops) < 12:
        ops.append(producer[tensor].op_type)
        tensor = _step(producer[tensor], consts)
    return ops, any(op in BOUNDING for op in ops), "Clip" in ops


def _declared(model: onnx.ModelProto) -> dict[str, tuple[int | None, ...] | None]:
    out = {}
    for o in model.graph.output:
        t = o.type.tensor_type
        if not o.type.HasField("tensor_type") or t.elem_type not in FLOATS:
            continue
        out[o.name] = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in t.shape.dim) if t.HasField("shape") else None
    return out


def _could_be_one_channel(shape: tuple[int | None, ...] | None) -> bool:
    """By the declared shape: unknown rank, ``[N, H, W]`` or ``[N, 1 or ?, H, W]`` (a map); never a declared channel > 1."""
    if shape is None:
        return True
    if len(shape) == 3:
        return True
    return len(shape) == 4 and shape[1] in (1, None)


def structure() -> None:
    for name, path, _ in _entries():
        try:
            model = onnx.load(str(path()), load_external_data=False)
        except Exception as exc:  # noqa: BLE001 - a model absent here: said, not fatal
            print(json.dumps({"model": name, "error": f"{type(exc).__name__}: {exc}"[:200]}), flush=True)
            continue
        for out, shape in _declared(model).items():
            ops, bounded, clipped = _walk(model, out)
            print(json.dumps({"model": name, "output": out, "shape": None if shape is None else list(shape),
                              "maybe_one_channel": _could_be_one_channel(shape), "walk": " <- ".join(ops),
                              "bounded": bounded, "clip": clipped}), flush=True)


def _neighbour_corr(x: np.ndarray, axis: int) -> float:
    a, b = np.moveaxis(x, axis, 0)[:-1].ravel(), np.moveaxis(x, axis, 0)[1:].ravel()
    if a.std() == 0 or b.std() == 0:
        return float("nan")
    return float(np.corrcoef(a, b)[0, 1])


def describe(values: list[np.ndarray]) -> dict:
    """What float's values of one output look like (module docstring, ``data``)."""
    x = np.asarray(values[0], np.float64)
    dims = [d for d in x.shape[1:] if d != 1]
    dense = len(dims) == 2 and min(dims) >= 8
    allv = np.concatenate([np.asarray(v, np.float64).ravel() for v in values])
    lo, hi = float(allv.min()), float(allv.max())
    width = max(hi - lo, 1e-30)
    at_ends = float(np.mean((allv <= lo + 1e-3 * width) | (allv >= hi - 1e-3 * width)))
    row = {"run_shape": list(x.shape), "dense_one_channel": dense, "min": lo, "max": hi, "mean": float(allv.mean()),
           "std": float(allv.std()), "share_at_ends": round(at_ends, 4), "in_0_1": bool(lo >= 0 and hi <= 1)}
    if dense:
        m = x.reshape([x.shape[0]] + dims)
        row["neighbour_corr"] = [round(_neighbour_corr(m, 1), 3), round(_neighbour_corr(m, 2), 3)]
    return row


def data(feeds: int, only: set[str]) -> None:
    from testkit import zoo

    for name, path, make in _entries():
        if make is None or (only and name not in only):
            continue
        try:
            model = onnx.load(str(path()), load_external_data=False)
            wanted = {o: s for o, s in _declared(model).items() if _could_be_one_channel(s)}
            if not wanted:
                continue
            run = zoo.session_runner(path())
            names = [o.name for o in model.graph.output]
            outs = [run(f) for f in make(feeds)]
        except Exception as exc:  # noqa: BLE001 - said, not fatal
            print(json.dumps({"model": name, "error": f"{type(exc).__name__}: {exc}"[:200]}), flush=True)
            continue
        for out in wanted:
            i = names.index(out)
            ops, bounded, clipped = _walk(model, out)
            row = {"model": name, "output": out, "walk": " <- ".join(ops), "bounded": bounded, "clip": clipped}
            row.update(describe([o[i] for o in outs]))
            print(json.dumps(row), flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=("structure", "data"))
    ap.add_argument("--feeds", type=int, default=2)
    ap.add_argument("--models", default="")
    args = ap.parse_args(argv)
    if args.what == "structure":
        structure()
    else:
        data(args.feeds, {m for m in args.models.split(",") if m})
    return 0


if __name__ == "__main__":
    sys.exit(main())
