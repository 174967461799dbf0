"""Issue 27 items 1 and 3 (fuzz16): the corners exporters write that the drawn generators do not reach.

``bench/export_fuzz.py`` composes torch modules, and torch's exporters never write some things real
files hold: the GRU/LSTM/RNN ops with ``sequence_lens`` and ``initial_h`` (``layout=1`` is left out: onnxruntime's CPU
kernels refuse it), ``auto_pad``,
``InstanceNormalization`` used as a GroupNorm, ``HardSigmoid`` with odd alpha, weights that reach their
consumer through Identity/Transpose/Reshape/Cast or a Shape→Gather→Reshape chain, an initializer that is
both a weight and an Add operand, uint8/int8 graph inputs, rank-0 and rank-5 tensors, zero-length dims,
graph outputs that are initializers, graph inputs or each other. Each case here is one small hand-built
graph (``onnx.helper``, checked) that spells one corner the way some exporter does; every preset of
``export_fuzz.PRESETS`` quantizes it with defaults in a forked child (an onnxruntime abort is a row, not
the end of the run), judged by ``export_fuzz.run_one`` (raw exception, does not load/run, NaN, the floor's
verdict, the worst float output's cosine on fresh feeds).

    PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 nice -n 5 python bench/fuzz_corners.py --out-dir /work/cache/fuzz16/corners \\
        --json /work/cache/fuzz16/corners.json [--cases gru_op_bi_seqlens,...] [--presets A8W8,...]
"""

from __future__ import annotations

import _common  # noqa: F401  (puts the repository root on sys.path)
import argparse
import collections
import json
import multiprocessing as mp
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import export_fuzz

F32, F16 = TensorProto.FLOAT, TensorProto.FLOAT16


class G:
    """A graph under construction: nodes, initializers, inputs and outputs by name; ``make`` checks it."""

    def __init__(self, seed: int, opset: int = 17, elem: int = F32) -> None:
        self.rng = np.random.default_rng(seed)
        self.opset, self.elem = opset, elem
        self.np = np.float16 if elem == F16 else np.float32
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self.n = 0

    def name(self, stem: str) -> str:
        self.n += 1
        return f"{stem}_{self.n}"

    def init(self, value: np.ndarray, stem: str = "w") -> str:
        name = self.name(stem)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def w(self, shape: tuple[int, ...], scale: float = 0.4, dtype: Any = None) -> str:
        return self.init(self.rng.normal(0, scale, shape).astype(dtype or self.np))

    def i64(self, values: list[int]) -> str:
        return self.init(np.asarray(values, np.int64), "k")

    def f(self, value: float) -> str:
        return self.init(np.asarray(value, self.np), "s")

    def op(self, op: str, inputs: list[str], n_out: int = 1, **attrs: Any) -> Any:
        outs = [self.name(op.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=self.name(f"n_{op}"), **attrs))
        return outs[0] if n_out == 1 else outs

    def input(self, name: str, shape: list[Any], elem: int | None = None) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, self.elem if elem is None else elem, shape))
        return name

    def output(self, name: str, elem: int | None = None, shape: list[Any] | None = None) -> None:
        self.outputs.append(helper.make_tensor_value_info(name, self.elem if elem is None else elem, shape))

    def make(self) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, "corner", self.inputs, self.outputs, initializer=self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
        model.ir_version = 8
        model = onnx.shape_inference.infer_shapes(model)
        # a Reshape by a shape computed from Shape leaves its rank unknown: inference writes a value_info without a
        # shape there, which the checker rejects (no exporter writes one); drop those entries
        keep = [v for v in model.graph.value_info if not v.type.HasField("tensor_type") or v.type.tensor_type.HasField("shape")]
        del model.graph.value_info[:]
        model.graph.value_info.extend(keep)
        onnx.checker.check_model(model)
        return model


Feeds = Callable[[int, int], list[dict[str, np.ndarray]]]


def _normal(shapes: dict[str, tuple[int, ...]], dtype: Any = np.float32, extra: Callable[[np.random.Generator], dict] | None = None) -> Feeds:
    def feeds(n: int, seed: int) -> list[dict[str, np.ndarray]]:
        rng = np.random.default_rng(seed)
        out = []
        for _ in range(n):
            f = {k: (rng.normal(0, 1, s) * np.linspace(0.5, 2, s[-1])).astype(dtype) for k, s in shapes.items()}
            if extra is not None:
                f.update(extra(rng))
            out.append(f)
        return out
    return feeds


# ----------------------------------------------------------------------------- recurrent


def _rnn_op(kind: str, direction: str, seqlens: str, init_state: bool, seed: int) -> tuple[onnx.ModelProto, Feeds]:
    """The GRU/LSTM/RNN op as Keras/tf2onnx and hand-written exporters use it: ``sequence_lens`` (a graph
    input or a constant), ``initial_h`` (and ``initial_c``), any direction; a Linear
    in front and a MatMul head behind."""
    b, t, d, h = 2, 6, 8, 6
    gates = {"GRU": 3, "LSTM": 4, "RNN": 1}[kind]
    nd = 2 if direction == "bidirectional" else 1
    g = G(seed, opset=14)
    x = g.input("x", [t, b, d])
    z = g.op("MatMul", [x, g.w((d, d))])
    ins = [z, g.w((nd, gates * h, d)), g.w((nd, gates * h, h)), g.w((nd, 2 * gates * h), 0.1)]
    feeds_extra = None
    if seqlens == "input":
        ins.append(g.input("seqlens", [b], TensorProto.INT32))
        feeds_extra = lambda rng: {"seqlens": rng.integers(2, t + 1, b).astype(np.int32)}  # noqa: E731
    elif seqlens == "const":
        ins.append(g.init(np.asarray([t, t - 2], np.int32), "seqlens"))
    else:
        ins.append("")
    if init_state:
        state_shape = (nd, b, h)
        ins.append(g.init(g.rng.normal(0, 0.3, state_shape).astype(np.float32), "h0"))
        if kind == "LSTM":
            ins.append(g.init(g.rng.normal(0, 0.3, state_shape).astype(np.float32), "c0"))
    while ins and ins[-1] == "":
        ins.pop()
    attrs: dict[str, Any] = dict(hidden_size=h, direction=direction)
    if kind == "GRU":
        attrs["linear_before_reset"] = 1
    n_out = 3 if kind == "LSTM" else 2
    outs = g.op(kind, ins, n_out=n_out, **attrs)
    y, yh = outs[0], outs[1]
    # Y: (t, nd, b, h) → (b, t, nd·h)
    flat = g.op("Reshape", [g.op("Transpose", [y], perm=[2, 0, 1, 3]), g.i64([b, t, nd * h])])
    g.output(g.op("MatMul", [flat, g.w((nd * h, 4))]))
    g.output(yh)  # the last state as a second output (an encoder's context)
    return g.make(), _normal({"x": (t, b, d)}, extra=feeds_extra)


def _gru_cell_scan(seed: int) -> tuple[onnx.ModelProto, Feeds]:
    """A GRU cell written out inside a Scan (tf.keras / hand-exported RNN loops): x_t·W and h·U MatMuls
    on outer-scope weights, Split into three gates, Sigmoid for z and r, Tanh for the candidate, the blend
    (1 − z)·n + z·h; the states stacked."""
    t, b, d, h = 6, 2, 8, 6
    g = G(seed, opset=18)
    x = g.input("x", [t, b, d])
    wx, wh, bias = g.w((d, 3 * h)), g.w((h, 3 * h)), g.w((3 * h,), 0.1)
    one = g.f(1.0)
    h0 = g.init(np.zeros((b, h), np.float32), "h0")
    n = {k: f"scan_{k}" for k in ("h", "x", "xw", "xb", "hw", "xz", "xr", "xn", "hz", "hr", "hn", "z", "r", "rn",
                                    "nn", "cand", "omz", "a", "c", "new", "out", "zs", "rs")}
    body_nodes = [
        helper.make_node("MatMul", [n["x"], wx], [n["xw"]]), helper.make_node("Add", [n["xw"], bias], [n["xb"]]),
        helper.make_node("MatMul", [n["h"], wh], [n["hw"]]),
        helper.make_node("Split", [n["xb"]], [n["xz"], n["xr"], n["xn"]], axis=-1, num_outputs=3),
        helper.make_node("Split", [n["hw"]], [n["hz"], n["hr"], n["hn"]], axis=-1, num_outputs=3),
        helper.make_node("Add", [n["xz"], n["hz"]], [n["zs"]]), helper.make_node("Sigmoid", [n["zs"]], [n["z"]]),
        helper.make_node("Add", [n["xr"], n["hr"]], [n["rs"]]), helper.make_node("Sigmoid", [n["rs"]], [n["r"]]),
        helper.make_node("Mul", [n["r"], n["hn"]], [n["rn"]]), helper.make_node("Add", [n["xn"], n["rn"]], [n["nn"]]),
        helper.make_node("Tanh", [n["nn"]], [n["cand"]]),
        helper.make_node("Sub", [one, n["z"]], [n["omz"]]), helper.make_node("Mul", [n["omz"], n["cand"]], [n["a"]]),
        helper.make_node("Mul", [n["z"], n["h"]], [n["c"]]), helper.make_node("Add", [n["a"], n["c"]], [n["new"]]),
        helper.make_node("Identity", [n["new"]], [n["out"]]),
    ]
    row = [b, h]
    body = helper.make_graph(body_nodes, "gru_body",
                             [helper.make_tensor_value_info(n["h"], F32, row), helper.make_tensor_value_info(n["x"], F32, [b, d])],
                             [helper.make_tensor_value_info(n["new"], F32, row), helper.make_tensor_value_info(n["out"], F32, row)])
    last, ys = g.op("Scan", [h0, x], n_out=2, body=body, num_scan_inputs=1)
    g.output(g.op("MatMul", [ys, g.w((h, 4))]))
    g.output(last)
    return g.make(), _normal({"x": (t, b, d)})


def _lstm_cell_loop(seed: int) -> tuple[onnx.ModelProto, Feeds]:
    """An LSTM cell written out in a Loop (TorchScript's scripted ``for``): Gather row i, one MatMul for
    the four gates on [x_t, h], Split, Sigmoid ×3, Tanh ×2, carried h and c, the h's as scan output."""
    t, d, h = 6, 8, 6
    g = G(seed, opset=18)
    x = g.input("x", [t, d])
    w, bias = g.w((d + h, 4 * h), 0.3), g.w((4 * h,), 0.1)
    trip, cond = g.init(np.asarray(t, np.int64), "trip"), g.init(np.asarray(True), "cond")
    h0, c0 = g.init(np.zeros((h,), np.float32), "h0"), g.init(np.zeros((h,), np.float32), "c0")
    n = {k: f"loop_{k}" for k in ("i", "c_in", "h", "c", "row", "cat", "mm", "mb", "gi", "gf", "gg", "go", "si", "sf", "tg", "so",
                                    "fc", "ig", "cn", "tc", "hn", "c_out", "out")}
    body_nodes = [
        helper.make_node("Gather", [x, n["i"]], [n["row"]], axis=0),
        helper.make_node("Concat", [n["row"], n["h"]], [n["cat"]], axis=0),
        helper.make_node("MatMul", [n["cat"], w], [n["mm"]]), helper.make_node("Add", [n["mm"], bias], [n["mb"]]),
        helper.make_node("Split", [n["mb"]], [n["gi"], n["gf"], n["gg"], n["go"]], axis=0, num_outputs=4),
        helper.make_node("Sigmoid", [n["gi"]], [n["si"]]), helper.make_node("Sigmoid", [n["gf"]], [n["sf"]]),
        helper.make_node("Tanh", [n["gg"]], [n["tg"]]), helper.make_node("Sigmoid", [n["go"]], [n["so"]]),
        helper.make_node("Mul", [n["sf"], n["c"]], [n["fc"]]), helper.make_node("Mul", [n["si"], n["tg"]], [n["ig"]]),
        helper.make_node("Add", [n["fc"], n["ig"]], [n["cn"]]), helper.make_node("Tanh", [n["cn"]], [n["tc"]]),
        helper.make_node("Mul", [n["so"], n["tc"]], [n["hn"]]),
        helper.make_node("Identity", [n["c_in"]], [n["c_out"]]), helper.make_node("Identity", [n["hn"]], [n["out"]]),
    ]
    body = helper.make_graph(body_nodes, "lstm_body",
                             [helper.make_tensor_value_info(n["i"], TensorProto.INT64, []),
                              helper.make_tensor_value_info(n["c_in"], TensorProto.BOOL, []),
                              helper.make_tensor_value_info(n["h"], F32, [h]), helper.make_tensor_value_info(n["c"], F32, [h])],
                             [helper.make_tensor_value_info(n["c_out"], TensorProto.BOOL, []),
                              helper.make_tensor_value_info(n["hn"], F32, [h]), helper.make_tensor_value_info(n["cn"], F32, [h]),
                              helper.make_tensor_value_info(n["out"], F32, [h])])
    hl, cl, hs = g.op("Loop", [trip, cond, h0, c0], n_out=3, body=body)
    g.output(g.op("MatMul", [hs, g.w((h, 4))]), shape=[t, 4])
    g.output(cl, shape=[h])
    return g.make(), _normal({"x": (t, d)})


def _recurrent_in_body(kind: str, seed: int) -> tuple[onnx.ModelProto, Feeds]:
    """A GRU/LSTM op inside a body, its W/R/B the body's own initializers (silero VAD: each sample rate's
    decoder LSTM in an ``If`` branch; a Loop stepping a GRU over chunks). ``if``: an LSTM per branch, the
    branch picked by a graph input both ways in the data; ``loop``: a GRU over each of 3 chunks, its last
    state carried, a MatMul head after the Loop."""
    t, d, h = 6, 8, 16
    g = G(seed, opset=17)
    x = g.input("x", [t, 1, d])

    def weights(gates: int, stem: str) -> list[onnx.TensorProto]:
        return [numpy_helper.from_array(g.rng.normal(0, 0.3, shape).astype(np.float32), f"{stem}_{k}")
                for k, shape in (("W", (1, gates * h, d)), ("R", (1, gates * h, h)), ("B", (1, 2 * gates * h)))]

    if kind == "if":
        def branch(stem: str) -> onnx.GraphProto:
            inits = weights(4, stem)
            nodes = [helper.make_node("LSTM", [x, *(i.name for i in inits)], ["", f"{stem}_h"], hidden_size=h),
                     helper.make_node("Reshape", [f"{stem}_h", f"{stem}_shape"], [f"{stem}_y"])]
            inits.append(numpy_helper.from_array(np.asarray([1, h], np.int64), f"{stem}_shape"))
            return helper.make_graph(nodes, stem, [], [helper.make_tensor_value_info(f"{stem}_y", F32, [1, h])], inits)

        rate = g.input("sr", [], TensorProto.INT64)
        wide = g.op("Greater", [rate, g.init(np.asarray(12000, np.int64), "limit")])
        y = g.op("If", [wide], then_branch=branch("hi"), else_branch=branch("lo"))
        g.output(g.op("MatMul", [y, g.w((h, 4))]))
        return g.make(), _normal({"x": (t, 1, d)}, extra=lambda rng: {"sr": np.asarray(16000 if rng.random() < 0.5 else 8000, np.int64)})
    inits = weights(3, "gru")
    trip, cond = g.init(np.asarray(3, np.int64), "trip"), g.init(np.asarray(True), "cond")
    h0 = g.init(np.zeros((1, 1, h), np.float32), "h0")
    body_nodes = [helper.make_node("GRU", [x, *(i.name for i in inits), "", "b_h"], ["", "b_hn"], hidden_size=h, linear_before_reset=1),
                  helper.make_node("Identity", ["b_cond"], ["b_cond_out"])]
    body = helper.make_graph(body_nodes, "gru_body",
                             [helper.make_tensor_value_info("b_i", TensorProto.INT64, []),
                              helper.make_tensor_value_info("b_cond", TensorProto.BOOL, []),
                              helper.make_tensor_value_info("b_h", F32, [1, 1, h])],
                             [helper.make_tensor_value_info("b_cond_out", TensorProto.BOOL, []),
                              helper.make_tensor_value_info("b_hn", F32, [1, 1, h])], inits)
    hl = g.op("Loop", [trip, cond, h0], body=body)
    g.output(g.op("MatMul", [g.op("Reshape", [hl, g.i64([1, h])]), g.w((h, 4))]))
    return g.make(), _normal({"x": (t, 1, d)})


# ----------------------------------------------------------------------------- convolutions


def _conv_case(kind: str, seed: int) -> tuple[onnx.ModelProto, Feeds]:
    """One convolution variant between a stem Conv and a 1×1 head, image (1, 4, 9, 9) unless 1-d/3-d."""
    c = 4
    g = G(seed, opset=17)
    if kind == "conv1d":
        x = g.input("x", ["batch", c, 16])
        y = g.op("Conv", [x, g.w((6, c, 5)), g.w((6,), 0.1)], pads=[2, 2], dilations=[1], strides=[2])
        y = g.op("Conv", [g.op("Relu", [y]), g.w((3, 6, 1))])
        g.output(y)
        return g.make(), _normal({"x": (1, c, 16)})
    if kind == "conv3d":
        x = g.input("x", ["batch", 2, 4, 6, 6])
        y = g.op("Conv", [x, g.w((3, 2, 3, 3, 3)), g.w((3,), 0.1)], pads=[1] * 6)
        y = g.op("Conv", [g.op("Relu", [y]), g.w((2, 3, 1, 1, 1))])
        g.output(y)
        return g.make(), _normal({"x": (1, 2, 4, 6, 6)})
    x = g.input("x", ["batch", 3, 9, 9])
    s = g.op("Relu", [g.op("Conv", [x, g.w((c, 3, 3, 3)), g.w((c,), 0.1)], pads=[1, 1, 1, 1])])
    if kind == "convtranspose_outpad_groups":
        y = g.op("ConvTranspose", [s, g.w((c, 2, 3, 3)), g.w((2 * 2,), 0.1)], group=2, strides=[2, 2],
                 pads=[1, 1, 1, 1], output_padding=[1, 1])
    elif kind == "conv_dilated":
        y = g.op("Conv", [s, g.w((c, c, 3, 3)), g.w((c,), 0.1)], dilations=[2, 2], pads=[2, 2, 2, 2])
    elif kind == "conv_depthwise":
        y = g.op("Conv", [s, g.w((c, 1, 3, 3)), g.w((c,), 0.1)], group=c, pads=[1, 1, 1, 1])
    elif kind == "conv_asym_pads":
        y = g.op("Conv", [s, g.w((c, c, 3, 3)), g.w((c,), 0.1)], pads=[0, 1, 2, 1], strides=[2, 1])
    elif kind == "conv_autopad":
        y = g.op("Conv", [s, g.w((c, c, 3, 3)), g.w((c,), 0.1)], auto_pad="SAME_UPPER", strides=[2, 2])
    else:
        raise KeyError(kind)
    g.output(g.op("Conv", [g.op("Relu", [y]), g.w((2, g_channels(kind, c), 1, 1))]))
    return g.make(), _normal({"x": (1, 3, 9, 9)})


def g_channels(kind: str, c: int) -> int:
    return 4 if kind == "convtranspose_outpad_groups" else c


# ----------------------------------------------------------------------------- normalizations and activations


def _seq_with(kind: str, seed: int) -> tuple[onnx.ModelProto, Feeds]:
    """(b, t, 8) → Linear → the piece → Linear: norms and activations in the spellings named by ``kind``."""
    b, t, d = 2, 5, 8
    g = G(seed, opset=17)
    x = g.input("x", ["batch", t, d])
    z = g.op("Add", [g.op("MatMul", [x, g.w((d, d))]), g.w((d,), 0.1)])
    if kind == "rmsnorm_mulself":  # LLaMA-ish, the square as Mul(x, x), Reciprocal(Sqrt) instead of Div
        ms = g.op("ReduceMean", [g.op("Mul", [z, z])], axes=[-1], keepdims=1)
        y = g.op("Mul", [g.op("Mul", [z, g.op("Reciprocal", [g.op("Sqrt", [g.op("Add", [ms, g.f(1e-6)])])])]),
                         g.init((g.rng.random(d) + 0.5).astype(np.float32))])
    elif kind == "rmsnorm_sumsquare":  # ReduceSumSquare/d, Sqrt, Div
        ss = g.op("ReduceSumSquare", [z], axes=[-1], keepdims=1)
        y = g.op("Div", [z, g.op("Sqrt", [g.op("Add", [g.op("Div", [ss, g.f(float(d))]), g.f(1e-6)])])])
    elif kind == "l2norm":  # ReduceL2 then Div (F.normalize), Max with eps
        y = g.op("Div", [z, g.op("Max", [g.op("ReduceL2", [z], axes=[-1], keepdims=1), g.f(1e-12)])])
    elif kind == "layernorm_pow_recip":  # (x − μ)·Reciprocal(Sqrt(mean(Pow(x − μ, 2)) + ε))
        mu = g.op("ReduceMean", [z], axes=[-1], keepdims=1)
        dz = g.op("Sub", [z, mu])
        var = g.op("ReduceMean", [g.op("Pow", [dz, g.f(2.0)])], axes=[-1], keepdims=1)
        y = g.op("Mul", [dz, g.op("Reciprocal", [g.op("Sqrt", [g.op("Add", [var, g.f(1e-5)])])])])
    elif kind == "hardsigmoid_op":  # Keras' hard_sigmoid: alpha 0.2
        y = g.op("Mul", [z, g.op("HardSigmoid", [z], alpha=0.2, beta=0.5)])
    elif kind == "hardswish_op":
        y = g.op("HardSwish", [z])
    elif kind == "hardsigmoid_out":  # relu6(x + 3) / 6 as Add/Clip/Div
        y = g.op("Mul", [z, g.op("Div", [g.op("Clip", [g.op("Add", [z, g.f(3.0)]), g.f(0.0), g.f(6.0)]), g.f(6.0)])])
    elif kind == "mish_softplus":
        y = g.op("Mul", [z, g.op("Tanh", [g.op("Softplus", [z])])])
    elif kind == "gelu_tanh_pow":  # 0.5x(1 + tanh(√(2/π)(x + 0.044715 x³))), x³ as Pow 3
        inner = g.op("Mul", [g.op("Add", [z, g.op("Mul", [g.op("Pow", [z, g.f(3.0)]), g.f(0.044715)])]), g.f(0.7978845608)])
        y = g.op("Mul", [g.op("Mul", [z, g.f(0.5)]), g.op("Add", [g.op("Tanh", [inner]), g.f(1.0)])])
    elif kind == "gelu_erf_div":  # x·0.5·(1 + erf(x / √2)), the √2 as a Div
        y = g.op("Mul", [g.op("Mul", [z, g.op("Add", [g.op("Erf", [g.op("Div", [z, g.f(1.4142135)])]), g.f(1.0)])]), g.f(0.5)])
    elif kind == "elu_selu":
        y = g.op("Add", [g.op("Elu", [z], alpha=1.0), g.op("Selu", [z])])
    elif kind == "clip_min_only":  # Clip with only a min (ReLU with a floor), the max input left empty
        y = g.op("Clip", [z, g.f(-0.5)])
    elif kind == "leaky_thresholded":
        y = g.op("Add", [g.op("LeakyRelu", [z], alpha=0.1), g.op("ThresholdedRelu", [z], alpha=0.5)])
    else:
        raise KeyError(kind)
    g.output(g.op("MatMul", [y, g.w((d, 4))]))
    return g.make(), _normal({"x": (1, t, d)})


def _img_with(kind: str, seed: int) -> tuple[onnx.ModelProto, Feeds]:
    """(b, 3, 8, 8) → Conv → the piece → Conv."""
    c = 4
    g = G(seed, opset=17)
    x = g.input("x", ["batch", 3, 8, 8])
    z = g.op("Conv", [x, g.w((c, 3, 3, 3)), g.w((c,), 0.1)], pads=[1] * 4)
    if kind == "groupnorm_instnorm":  # torch's GroupNorm at opset < 18: Reshape (b, g, −1) → InstanceNorm → Reshape → Mul/Add
        r = g.op("Reshape", [z, g.i64([0, 2, -1])])
        n = g.op("InstanceNormalization", [r, g.init(np.ones(2, np.float32)), g.init(np.zeros(2, np.float32))], epsilon=1e-5)
        back = g.op("Reshape", [n, g.op("Shape", [z])])
        y = g.op("Add", [g.op("Mul", [back, g.init((g.rng.random((c, 1, 1)) + 0.5).astype(np.float32))]), g.w((c, 1, 1), 0.1)])
    elif kind == "prelu_channel":
        y = g.op("PRelu", [z, g.init(g.rng.uniform(0.05, 0.3, (c, 1, 1)).astype(np.float32))])
    elif kind == "hardswish_img_op":
        y = g.op("HardSwish", [z])
    elif kind == "instnorm_affine":
        y = g.op("InstanceNormalization", [z, g.init((g.rng.random(c) + 0.5).astype(np.float32)), g.w((c,), 0.1)], epsilon=1e-5)
    else:
        raise KeyError(kind)
    g.output(g.op("Conv", [y, g.w((2, c, 1, 1))]))
    return g.make(), _normal({"x": (1, 3, 8, 8)})


# ----------------------------------------------------------------------------- dtypes, shapes, weights, outputs


def _corner(kind: str, seed: int) -> tuple[onnx.ModelProto, Feeds]:
    d, t = 8, 5
    g = G(seed, opset=17)
    if kind == "fp16_fp32_island":  # an fp16 model whose softmax and norm run in float32 (Cast up, Cast back)
        g = G(seed, opset=17, elem=F16)
        x = g.input("x", ["batch", t, d])
        z = g.op("MatMul", [x, g.w((d, d))])
        up = g.op("Cast", [z], to=F32)
        sm = g.op("Softmax", [up], axis=-1)
        mu = g.op("ReduceMean", [up], axes=[-1], keepdims=1)
        island = g.op("Add", [sm, g.op("Sub", [up, mu])])
        down = g.op("Cast", [island], to=F16)
        g.output(g.op("MatMul", [down, g.w((d, 4))]))
        return g.make(), _normal({"x": (1, t, d)}, np.float16)
    if kind in ("uint8_image_input", "int8_input"):
        elem, lo, hi = (TensorProto.UINT8, 0, 256) if kind == "uint8_image_input" else (TensorProto.INT8, -128, 128)
        x = g.input("x", ["batch", 3, 8, 8], elem)
        f = g.op("Div", [g.op("Sub", [g.op("Cast", [x], to=F32), g.f(127.5 if lo == 0 else 0.0)]), g.f(127.5)])
        y = g.op("Relu", [g.op("Conv", [f, g.w((4, 3, 3, 3)), g.w((4,), 0.1)], pads=[1] * 4)])
        g.output(g.op("Conv", [y, g.w((2, 4, 1, 1))]))
        np_dt = np.uint8 if lo == 0 else np.int8
        return g.make(), lambda n, s: [{"x": np.random.default_rng([s, i]).integers(lo, hi, (1, 3, 8, 8)).astype(np_dt)} for i in range(n)]
    if kind == "bool_and_rank0_outputs":
        x = g.input("x", ["batch", t, d])
        z = g.op("MatMul", [x, g.w((d, d))])
        g.output(g.op("MatMul", [g.op("Relu", [z]), g.w((d, 4))]))
        g.output(g.op("Greater", [z, g.f(0.0)]), TensorProto.BOOL)
        g.output(g.op("ReduceMean", [g.op("Abs", [z])], keepdims=0))
        return g.make(), _normal({"x": (1, t, d)})
    if kind == "rank5":  # a 5-d tensor between MatMuls (heads split twice), Softmax over the last axis
        x = g.input("x", ["batch", t, d])
        z = g.op("MatMul", [x, g.w((d, d))])
        r5 = g.op("Reshape", [z, g.i64([0, t, 2, 2, 2])])
        sm = g.op("Softmax", [g.op("Mul", [r5, g.w((2, 2, 2), 1.0)])], axis=-1)
        g.output(g.op("MatMul", [g.op("Reshape", [sm, g.i64([0, t, d])]), g.w((d, 4))]))
        return g.make(), _normal({"x": (1, t, d)})
    if kind == "empty_dim":  # a zero-length slice concatenated back (a cache of length 0), then MatMul
        x = g.input("x", ["batch", t, d])
        z = g.op("MatMul", [x, g.w((d, d))])
        empty = g.op("Slice", [z, g.i64([0]), g.i64([0]), g.i64([1])])  # (b, 0, d)
        cat = g.op("Concat", [empty, z], axis=1)
        g.output(g.op("MatMul", [cat, g.w((d, 4))]))
        g.output(g.op("MatMul", [empty, g.w((d, 4))]))  # an empty output
        return g.make(), _normal({"x": (1, t, d)})
    if kind == "batch3_dynamic":  # symbolic batch, calibration samples of batch 3, a batch-mixing Reshape
        x = g.input("x", ["batch", t, d])
        z = g.op("Relu", [g.op("MatMul", [x, g.w((d, d))])])
        g.output(g.op("MatMul", [g.op("Reshape", [z, g.i64([-1, d])]), g.w((d, 4))]))
        return g.make(), _normal({"x": (3, t, d)})
    if kind == "shape_gather_reshape_weight":  # the weight's shape from the activation's width: Shape→Gather→Concat→Reshape
        x = g.input("x", ["batch", t, d])
        flat = g.w((d * d,))
        width = g.op("Gather", [g.op("Shape", [x]), g.i64([2])], axis=0)
        wr = g.op("Reshape", [flat, g.op("Concat", [width, g.i64([-1])], axis=0)])
        z = g.op("MatMul", [x, wr])
        g.output(g.op("MatMul", [g.op("Relu", [z]), g.w((d, 4))]))
        return g.make(), _normal({"x": (1, t, d)})
    if kind == "shared_weight_add":  # one initializer both a MatMul weight and an Add operand
        x = g.input("x", ["batch", d, d])
        w = g.w((d, d))
        z = g.op("Add", [g.op("MatMul", [x, w]), w])
        g.output(g.op("MatMul", [g.op("Relu", [z]), g.w((d, 4))]))
        return g.make(), _normal({"x": (1, d, d)})
    if kind == "weight_through_ops":  # weights via Identity, Transpose, Reshape, Cast(fp16 → float)
        x = g.input("x", ["batch", t, d])
        w1 = g.op("Identity", [g.w((d, d))])
        w2 = g.op("Transpose", [g.w((d, d))], perm=[1, 0])
        w3 = g.op("Cast", [g.w((d, d), dtype=np.float16)], to=F32)
        w4 = g.op("Reshape", [g.w((d * 4,)), g.i64([d, 4])])
        z = g.op("Relu", [g.op("MatMul", [g.op("Relu", [g.op("MatMul", [x, w1])]), w2])])
        g.output(g.op("MatMul", [g.op("Relu", [g.op("MatMul", [z, w3])]), w4]))
        return g.make(), _normal({"x": (1, t, d)})
    if kind == "const_folded_left":  # a Constant node's weight scaled by Mul/Add (unfolded arithmetic on constants)
        x = g.input("x", ["batch", t, d])
        c = g.op("Constant", [], value=numpy_helper.from_array(g.rng.normal(0, 0.4, (d, d)).astype(np.float32)))
        w = g.op("Add", [g.op("Mul", [c, g.f(0.5)]), g.f(0.01)])
        g.output(g.op("MatMul", [g.op("Relu", [g.op("MatMul", [x, w])]), g.w((d, 4))]))
        return g.make(), _normal({"x": (1, t, d)})
    if kind == "outputs_shared_and_fed":  # y an output and fed on; Identity(y) another output; a second head on y
        x = g.input("x", ["batch", t, d])
        y = g.op("MatMul", [x, g.w((d, d))])
        g.output(y)
        g.output(g.op("Identity", [y]))
        g.output(g.op("MatMul", [g.op("Relu", [y]), g.w((d, 4))]))
        return g.make(), _normal({"x": (1, t, d)})
    if kind == "output_is_input_or_init":  # a graph input and an initializer passed straight out
        x = g.input("x", ["batch", t, d])
        g.output(g.op("MatMul", [g.op("Relu", [g.op("MatMul", [x, g.w((d, d))])]), g.w((d, 4))]))
        g.output("x", shape=["batch", t, d])
        anchors = g.init(np.linspace(0, 1, 6, dtype=np.float32).reshape(3, 2), "anchors")
        g.output(anchors, shape=[3, 2])
        return g.make(), _normal({"x": (1, t, d)})
    if kind == "weight_is_output":  # a MatMul weight that is also a graph output (a codebook, a projection handed out)
        x = g.input("x", ["batch", t, d])
        w = g.w((d, d))
        g.output(g.op("MatMul", [g.op("Relu", [g.op("MatMul", [x, w])]), g.w((d, 4))]))
        g.output(w, shape=[d, d])
        return g.make(), _normal({"x": (1, t, d)})
    if kind == "scalar_and_bool_inputs":  # a rank-0 float input (a temperature) and a bool mask input, Where before Softmax
        x = g.input("x", ["batch", t, d])
        temp = g.input("temp", [])
        keep = g.input("keep", ["batch", t], TensorProto.BOOL)
        z = g.op("Div", [g.op("MatMul", [x, g.w((d, d))]), temp])
        s = g.op("Softmax", [g.op("Where", [g.op("Unsqueeze", [keep, g.i64([-1])]), z, g.f(-1e4)])], axis=-1)
        g.output(g.op("MatMul", [s, g.w((d, 4))]))
        return g.make(), lambda n, sd: [{"x": np.random.default_rng([sd, i]).normal(0, 1, (1, t, d)).astype(np.float32),
                                        "temp": np.asarray(np.random.default_rng([sd, i]).uniform(0.5, 2.0), np.float32),
                                        "keep": np.arange(t)[None] < np.random.default_rng([sd, i]).integers(1, t + 1)} for i in range(n)]
    if kind == "constant_node_output":  # a Constant node's output handed out as a graph output beside the result
        x = g.input("x", ["batch", t, d])
        g.output(g.op("MatMul", [g.op("Relu", [g.op("MatMul", [x, g.w((d, d))])]), g.w((d, 4))]))
        g.output(g.op("Constant", [], value=numpy_helper.from_array(np.arange(4, dtype=np.float32))), shape=[4])
        return g.make(), _normal({"x": (1, t, d)})
    raise KeyError(kind)


# ----------------------------------------------------------------------------- fuzz18: more exporters' spellings


#: Cases whose weights are written as external data (``<case>.onnx.data`` beside the model; the path is what
#: quantize is handed, as a user whose exporter wrote a > 2 GB-style file would).
EXTERNAL_CASES = frozenset({"external_data_weights"})


def _spelling18(kind: str, seed: int) -> tuple[onnx.ModelProto, Feeds]:
    """fuzz18's hand-built spellings: tf2onnx's NHWC Transposes around every Conv and Conv1d by Unsqueeze →
    Conv → Squeeze; Dropout/Identity leftovers; opset-11 and opset-13 op forms (attribute axes, Split by
    attribute, Resize with roi/scales, Softmax-11's flattening axis); DepthToSpace/SpaceToDepth heads; Resize by
    scales and by sizes computed from Shape; LayerNorm with Max(var, ε) then Sqrt → Reciprocal; an fp16
    RMSNorm upcast around its reduction; a padding mask by Equal/Not/Where; LogSoftmax heads written and as
    one op; position ids by Range over a Shape; weights in external data; attention heads split and merged by
    Shape → Gather → Concat → Reshape with symbolic batch and length; TopK (k an input)/ArgMax/ArgMin heads."""
    d, t = 8, 6
    if kind == "tf_nhwc_conv1d":  # tf2onnx Conv1D: (b, t, c) → Unsqueeze → Transpose NCHW → Conv (1×k) → Transpose → Squeeze
        g = G(seed, opset=13)
        x = g.input("x", ["batch", t, d])
        h = x
        for cin, cout in ((d, 12), (12, d)):
            u = g.op("Unsqueeze", [h, g.i64([1])])  # (b, 1, t, c)
            n = g.op("Transpose", [u], perm=[0, 3, 1, 2])  # (b, c, 1, t)
            cv = g.op("Conv", [n, g.w((cout, cin, 1, 3))], pads=[0, 1, 0, 1])
            back = g.op("Transpose", [cv], perm=[0, 2, 3, 1])  # (b, 1, t, cout)
            h = g.op("Relu", [g.op("Add", [g.op("Squeeze", [back, g.i64([1])]), g.w((cout,), 0.1)])])  # BiasAdd on the last axis
        g.output(g.op("MatMul", [h, g.w((d, 4))]))
        return g.make(), _normal({"x": (1, t, d)})
    if kind == "tf_nhwc_conv2d":  # a Keras CNN: NHWC input, Transpose around every Conv, BiasAdd, Relu6 as Clip, mean over H, W, Dense
        g = G(seed, opset=13)
        x = g.input("x", ["batch", 8, 8, 3])
        h, cin = x, 3
        for cout, stride in ((6, 1), (8, 2)):
            n = g.op("Transpose", [h], perm=[0, 3, 1, 2])
            cv = g.op("Conv", [n, g.w((cout, cin, 3, 3))], pads=[1, 1, 1, 1], strides=[stride, stride])
            h = g.op("Clip", [g.op("Add", [g.op("Transpose", [cv], perm=[0, 2, 3, 1]), g.w((cout,), 0.1)]), g.f(0.0), g.f(6.0)])
            cin = cout
        pooled = g.op("ReduceMean", [h], axes=[1, 2], keepdims=0)
        g.output(g.op("Add", [g.op("MatMul", [pooled, g.w((cin, 5))]), g.w((5,), 0.1)]))
        return g.make(), _normal({"x": (1, 8, 8, 3)})
    if kind == "dropout_identity":  # inference leftovers: Dropout (ratio input, training_mode false, mask output read), Identity chains
        g = G(seed, opset=13)
        x = g.input("x", ["batch", t, d])
        z = g.op("MatMul", [x, g.w((d, d))])
        dr, mask = g.op("Dropout", [z, g.f(0.1), g.init(np.asarray(False), "train")], n_out=2)
        a = g.op("Identity", [g.op("Identity", [g.op("Relu", [dr])])])
        b = g.op("Mul", [g.op("Identity", [a]), g.op("Cast", [mask], to=F32)])  # the all-true mask read, as some exports keep it
        g.output(g.op("MatMul", [g.op("Dropout", [b]), g.w((d, 4))]))
        return g.make(), _normal({"x": (1, t, d)})
    if kind == "opset11_mix":  # opset 11's forms: Split/Unsqueeze/Squeeze/ReduceMean by attribute, Clip by inputs,
        g = G(seed, opset=11)  # Resize with roi and scales, Softmax-11 over a flattened (t, d), a written-out LayerNorm, Dropout-10
        x = g.input("x", ["batch", t, d])
        z = g.op("MatMul", [x, g.w((d, 2 * d))])
        p, q = g.op("Split", [z], n_out=2, axis=-1, split=[d, d])
        mu = g.op("ReduceMean", [p], axes=[-1], keepdims=1)
        dz = g.op("Sub", [p, mu])
        var = g.op("ReduceMean", [g.op("Mul", [dz, dz])], axes=[-1], keepdims=1)
        ln = g.op("Add", [g.op("Mul", [g.op("Div", [dz, g.op("Sqrt", [g.op("Add", [var, g.f(1e-5)])])]), g.w((d,), 0.2)]), g.w((d,), 0.1)])
        sm = g.op("Softmax", [q], axis=1)  # opset < 13: over the flattened (t, d) of each batch row
        c = g.op("Clip", [g.op("Add", [ln, sm]), g.f(-3.0), g.f(3.0)])
        u = g.op("Unsqueeze", [c], axes=[1])  # (b, 1, t, d)
        up = g.op("Resize", [u, g.init(np.zeros(0, np.float32), "roi"), g.init(np.asarray([1, 1, 2, 1], np.float32), "scales")],
                  mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")
        s = g.op("Squeeze", [g.op("Dropout", [up], ratio=0.2)], axes=[1])  # (b, 2t, d)
        g.output(g.op("MatMul", [g.op("Relu", [s]), g.w((d, 4))]))
        return g.make(), _normal({"x": (1, t, d)})
    if kind == "opset13_mix":  # opset 13's forms: Split by an input, ReduceSum/Squeeze/Unsqueeze axes as inputs, Resize by sizes
        g = G(seed, opset=13)
        x = g.input("x", ["batch", t, d])
        z = g.op("MatMul", [x, g.w((d, 2 * d))])
        p, q = g.op("Split", [z, g.i64([d, d])], n_out=2, axis=-1)
        ss = g.op("ReduceSum", [g.op("Mul", [p, p]), g.i64([-1])], keepdims=1)
        rms = g.op("Mul", [p, g.op("Reciprocal", [g.op("Sqrt", [g.op("Add", [g.op("Div", [ss, g.f(float(d))]), g.f(1e-6)])])])])
        gate = g.op("Mul", [q, g.op("Sigmoid", [q])])
        u = g.op("Unsqueeze", [g.op("Mul", [rms, gate]), g.i64([1])])
        shp = g.op("Shape", [u])
        sizes = g.op("Concat", [g.op("Slice", [shp, g.i64([0]), g.i64([2])]), g.i64([2 * t, d])], axis=0)
        up = g.op("Resize", [u, "", "", sizes], mode="linear", coordinate_transformation_mode="half_pixel")
        s = g.op("Squeeze", [up, g.i64([1])])
        g.output(g.op("MatMul", [s, g.w((d, 4))]))
        return g.make(), _normal({"x": (1, t, d)})
    if kind == "depth_space":  # SpaceToDepth → Conv → DepthToSpace (DCR), a second head DepthToSpace (CRD) → Conv
        g = G(seed, opset=13)
        x = g.input("x", ["batch", 3, 8, 8])
        s2d = g.op("SpaceToDepth", [x], blocksize=2)  # (b, 12, 4, 4)
        z = g.op("Relu", [g.op("Conv", [s2d, g.w((16, 12, 3, 3)), g.w((16,), 0.1)], pads=[1] * 4)])
        dcr = g.op("DepthToSpace", [z], blocksize=2, mode="DCR")  # (b, 4, 8, 8)
        crd = g.op("DepthToSpace", [g.op("Conv", [z, g.w((16, 16, 1, 1))])], blocksize=2, mode="CRD")
        g.output(g.op("Conv", [g.op("Add", [dcr, crd]), g.w((2, 4, 3, 3))], pads=[1] * 4))
        g.output(g.op("Sigmoid", [g.op("DepthToSpace", [g.op("Conv", [z, g.w((12, 16, 1, 1))])], blocksize=2, mode="CRD")]))
        return g.make(), _normal({"x": (1, 3, 8, 8)})
    if kind == "resize_scales_sizes":  # ConvTranspose ×2, Resize by scales (opset 13, roi ""), Resize by sizes from Shape·2
        g = G(seed, opset=13)
        x = g.input("x", ["batch", 3, 8, 8])
        z = g.op("Relu", [g.op("Conv", [x, g.w((4, 3, 3, 3)), g.w((4,), 0.1)], pads=[1] * 4, strides=[2, 2])])  # 4×4
        ct = g.op("ConvTranspose", [z, g.w((4, 4, 2, 2)), g.w((4,), 0.1)], strides=[2, 2])  # 8×8
        r1 = g.op("Resize", [z, "", g.init(np.asarray([1, 1, 2, 2], np.float32), "scales")], mode="linear",
                  coordinate_transformation_mode="pytorch_half_pixel")
        hw = g.op("Mul", [g.op("Slice", [g.op("Shape", [z]), g.i64([2]), g.i64([4])]), g.i64([2])])
        sizes = g.op("Concat", [g.op("Slice", [g.op("Shape", [z]), g.i64([0]), g.i64([2])]), hw], axis=0)
        r2 = g.op("Resize", [z, "", "", sizes], mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")
        s = g.op("Add", [g.op("Add", [ct, r1]), r2])
        g.output(g.op("Conv", [s, g.w((2, 4, 1, 1))]))
        return g.make(), _normal({"x": (1, 3, 8, 8)})
    if kind in ("layernorm_max_eps", "layernorm_moments_max"):  # Keras/TF: variance floored by Max(var, ε), Sqrt, Reciprocal
        g = G(seed, opset=17)
        x = g.input("x", ["batch", t, d])
        z = g.op("Add", [g.op("MatMul", [x, g.w((d, d))]), g.w((d,), 0.3)])
        mu = g.op("ReduceMean", [z], axes=[-1], keepdims=1)
        if kind == "layernorm_max_eps":
            dz = g.op("Sub", [z, mu])
            var = g.op("ReduceMean", [g.op("Mul", [dz, dz])], axes=[-1], keepdims=1)
        else:  # E[x²] − E[x]²
            var = g.op("Sub", [g.op("ReduceMean", [g.op("Mul", [z, z])], axes=[-1], keepdims=1), g.op("Mul", [mu, mu])])
            dz = g.op("Sub", [z, mu])
        inv = g.op("Reciprocal", [g.op("Sqrt", [g.op("Max", [var, g.f(1e-5)])])])
        y = g.op("Add", [g.op("Mul", [g.op("Mul", [dz, inv]), g.init((g.rng.random(d) + 0.5).astype(np.float32))]), g.w((d,), 0.1)])
        g.output(g.op("MatMul", [g.op("Relu", [y]), g.w((d, 4))]))
        return g.make(), _normal({"x": (1, t, d)})
    if kind == "rmsnorm_fp16_upcast":  # fp16 model: Cast to float32 around the reduction, Reciprocal(Sqrt), Cast back, · γ (fp16)
        g = G(seed, opset=17, elem=F16)
        x = g.input("x", ["batch", t, d])
        z = g.op("MatMul", [x, g.w((d, d))])
        up = g.op("Cast", [z], to=F32)
        ms = g.op("ReduceMean", [g.op("Mul", [up, up])], axes=[-1], keepdims=1)
        inv = g.op("Reciprocal", [g.op("Sqrt", [g.op("Add", [ms, g.init(np.asarray(1e-6, np.float32), "eps")])])])
        y = g.op("Mul", [g.op("Cast", [g.op("Mul", [up, inv])], to=F16), g.init((g.rng.random(d) + 0.5).astype(np.float16))])
        g.output(g.op("MatMul", [y, g.w((d, 4))]))
        return g.make(), _normal({"x": (1, t, d)}, np.float16)
    if kind == "mask_equal_not_where":  # padding from ids: Not(Equal(ids, pad)), Where(mask, scores, finfo.min), Softmax, · V
        g = G(seed, opset=17)
        x = g.input("x", ["batch", t, d])
        ids = g.input("ids", ["batch", t], TensorProto.INT64)
        keep = g.op("Not", [g.op("Equal", [ids, g.init(np.asarray(0, np.int64), "pad_id")])])
        q, k, v = (g.op("MatMul", [x, g.w((d, d))]) for _ in range(3))
        sc = g.op("Mul", [g.op("MatMul", [q, g.op("Transpose", [k], perm=[0, 2, 1])]), g.f(d ** -0.5)])
        m = g.op("Unsqueeze", [keep, g.i64([1])])  # (b, 1, t): keys
        p = g.op("Softmax", [g.op("Where", [m, sc, g.f(float(np.finfo(np.float32).min))])], axis=-1)
        g.output(g.op("MatMul", [g.op("MatMul", [p, v]), g.w((d, 4))]))
        return g.make(), lambda n, sd: [
            {"x": np.random.default_rng([sd, i]).normal(0, 1, (1, t, d)).astype(np.float32),
             "ids": np.where(np.arange(t)[None] < np.random.default_rng([sd, i, 1]).integers(2, t + 1),
                             np.random.default_rng([sd, i, 2]).integers(1, 50, (1, t)), 0).astype(np.int64)} for i in range(n)]
    if kind == "logsoftmax_heads":  # CTC log-probs: LogSoftmax as one op, and written (x − max − log Σ exp(x − max))
        g = G(seed, opset=17)
        x = g.input("x", ["batch", t, d])
        z = g.op("Relu", [g.op("MatMul", [x, g.w((d, d))])])
        lo = g.op("Add", [g.op("MatMul", [z, g.w((d, 6), 1.0)]), g.w((6,), 0.3)])
        g.output(g.op("LogSoftmax", [lo], axis=-1))
        sh = g.op("Sub", [lo, g.op("ReduceMax", [lo], axes=[-1], keepdims=1)])
        g.output(g.op("Sub", [sh, g.op("Log", [g.op("ReduceSum", [g.op("Exp", [sh]), g.i64([-1])], keepdims=1)])]))
        return g.make(), _normal({"x": (1, t, d)})
    if kind == "range_position_ids":  # position ids by Range(0, Shape[1], 1) → Unsqueeze → Gather of a table, + x·W, then a LayerNorm op
        g = G(seed, opset=17)
        x = g.input("x", ["batch", "seq", d])
        n = g.op("Squeeze", [g.op("Slice", [g.op("Shape", [x]), g.i64([1]), g.i64([2])]), g.i64([0])])
        pos = g.op("Unsqueeze", [g.op("Range", [g.init(np.asarray(0, np.int64), "zero"), n, g.init(np.asarray(1, np.int64), "one")]), g.i64([0])])
        e = g.op("Add", [g.op("MatMul", [x, g.w((d, d))]), g.op("Gather", [g.w((32, d), 0.5), pos], axis=0)])
        ln = g.op("LayerNormalization", [e, g.init((g.rng.random(d) + 0.5).astype(np.float32)), g.w((d,), 0.1)], axis=-1, epsilon=1e-5)
        g.output(g.op("MatMul", [ln, g.w((d, 4))]))
        return g.make(), lambda n_, sd: [{"x": (np.random.default_rng([sd, i]).normal(0, 1, (1, int(np.random.default_rng([sd, i, 1]).integers(3, 12)), d))
                                               * np.linspace(0.5, 2, d)).astype(np.float32)} for i in range(n_)]
    if kind == "external_data_weights":  # every initializer in a side file (main() saves it so)
        g = G(seed, opset=17)
        x = g.input("x", ["batch", t, d])
        z = g.op("Relu", [g.op("Add", [g.op("MatMul", [x, g.w((d, 32))]), g.w((32,), 0.1)])])
        g.output(g.op("MatMul", [z, g.w((32, 4))]))
        return g.make(), _normal({"x": (1, t, d)})
    if kind == "heads_by_shape":  # TorchScript-11/13 attention: heads split and merged by Shape → Gather → Unsqueeze → Concat → Reshape
        g = G(seed, opset=13)
        x = g.input("x", ["batch", "seq", d])
        shp = g.op("Shape", [x])
        b = g.op("Unsqueeze", [g.op("Gather", [shp, g.init(np.asarray(0, np.int64), "i0")], axis=0), g.i64([0])])
        n = g.op("Unsqueeze", [g.op("Gather", [shp, g.init(np.asarray(1, np.int64), "i1")], axis=0), g.i64([0])])
        split = g.op("Concat", [b, n, g.i64([2]), g.i64([d // 2])], axis=0)

        def heads(w: str) -> str:
            return g.op("Transpose", [g.op("Reshape", [g.op("MatMul", [x, w]), split])], perm=[0, 2, 1, 3])

        q, k, v = heads(g.w((d, d))), heads(g.w((d, d))), heads(g.w((d, d)))
        sc = g.op("Div", [g.op("MatMul", [q, g.op("Transpose", [k], perm=[0, 1, 3, 2])]), g.f(float(np.sqrt(d // 2)))])
        a = g.op("Transpose", [g.op("MatMul", [g.op("Softmax", [sc], axis=-1), v])], perm=[0, 2, 1, 3])
        merged = g.op("Reshape", [a, g.op("Concat", [b, n, g.i64([d])], axis=0)])
        g.output(g.op("MatMul", [g.op("Add", [merged, x]), g.w((d, 4))]), shape=["batch", "seq", 4])
        return g.make(), lambda n_, sd: [{"x": (np.random.default_rng([sd, i]).normal(0, 1, (int(np.random.default_rng([sd, i, 1]).integers(1, 3)),
                                                                                            int(np.random.default_rng([sd, i, 2]).integers(3, 10)), d))
                                               * np.linspace(0.5, 2, d)).astype(np.float32)} for i in range(n_)]
    if kind == "topk_argmax_heads":  # classifier heads: TopK (k an input), ArgMax keepdims=0 select_last_index, ArgMin,
        g = G(seed, opset=13)  # the chosen scores picked back by GatherElements, a Softmax over the top k
        x = g.input("x", ["batch", d])
        kk = g.input("k", [1], TensorProto.INT64)
        lo = g.op("Add", [g.op("MatMul", [g.op("Relu", [g.op("MatMul", [x, g.w((d, 16))])]), g.w((16, 10), 1.0)]), g.w((10,), 0.2)])
        vals, idx = g.op("TopK", [lo, kk], n_out=2, axis=-1)
        g.output(g.op("Softmax", [vals], axis=-1), shape=["batch", None])
        g.output(idx, TensorProto.INT64, ["batch", None])
        am = g.op("ArgMax", [lo], axis=-1, keepdims=0, select_last_index=1)
        g.output(am, TensorProto.INT64, ["batch"])
        g.output(g.op("ArgMin", [lo], axis=-1, keepdims=1), TensorProto.INT64, ["batch", 1])
        g.output(g.op("GatherElements", [lo, g.op("Unsqueeze", [am, g.i64([1])])], axis=1), shape=["batch", 1])
        return g.make(), lambda n_, sd: [{"x": (np.random.default_rng([sd, i]).normal(0, 1, (2, d)) * np.linspace(0.5, 2, d)).astype(np.float32),
                                          "k": np.asarray([3], np.int64)} for i in range(n_)]
    raise KeyError(kind)


SPELLINGS18 = ("tf_nhwc_conv1d", "tf_nhwc_conv2d", "dropout_identity", "opset11_mix", "opset13_mix", "depth_space",
               "resize_scales_sizes", "layernorm_max_eps", "layernorm_moments_max", "rmsnorm_fp16_upcast",
               "mask_equal_not_where", "logsoftmax_heads", "range_position_ids", "external_data_weights", "heads_by_shape", "topk_argmax_heads")


# ----------------------------------------------------------------------------- fuzz20: still more exporters' spellings


def _spelling20(kind: str, seed: int) -> tuple[onnx.ModelProto, Feeds]:
    """fuzz20's hand-built spellings, the forms torch's exporters do not write or write only at one opset: a float
    model already holding QuantizeLinear/DequantizeLinear (a partly-quantized QAT export: an activation pair and
    int8 per-channel weights behind DequantizeLinear); Gemm with transA/transB and alpha/beta ≠ 1; Split-18 by
    num_outputs with a short last piece beside Split by a sizes input; masks made by ConstantOfShape (ones of a Shape,
    a causal triangle by Trilu); InstanceNorm written as ReduceMean over (H, W) with opset 18's axes input; MatMul with a
    per-head 3-D weight and a broadcast (1, K, N) weight; a decoder's cached keys and values as graph inputs of
    symbolic length, Concat'ed before the new ones."""
    d, t = 8, 6
    if kind == "qdq_partly_quantized":  # a QAT export: x → Q/DQ (int8) → MatMul(DQ(int8 W, per-channel)) → Relu → a float MatMul
        g = G(seed, opset=13)
        x = g.input("x", ["batch", t, d])
        xq = g.op("DequantizeLinear", [g.op("QuantizeLinear", [x, g.f(0.03), g.init(np.asarray(0, np.int8), "zp")]), g.f(0.03),
                                       g.init(np.asarray(0, np.int8), "zp")])
        wf = g.rng.normal(0, 0.4, (d, d)).astype(np.float32)
        sc = (np.abs(wf).max(0) / 127).astype(np.float32)
        wq = g.op("DequantizeLinear", [g.init(np.clip(np.round(wf / sc), -127, 127).astype(np.int8), "wq"), g.init(sc, "wscale"),
                                       g.init(np.zeros(d, np.int8), "wzp")], axis=1)
        z = g.op("Relu", [g.op("Add", [g.op("MatMul", [xq, wq]), g.w((d,), 0.1)])])
        zq = g.op("DequantizeLinear", [g.op("QuantizeLinear", [z, g.f(0.02), g.init(np.asarray(0, np.uint8), "uzp")]), g.f(0.02),
                                       g.init(np.asarray(0, np.uint8), "uzp")])
        g.output(g.op("MatMul", [g.op("Relu", [g.op("MatMul", [zq, g.w((d, d))])]), g.w((d, 4))]))
        return g.make(), _normal({"x": (1, t, d)})
    if kind == "gemm_trans_alpha_beta":  # Gemm transB=1 alpha 0.5 beta 2 (C a row); Gemm transA=1 over a Transpose, beta 0, C scalar
        g = G(seed, opset=13)
        x = g.input("x", ["batch", d])
        z = g.op("Relu", [g.op("Gemm", [x, g.w((16, d)), g.w((1, 16), 0.1)], transB=1, alpha=0.5, beta=2.0)])
        zt = g.op("Transpose", [z], perm=[1, 0])
        y = g.op("Gemm", [zt, g.w((16, d)), g.f(0.3)], transA=1, alpha=1.5, beta=0.0)
        g.output(g.op("Gemm", [g.op("Relu", [y]), g.w((4, d))], transB=1, alpha=2.0))
        return g.make(), _normal({"x": (2, d)})
    if kind == "split18_num_outputs":  # Split-18 num_outputs=3 on a width of 8 (3, 3, 2), Split by a sizes input (2, 6)
        g = G(seed, opset=18)
        x = g.input("x", ["batch", t, d])
        z = g.op("MatMul", [x, g.w((d, d))])
        a, b, c = g.op("Split", [z], n_out=3, axis=-1, num_outputs=3)
        p, q = g.op("Split", [g.op("MatMul", [x, g.w((d, d))]), g.i64([2, 6])], n_out=2, axis=2)
        gate = g.op("Mul", [a, g.op("Sigmoid", [b])])  # (.., 3)
        cat = g.op("Concat", [gate, g.op("Tanh", [c]), p, g.op("Relu", [q])], axis=-1)  # 3 + 2 + 2 + 6 = 13
        g.output(g.op("MatMul", [cat, g.w((13, 4))]))
        return g.make(), _normal({"x": (1, t, d)})
    if kind == "constant_of_shape_masks":  # ones (b, t) by ConstantOfShape of Shape[0:2], (1 − m)·−1e4; a causal triangle by
        g = G(seed, opset=17)  # ConstantOfShape(t, t) of finfo.min → Trilu(upper, k = 1); both added to the scores
        x = g.input("x", ["batch", "seq", d])
        shp = g.op("Shape", [x])
        ones = g.op("ConstantOfShape", [g.op("Slice", [shp, g.i64([0]), g.i64([2])])],
                    value=numpy_helper.from_array(np.asarray([1.0], np.float32)))
        pad = g.op("Unsqueeze", [g.op("Mul", [g.op("Sub", [g.f(1.0), ones]), g.f(-1e4)]), g.i64([1])])  # (b, 1, t)
        n = g.op("Slice", [shp, g.i64([1]), g.i64([2])])
        tri = g.op("Trilu", [g.op("ConstantOfShape", [g.op("Concat", [n, n], axis=0)],
                                  value=numpy_helper.from_array(np.asarray([np.finfo(np.float32).min], np.float32))), g.init(np.asarray(1, np.int64), "k1")],
                   upper=1)
        q, k, v = (g.op("MatMul", [x, g.w((d, d))]) for _ in range(3))
        sc = g.op("Mul", [g.op("MatMul", [q, g.op("Transpose", [k], perm=[0, 2, 1])]), g.f(d ** -0.5)])
        p_ = g.op("Softmax", [g.op("Add", [g.op("Add", [sc, tri]), pad])], axis=-1)
        g.output(g.op("MatMul", [g.op("MatMul", [p_, v]), g.w((d, 4))]), shape=["batch", "seq", 4])
        return g.make(), lambda n_, sd: [{"x": (np.random.default_rng([sd, i]).normal(0, 1, (1, int(np.random.default_rng([sd, i, 1]).integers(3, 10)), d))
                                               * np.linspace(0.5, 2, d)).astype(np.float32)} for i in range(n_)]
    if kind == "instnorm_reducemean_hw18":  # opset 18: ReduceMean with an axes input (2, 3), Pow 2, Add ε, Sqrt, Div, · γ + β, Conv
        g = G(seed, opset=18)
        x = g.input("x", ["batch", 3, 8, 8])
        z = g.op("Conv", [x, g.w((6, 3, 3, 3)), g.w((6,), 0.3)], pads=[1] * 4)
        ax = g.i64([2, 3])
        mu = g.op("ReduceMean", [z, ax], keepdims=1)
        dz = g.op("Sub", [z, mu])
        var = g.op("ReduceMean", [g.op("Pow", [dz, g.f(2.0)]), ax], keepdims=1)
        nz = g.op("Div", [dz, g.op("Sqrt", [g.op("Add", [var, g.f(1e-5)])])])
        y = g.op("Add", [g.op("Mul", [nz, g.init((g.rng.random((1, 6, 1, 1)) + 0.5).astype(np.float32))]), g.w((1, 6, 1, 1), 0.1)])
        g.output(g.op("Conv", [g.op("Relu", [y]), g.w((2, 6, 3, 3))], pads=[1] * 4))
        return g.make(), _normal({"x": (1, 3, 8, 8)})
    if kind == "matmul_batch_weights":  # a per-head 3-D weight (h, dh, e) read by (b, h, t, dh), a broadcast (1, d, d) weight
        g = G(seed, opset=17)
        x = g.input("x", ["batch", t, d])
        z = g.op("Relu", [g.op("MatMul", [x, g.w((1, d, d))])])  # (b, t, d) · (1, d, d)
        heads = g.op("Transpose", [g.op("Reshape", [z, g.i64([0, t, 2, d // 2])])], perm=[0, 2, 1, 3])  # (b, 2, t, 4)
        ph = g.op("MatMul", [heads, g.w((2, d // 2, d // 2))])  # (b, 2, t, 4) · (2, 4, 4)
        merged = g.op("Reshape", [g.op("Transpose", [ph], perm=[0, 2, 1, 3]), g.i64([0, t, d])])
        g.output(g.op("MatMul", [g.op("Relu", [merged]), g.w((d, 4))]))
        return g.make(), _normal({"x": (1, t, d)})
    if kind == "kv_cache_inputs":  # a decoder step: past_key/past_value inputs (b, 2, past, dh), past symbolic (1–6 in the feeds),
        g = G(seed, opset=17)  # Concat'ed on the length before the new keys/values; present_key an output too
        x = g.input("x", ["batch", 1, d])
        pk = g.input("past_key", ["batch", 2, "past", d // 2])
        pv = g.input("past_value", ["batch", 2, "past", d // 2])

        def heads(w: str) -> str:
            return g.op("Transpose", [g.op("Reshape", [g.op("MatMul", [x, w]), g.i64([0, 1, 2, d // 2])])], perm=[0, 2, 1, 3])

        q = heads(g.w((d, d)))
        k = g.op("Concat", [pk, heads(g.w((d, d)))], axis=2)
        v = g.op("Concat", [pv, heads(g.w((d, d)))], axis=2)
        sc = g.op("Mul", [g.op("MatMul", [q, g.op("Transpose", [k], perm=[0, 1, 3, 2])]), g.f((d // 2) ** -0.5)])
        a = g.op("Reshape", [g.op("Transpose", [g.op("MatMul", [g.op("Softmax", [sc], axis=-1), v])], perm=[0, 2, 1, 3]), g.i64([0, 1, d])])
        g.output(g.op("MatMul", [g.op("Add", [a, x]), g.w((d, 6))]), shape=["batch", 1, 6])
        g.output(k, shape=["batch", 2, None, d // 2])

        def feeds(n_: int, sd: int) -> list[dict[str, np.ndarray]]:
            out = []
            for i in range(n_):
                r = np.random.default_rng([sd, i])
                past = int(r.integers(1, 7))
                out.append({"x": (r.normal(0, 1, (1, 1, d)) * np.linspace(0.5, 2, d)).astype(np.float32),
                            "past_key": r.normal(0, 1, (1, 2, past, d // 2)).astype(np.float32),
                            "past_value": r.normal(0, 1, (1, 2, past, d // 2)).astype(np.float32)})
            return out
        return g.make(), feeds
    raise KeyError(kind)


SPELLINGS20 = ("qdq_partly_quantized", "gemm_trans_alpha_beta", "split18_num_outputs", "constant_of_shape_masks",
               "instnorm_reducemean_hw18", "matmul_batch_weights", "kv_cache_inputs")


def _spelling21(kind: str, seed: int) -> tuple[onnx.ModelProto, Feeds]:
    """fuzz21's hand-built spellings: LayerNormalization with its stash outputs (Mean, InvStdDev) read on and with
    axis ≠ −1; CenterNet's peak picking (Equal(MaxPool(heat), heat)) decoded by TopK and GatherElements; a static
    cache written by ScatterND at positions a graph input gives; a float16 attention whose padding is filled with −inf
    by Where; Gemma's RMSNorm at opset 18 (ReduceMean's axes an input, the weight's offset 1 + γ an Add of the
    initializer); Einsum attention with ArgMax outputs; opset 23's RMSNormalization, RotaryEmbedding and grouped-query
    Attention."""
    d, t = 8, 6
    if kind == "layernorm_stash_axis":  # LayerNormalization axis = 1 over (t, d) of (b, t, d) with Mean/InvStdDev read on;
        g = G(seed, opset=17)           # a second over the last axis with axis = -1 written as 2 of a rank-3 input
        x = g.input("x", ["batch", t, d])
        z = g.op("MatMul", [x, g.w((d, d))])
        y, mean, istd = g.op("LayerNormalization", [z, g.init((g.rng.random((t, d)) + 0.5).astype(np.float32)), g.w((t, d), 0.1)],
                             n_out=3, axis=1, epsilon=1e-5)
        y2 = g.op("LayerNormalization", [g.op("Relu", [g.op("MatMul", [y, g.w((d, d))])]),
                                         g.init((g.rng.random(d) + 0.5).astype(np.float32)), g.w((d,), 0.1)], axis=2)
        # the stash read on: a confidence from the inverse std, the mean as a graph output
        conf = g.op("Mul", [istd, g.op("ReduceMean", [y2], axes=[1, 2], keepdims=1)])
        g.output(g.op("MatMul", [g.op("Add", [y2, conf]), g.w((d, 4))]), shape=["batch", t, 4])
        g.output(mean, shape=["batch", 1, 1])
        return g.make(), _normal({"x": (1, t, d)})
    if kind == "maxpool_nms_topk":  # heat = Sigmoid(Conv); keep = Equal(MaxPool3×3(heat), heat); peaks = heat·Cast(keep);
        g = G(seed, opset=17)      # TopK(8) over the flattened peaks; the boxes' sizes GatherElements'd at the indices
        x = g.input("x", ["batch", 3, 12, 12])
        f = g.op("Relu", [g.op("Conv", [x, g.w((6, 3, 3, 3)), g.w((6,), 0.1)], pads=[1] * 4)])
        heat = g.op("Sigmoid", [g.op("Conv", [f, g.w((2, 6, 3, 3)), g.init(np.full(2, -1.0, np.float32))], pads=[1] * 4)])
        wh = g.op("Conv", [f, g.w((2, 6, 1, 1))])
        pool = g.op("MaxPool", [heat], kernel_shape=[3, 3], pads=[1] * 4, strides=[1, 1])
        peaks = g.op("Mul", [heat, g.op("Cast", [g.op("Equal", [pool, heat])], to=F32)])
        flat = g.op("Reshape", [peaks, g.i64([0, -1])])
        sc, idx = g.op("TopK", [flat, g.i64([8])], n_out=2, axis=-1)
        whf = g.op("Reshape", [wh, g.i64([0, 2, -1])])
        pix = g.op("Mod", [idx, g.i64([144])])
        sizes = g.op("GatherElements", [whf, g.op("Expand", [g.op("Unsqueeze", [pix, g.i64([1])]), g.i64([1, 2, 1])])], axis=2)
        g.output(sc, shape=["batch", 8])
        g.output(idx, elem=TensorProto.INT64, shape=["batch", 8])
        g.output(sizes, shape=["batch", 2, 8])
        return g.make(), _normal({"x": (1, 3, 12, 12)})
    if kind == "scatternd_cache":  # a (b, 8, d) cache initialised by ConstantOfShape, new keys written by ScatterND at
        g = G(seed, opset=17)     # positions the input gives (b = 1), attention over the whole cache (unwritten slots zero)
        x = g.input("x", [1, 2, d])
        pos = g.input("pos", [1, 2], elem=TensorProto.INT64)
        cache = g.input("cache", [1, 8, d])
        k = g.op("MatMul", [x, g.w((d, d))])
        batch_idx = g.op("Unsqueeze", [g.op("Sub", [pos, pos]), g.i64([2])])  # (1, 2, 1) zeros
        kc = g.op("ScatterND", [cache, g.op("Concat", [batch_idx, g.op("Unsqueeze", [pos, g.i64([2])])], axis=2), k])
        q = g.op("MatMul", [x, g.w((d, d))])
        sc = g.op("Mul", [g.op("MatMul", [q, g.op("Transpose", [kc], perm=[0, 2, 1])]), g.f(d ** -0.5)])
        a = g.op("MatMul", [g.op("Softmax", [sc], axis=-1), kc])
        g.output(g.op("MatMul", [g.op("Add", [a, x]), g.w((d, 4))]), shape=[1, 2, 4])
        g.output(kc, shape=[1, 8, d])

        def feeds(n_: int, sd: int) -> list[dict[str, np.ndarray]]:
            out = []
            for i in range(n_):
                r = np.random.default_rng([sd, i])
                p0 = int(r.integers(0, 7))
                c = r.normal(0, 1, (1, 8, d)).astype(np.float32)
                c[:, p0 + 2:] = 0.0  # the slots not yet written
                out.append({"x": (r.normal(0, 1, (1, 2, d)) * np.linspace(0.5, 2, d)).astype(np.float32),
                            "pos": np.asarray([[p0, p0 + 1]], np.int64), "cache": c})
            return out
        return g.make(), feeds
    if kind == "where_neginf_fp16":  # fp16: scores masked by Where(pad, −inf, s) from an int64 mask (Equal 0), Softmax in half
        g = G(seed, opset=17, elem=F16)
        x = g.input("x", ["batch", t, d])
        m = g.input("amask", ["batch", t], elem=TensorProto.INT64)
        pad = g.op("Unsqueeze", [g.op("Equal", [m, g.init(np.asarray(0, np.int64), "zero")]), g.i64([1])])  # (b, 1, t)
        q, k, v = (g.op("MatMul", [x, g.w((d, d))]) for _ in range(3))
        sc = g.op("Mul", [g.op("MatMul", [q, g.op("Transpose", [k], perm=[0, 2, 1])]), g.f(d ** -0.5)])
        p_ = g.op("Softmax", [g.op("Where", [pad, g.init(np.asarray(-np.inf, np.float16), "ninf"), sc])], axis=-1)
        g.output(g.op("MatMul", [g.op("Add", [g.op("MatMul", [p_, v]), x]), g.w((d, 4))]))

        def feeds(n_: int, sd: int) -> list[dict[str, np.ndarray]]:
            out = []
            for i in range(n_):
                r = np.random.default_rng([sd, i])
                out.append({"x": (r.normal(0, 1, (1, t, d)) * np.linspace(0.5, 2, d)).astype(np.float16),
                            "amask": (np.arange(t)[None] < r.integers(2, t + 1)).astype(np.int64)})
            return out
        return g.make(), feeds
    if kind == "rmsnorm_offset18":  # opset 18: ReduceMean(Pow(x, 2), axes input [-1]), Add ε, Sqrt, Div; · Add(1, γ) (Gemma),
        g = G(seed, opset=18)      # between two MatMuls, a SiLU-gated MLP after
        x = g.input("x", ["batch", t, d])
        z = g.op("MatMul", [x, g.w((d, d))])
        var = g.op("ReduceMean", [g.op("Pow", [z, g.f(2.0)]), g.i64([-1])], keepdims=1)
        nz = g.op("Div", [z, g.op("Sqrt", [g.op("Add", [var, g.f(1e-6)])])])
        y = g.op("Mul", [nz, g.op("Add", [g.f(1.0), g.w((d,), 0.2)])])
        gate = g.op("MatMul", [y, g.w((d, 2 * d))])
        up = g.op("MatMul", [y, g.w((d, 2 * d))])
        mlp = g.op("MatMul", [g.op("Mul", [g.op("Mul", [gate, g.op("Sigmoid", [gate])]), up]), g.w((2 * d, d))])
        g.output(g.op("MatMul", [g.op("Add", [mlp, z]), g.w((d, 4))]))
        return g.make(), _normal({"x": (1, t, d)})
    if kind == "einsum_attn_argmax":  # Einsum attention (bhqd,bhkd->bhqk; bhqk,bhkd->bhqd) and ArgMax outputs (keepdims 0 and 1)
        g = G(seed, opset=17)
        x = g.input("x", ["batch", t, d])

        def heads(w: str) -> str:
            return g.op("Transpose", [g.op("Reshape", [g.op("MatMul", [x, w]), g.i64([0, t, 2, d // 2])])], perm=[0, 2, 1, 3])

        q, k, v = heads(g.w((d, d))), heads(g.w((d, d))), heads(g.w((d, d)))
        p_ = g.op("Softmax", [g.op("Mul", [g.op("Einsum", [q, k], equation="bhqd,bhkd->bhqk"), g.f((d // 2) ** -0.5)])], axis=-1)
        a = g.op("Reshape", [g.op("Transpose", [g.op("Einsum", [p_, v], equation="bhqk,bhkd->bhqd")], perm=[0, 2, 1, 3]), g.i64([0, t, d])])
        logits = g.op("MatMul", [g.op("Add", [a, x]), g.w((d, 5))])
        g.output(logits)
        g.output(g.op("ArgMax", [logits], axis=-1, keepdims=0), elem=TensorProto.INT64, shape=["batch", t])
        g.output(g.op("ArgMax", [g.op("ReduceMean", [logits], axes=[1], keepdims=1)], axis=-1, keepdims=1), elem=TensorProto.INT64,
                 shape=["batch", 1, 1])
        return g.make(), _normal({"x": (1, t, d)})
    if kind == "opset23_llm_ops":  # opset 23's LLM ops as model builders write them: RMSNormalization, RotaryEmbedding by
        g = G(seed, opset=23)     # position ids over (b, t, heads·dh) with num_heads, grouped-query Attention (4 query heads,
        d, nh, kvh, dh = 16, 4, 2, 4  # 2 KV heads, is_causal), symbolic batch and length
        x = g.input("x", ["batch", "seq", d])
        pos = g.input("position_ids", ["batch", "seq"], elem=TensorProto.INT64)
        xn = g.op("RMSNormalization", [x, g.init((g.rng.random(d) + 0.5).astype(np.float32))], axis=-1, epsilon=1e-6)
        q, k, v = (g.op("MatMul", [xn, g.w((d, n * dh))]) for n in (nh, kvh, kvh))
        f = np.outer(np.arange(32), 1.0 / (10000 ** (np.arange(0, dh, 2) / dh)))
        cos, sin = g.init(np.cos(f).astype(np.float32), "cos"), g.init(np.sin(f).astype(np.float32), "sin")
        qr, kr = g.op("RotaryEmbedding", [q, cos, sin, pos], num_heads=nh), g.op("RotaryEmbedding", [k, cos, sin, pos], num_heads=kvh)
        a = g.op("Attention", [qr, kr, v], q_num_heads=nh, kv_num_heads=kvh, is_causal=1)
        g.output(g.op("MatMul", [g.op("Add", [x, g.op("MatMul", [a, g.w((nh * dh, d))])]), g.w((d, 6))]), shape=["batch", "seq", 6])

        def feeds(n_: int, sd: int) -> list[dict[str, np.ndarray]]:
            out = []
            for i in range(n_):
                r = np.random.default_rng([sd, i])
                tt = int(r.integers(3, 10))
                out.append({"x": (r.normal(0, 1, (1, tt, d)) * np.linspace(0.5, 2, d)).astype(np.float32),
                            "position_ids": np.arange(tt)[None].astype(np.int64)})
            return out
        return g.make(), feeds
    raise KeyError(kind)


SPELLINGS21 = ("layernorm_stash_axis", "maxpool_nms_topk", "scatternd_cache", "where_neginf_fp16", "rmsnorm_offset18",
               "einsum_attn_argmax", "opset23_llm_ops")


def _body(nodes, inputs, outputs, inits=()):
    return helper.make_graph(nodes, "body", inputs, outputs, initializer=list(inits))


def _vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def _spelling22(kind: str, seed: int) -> tuple[onnx.ModelProto, Feeds]:
    """fuzz22's probes of pesto22's and newmodels32's readings: soft arg-max windows (ordinal_bins) in other spellings
    and near-misses (a classifier's ArgMax read by a Gather of its own scores), Loop decoders (TopK, a scan output, an If
    inside the body, a Scan) and a sliding-window Loop state (calibration/bodies), fp16 underflow into a pole (a log-mel
    Log(x + ε), a Div by a variance) and its near-misses (tiny but only added, straddling zero)."""
    I64 = TensorProto.INT64
    d, t, nb = 8, 6, 24
    if kind == "argmax_conf_classifier":  # near-miss: a classifier's ArgMax picks a label and the winning score (no window)
        g = G(seed)
        x = g.input("x", ["batch", 16])
        logits = g.op("MatMul", [g.op("Relu", [g.op("MatMul", [x, g.w((16, 16))])]), g.w((16, 10))])
        idx = g.op("ArgMax", [logits], axis=-1, keepdims=1)
        g.output(logits, shape=["batch", 10])
        g.output(g.op("GatherElements", [logits, idx], axis=1), shape=["batch", 1])
        g.output(g.op("Gather", [g.init(np.arange(10, dtype=np.float32) * 3.0, "labels"), idx]), shape=["batch", 1])
        return g.make(), _normal({"x": (1, 16)})
    if kind in ("soft_argmax_reducesum", "soft_argmax_softmax_weights"):
        # scores (b, t, nb) = Sigmoid(MatMul); ArgMax → Add [-2..2] → Clip → GatherElements of the scores (weights) and of
        # a cents table (values); pitch = ReduceSum(w·v)/ReduceSum(w). The second spelling takes the ArgMax of the logits
        # and the weights from their Softmax (monotone: the same arg-max)
        g = G(seed)
        x = g.input("x", ["batch", t, d])
        z = g.op("MatMul", [g.op("Tanh", [g.op("MatMul", [x, g.w((d, 16))])]), g.w((16, nb), 0.8)])
        scores = g.op("Sigmoid", [z]) if kind == "soft_argmax_reducesum" else g.op("Softmax", [z], axis=-1)
        am = g.op("ArgMax", [scores if kind == "soft_argmax_reducesum" else z], axis=-1, keepdims=1)
        win = g.op("Clip", [g.op("Add", [am, g.i64([-2, -1, 0, 1, 2])]), g.init(np.asarray(0, np.int64)), g.init(np.asarray(nb - 1, np.int64))])
        w = g.op("GatherElements", [scores, win], axis=2)
        cents = g.op("Expand", [g.init((np.arange(nb, dtype=np.float32) * 20.0 + 1000.0).reshape(1, 1, nb), "cents"),
                                g.op("Shape", [scores])])
        v = g.op("GatherElements", [cents, win], axis=2)
        pitch = g.op("Div", [g.op("ReduceSum", [g.op("Mul", [w, v]), g.i64([-1])], keepdims=0),
                             g.op("ReduceSum", [w, g.i64([-1])], keepdims=0)])
        g.output(scores, shape=["batch", t, nb])
        g.output(pitch, shape=["batch", t])
        return g.make(), _normal({"x": (1, t, d)})
    if kind == "soft_argmax_bump_softmax":  # a unimodal posterior over nb ordered bins (a pitch tracker's): logits
        g = G(seed)                          # −(bin − c)²/2σ² (σ = 1.5 bins, c from the input) plus a learned ripple;
        x = g.input("x", ["batch", t, d])    # ArgMax of the logits, the window's weights from their Softmax
        c = g.op("Mul", [g.op("Sigmoid", [g.op("MatMul", [x, g.w((d, 1))])]), g.f(nb - 1.0)])
        diff = g.op("Sub", [g.init(np.arange(nb, dtype=np.float32), "bins"), c])
        ripple = g.op("MatMul", [g.op("Tanh", [g.op("MatMul", [x, g.w((d, 16))])]), g.w((16, nb), 0.05)])
        z = g.op("Add", [g.op("Mul", [g.op("Mul", [diff, diff]), g.f(-0.5 / 1.5 ** 2)]), ripple])
        scores = g.op("Softmax", [z], axis=-1)
        win = g.op("Clip", [g.op("Add", [g.op("ArgMax", [z], axis=-1, keepdims=1), g.i64([-1, 0, 1])]),
                            g.init(np.asarray(0, np.int64)), g.init(np.asarray(nb - 1, np.int64))])
        w = g.op("GatherElements", [scores, win], axis=2)
        pitch = g.op("Div", [g.op("ReduceSum", [g.op("Mul", [w, g.op("Cast", [win], to=F32)]), g.i64([-1])], keepdims=0),
                             g.op("ReduceSum", [w, g.i64([-1])], keepdims=0)])
        g.output(scores, shape=["batch", t, nb])
        g.output(pitch, shape=["batch", t])
        return g.make(), _normal({"x": (1, t, d)})
    if kind == "crepe_slice_dynamic":  # one frame (1, nb): c = ArgMax; Slice(s, max(c − 4, 0), min(c + 5, nb)) of the
        g = G(seed)                    # salience and of the cents; the local average
        x = g.input("x", [1, d])
        s = g.op("Sigmoid", [g.op("MatMul", [g.op("Tanh", [g.op("MatMul", [x, g.w((d, 16))])]), g.w((16, nb), 0.8)])])
        c = g.op("Reshape", [g.op("ArgMax", [s], axis=-1, keepdims=1), g.i64([1])])
        start = g.op("Max", [g.op("Sub", [c, g.i64([4])]), g.i64([0])])
        end = g.op("Min", [g.op("Add", [c, g.i64([5])]), g.i64([nb])])
        ws = g.op("Slice", [s, start, end, g.i64([1])])
        vs = g.op("Slice", [g.init((np.arange(nb, dtype=np.float32) * 20.0).reshape(1, nb), "cents"), start, end, g.i64([1])])
        pitch = g.op("Div", [g.op("ReduceSum", [g.op("Mul", [ws, vs]), g.i64([1])], keepdims=0), g.op("ReduceSum", [ws, g.i64([1])], keepdims=0)])
        g.output(s, shape=[1, nb])
        g.output(pitch, shape=[1])
        return g.make(), _normal({"x": (1, d)})
    if kind in ("loop_topk_decoder", "loop_scanout_decoder", "loop_if_decoder", "loop_sliding_window"):
        # a greedy decoder as a Loop of 6 steps over a GRU-like state h (1, d): logits = h·W; the token by TopK(1) (or
        # ArgMax inside an If's branches) appended to a carried (1, n) sequence by Concat, or emitted as the Loop's scan
        # output; the sliding window carries the last 3 states (1, 3, d) as Concat(Slice(buf, 1:), h)
        g = G(seed, opset=17)
        x = g.input("x", [1, d])
        h0 = g.op("Tanh", [g.op("MatMul", [x, g.w((d, d))])])
        E, W, U, V = g.w((10, d)), g.w((d, d)), g.w((d, d)), g.w((d, 10), 1.0)
        body_nodes, p = [], f"{kind}_b"
        mk = lambda op, ins, outs, **a: body_nodes.append(helper.make_node(op, ins, outs, name=f"{p}_{outs[0]}", **a)) or outs[0]
        emb = mk("Gather", [E, f"{p}_tok"], [f"{p}_emb"], axis=0)  # (1, d)
        hn = mk("Tanh", [mk("Add", [mk("MatMul", [f"{p}_h", W], [f"{p}_hw"]), mk("MatMul", [emb, U], [f"{p}_eu"])], [f"{p}_pre"])], [f"{p}_hn"])
        logits = mk("MatMul", [hn, V], [f"{p}_logits"])
        if kind == "loop_if_decoder":  # the token chosen inside an If on the step (the first step masks token 0)
            first = mk("Equal", [f"{p}_i", g.init(np.asarray(0, np.int64), "zero")], [f"{p}_first"])
            mask = g.init(np.asarray([[-1e4] + [0.0] * 9], np.float32), "mask")
            then_g = _body([helper.make_node("Add", [logits, mask], [f"{p}_lm"]),
                            helper.make_node("ArgMax", [f"{p}_lm"], [f"{p}_ta"], axis=-1, keepdims=1)], [], [_vi(f"{p}_ta", I64, [1, 1])])
            else_g = _body([helper.make_node("ArgMax", [logits], [f"{p}_ea"], axis=-1, keepdims=1)], [], [_vi(f"{p}_ea", I64, [1, 1])])
            tok = mk("If", [first], [f"{p}_tk"], then_branch=then_g, else_branch=else_g)
        else:
            _, tok = body_nodes.append(helper.make_node("TopK", [logits, g.i64([1])], [f"{p}_tv", f"{p}_tk"], name=f"{p}_topk", axis=-1)), f"{p}_tk"
        tok1 = mk("Reshape", [tok, g.i64([1])], [f"{p}_tok1"])
        ins = [_vi(f"{p}_i", I64, []), _vi(f"{p}_c", TensorProto.BOOL, []), _vi(f"{p}_h", F32, [1, d]), _vi(f"{p}_tok", I64, [1])]
        outs = [_vi(f"{p}_co", TensorProto.BOOL, []), _vi(hn, F32, [1, d]), _vi(tok1, I64, [1])]
        mk("Identity", [f"{p}_c"], [f"{p}_co"])
        loop_in = ["", "", h0, g.init(np.asarray([1], np.int64), "start")]
        n_states = 2
        if kind in ("loop_topk_decoder", "loop_if_decoder"):
            seq = mk("Concat", [f"{p}_seq", tok], [f"{p}_seqn"], axis=1)
            ins.append(_vi(f"{p}_seq", I64, [1, "n"]))
            outs.append(_vi(seq, I64, [1, "m"]))
            loop_in.append(g.init(np.asarray([[1]], np.int64), "seq0"))
            n_states = 3
        elif kind == "loop_scanout_decoder":
            outs.append(_vi(mk("Identity", [tok1], [f"{p}_emit"]), I64, [1]))
        else:  # sliding window of the last three states, read by a pooled output each step
            buf = mk("Concat", [mk("Slice", [f"{p}_buf", g.i64([1]), g.i64([3]), g.i64([1])], [f"{p}_tail"]),
                                mk("Unsqueeze", [hn, g.i64([1])], [f"{p}_hu"])], [f"{p}_bufn"], axis=1)
            ins.append(_vi(f"{p}_buf", F32, [1, 3, d]))
            outs.insert(3, _vi(buf, F32, [1, 3, d]))
            loop_in.append(g.init(np.zeros((1, 3, d), np.float32), "buf0"))
            outs.append(_vi(mk("MatMul", [mk("ReduceMean", [buf], [f"{p}_pool"], axes=[1], keepdims=0), g.w((d, 4))], [f"{p}_y"]), F32, [1, 4]))
            n_states = 3
        body = _body(body_nodes, ins, outs)
        loop_in[0] = g.init(np.asarray(6, np.int64), "trip")
        loop_in[1] = g.init(np.asarray(True), "cond")
        n_scan = len(outs) - 1 - n_states
        louts = [g.name("state") for _ in range(n_states)] + [g.name("scan") for _ in range(n_scan)]
        g.nodes.append(helper.make_node("Loop", loop_in, louts, name="decoder_loop", body=body))
        g.output(louts[0], shape=[1, d])
        if kind in ("loop_topk_decoder", "loop_if_decoder"):
            g.output(g.op("Slice", [louts[2], g.i64([1]), g.i64([100]), g.i64([1])]), elem=I64, shape=[1, None])
        elif kind == "loop_scanout_decoder":
            g.output(g.op("Squeeze", [louts[2], g.i64([1])]), elem=I64, shape=[6])
        else:
            g.output(louts[3], shape=[6, 1, 4])
        return g.make(), _normal({"x": (1, d)})
    if kind == "scan_decoder":  # a Scan over (t, 1, d) frames: h' = tanh(h·W + x_t·U); ArgMax(h'·V) as the scan output
        g = G(seed, opset=17)
        x = g.input("x", [t, 1, d])
        W, U, V = g.w((d, d)), g.w((d, d)), g.w((d, 10), 1.0)
        p = "scan_b"
        nodes = [helper.make_node("MatMul", [f"{p}_h", W], [f"{p}_hw"]), helper.make_node("MatMul", [f"{p}_x", U], [f"{p}_xu"]),
                 helper.make_node("Add", [f"{p}_hw", f"{p}_xu"], [f"{p}_pre"]), helper.make_node("Tanh", [f"{p}_pre"], [f"{p}_hn"]),
                 helper.make_node("MatMul", [f"{p}_hn", V], [f"{p}_lg"]),
                 helper.make_node("ArgMax", [f"{p}_lg"], [f"{p}_tok"], axis=-1, keepdims=0)]
        body = _body(nodes, [_vi(f"{p}_h", F32, [1, d]), _vi(f"{p}_x", F32, [1, d])],
                     [_vi(f"{p}_hn", F32, [1, d]), _vi(f"{p}_tok", I64, [1]), _vi(f"{p}_lg", F32, [1, 10])])
        hT, toks, lg = g.name("hT"), g.name("toks"), g.name("lgs")
        g.nodes.append(helper.make_node("Scan", [g.init(np.zeros((1, d), np.float32), "h0"), x], [hT, toks, lg], name="scan_decoder",
                                        body=body, num_scan_inputs=1))
        g.output(hT, shape=[1, d])
        g.output(toks, elem=I64, shape=[t, 1])
        g.output(lg, shape=[t, 1, 10])
        return g.make(), _normal({"x": (t, 1, d)})
    if kind in ("logmel_eps", "div_by_variance", "fp16_tiny_added", "fp16_straddle_div"):
        # audio-like frames (b, 32) whose loudness spans 1e-5..1 (near-silence included)
        g = G(seed)
        x = g.input("x", ["batch", 32])
        if kind == "logmel_eps":  # power = (x·F)²; mel = power·M (M ≥ 0); log-mel = Log(mel + 1e-10); a small head
            spec = g.op("MatMul", [x, g.w((32, 32))])
            mel = g.op("MatMul", [g.op("Mul", [spec, spec]), g.init(np.abs(g.rng.normal(0, 0.3, (32, 12))).astype(np.float32))])
            lm = g.op("Log", [g.op("Add", [mel, g.f(1e-10)])])
            g.output(g.op("MatMul", [lm, g.w((12, 4))]), shape=["batch", 4])
        elif kind == "div_by_variance":  # z = (x − μ)/(σ² + 1e-12) · σ_ref: a per-frame variance divisor (silent frames ~1e-10)
            mu = g.op("ReduceMean", [x], axes=[-1], keepdims=1)
            c = g.op("Sub", [x, mu])
            var = g.op("Add", [g.op("ReduceMean", [g.op("Mul", [c, c])], axes=[-1], keepdims=1), g.f(1e-12)])
            z = g.op("Mul", [g.op("Div", [c, var]), g.op("ReduceMean", [g.op("Abs", [c])], axes=[-1], keepdims=1)])
            g.output(g.op("MatMul", [g.op("Tanh", [z]), g.w((32, 4))]), shape=["batch", 4])
        elif kind == "fp16_tiny_added":  # a tiny positive tensor (Sigmoid·1e-7) only added to a loud one: no pole
            tiny = g.op("Mul", [g.op("Sigmoid", [g.op("MatMul", [x, g.w((32, 8))])]), g.f(1e-7)])
            g.output(g.op("MatMul", [g.op("Add", [g.op("MatMul", [x, g.w((32, 8))]), tiny]), g.w((8, 4))]), shape=["batch", 4])
        else:  # a divisor that straddles zero (float meets the pole too) and a tiny one that a Sub offsets first
            b = g.op("MatMul", [x, g.w((32, 8))])
            q = g.op("Div", [g.op("MatMul", [x, g.w((32, 8))]), g.op("Add", [g.op("Abs", [b]), g.f(1.0)])])
            tiny = g.op("Mul", [g.op("Sigmoid", [b]), g.f(1e-7)])
            r = g.op("Div", [q, g.op("Add", [tiny, g.f(0.5)])])
            g.output(g.op("MatMul", [g.op("Add", [q, r]), g.w((8, 4))]), shape=["batch", 4])

        def feeds(n_: int, sd: int) -> list[dict[str, np.ndarray]]:
            out = []
            for i in range(n_):
                r = np.random.default_rng([sd, i])
                out.append({"x": (r.normal(0, 1, (1, 32)) * 10.0 ** r.uniform(-5, 0)).astype(np.float32)})
            return out
        return g.make(), feeds
    raise KeyError(kind)


SPELLINGS22 = ("argmax_conf_classifier", "soft_argmax_reducesum", "soft_argmax_softmax_weights", "crepe_slice_dynamic",
               "soft_argmax_bump_softmax",
               "loop_topk_decoder", "loop_scanout_decoder", "loop_if_decoder", "loop_sliding_window", "scan_decoder",
               "logmel_eps", "div_by_variance", "fp16_tiny_added", "fp16_straddle_div")


CASES: dict[str, Callable[[int], tuple[onnx.ModelProto, Feeds]]] = {
    "gru_op_bi_seqlens": lambda s: _rnn_op("GRU", "bidirectional", "input", True, s),
    "gru_op_seqlens_const": lambda s: _rnn_op("GRU", "forward", "const", True, s),
    "gru_op_reverse": lambda s: _rnn_op("GRU", "reverse", "none", False, s),
    "lstm_op_bi_seqlens": lambda s: _rnn_op("LSTM", "bidirectional", "input", True, s),
    "lstm_op_seqlens_const": lambda s: _rnn_op("LSTM", "forward", "const", True, s),
    "rnn_op_bi_seqlens": lambda s: _rnn_op("RNN", "bidirectional", "input", True, s),
    "gru_cell_scan": _gru_cell_scan,
    "lstm_cell_loop": _lstm_cell_loop,
    "lstm_in_if_branches": lambda s: _recurrent_in_body("if", s),
    "gru_in_loop_body": lambda s: _recurrent_in_body("loop", s),
    **{k: (lambda s, k=k: _conv_case(k, s)) for k in ("conv1d", "conv3d", "convtranspose_outpad_groups", "conv_dilated",
                                                       "conv_depthwise", "conv_asym_pads", "conv_autopad")},
    **{k: (lambda s, k=k: _seq_with(k, s)) for k in ("rmsnorm_mulself", "rmsnorm_sumsquare", "l2norm", "layernorm_pow_recip",
                                                      "hardsigmoid_op", "hardswish_op", "hardsigmoid_out", "mish_softplus",
                                                      "gelu_tanh_pow", "gelu_erf_div", "elu_selu", "clip_min_only",
                                                      "leaky_thresholded")},
    **{k: (lambda s, k=k: _img_with(k, s)) for k in ("groupnorm_instnorm", "prelu_channel", "hardswish_img_op", "instnorm_affine")},
    **{k: (lambda s, k=k: _corner(k, s)) for k in ("fp16_fp32_island", "uint8_image_input", "int8_input", "bool_and_rank0_outputs",
                                                    "rank5", "empty_dim", "batch3_dynamic", "shape_gather_reshape_weight",
                                                    "shared_weight_add", "weight_through_ops", "const_folded_left",
                                                    "outputs_shared_and_fed", "output_is_input_or_init", "weight_is_output",
                                                    "scalar_and_bool_inputs", "constant_node_output")},
    **{k: (lambda s, k=k: _spelling18(k, s)) for k in SPELLINGS18},
    **{k: (lambda s, k=k: _spelling20(k, s)) for k in SPELLINGS20},
    **{k: (lambda s, k=k: _spelling21(k, s)) for k in SPELLINGS21},
    **{k: (lambda s, k=k: _spelling22(k, s)) for k in SPELLINGS22},
}


def _quantize_forked(src: Path, preset: str, calib: list[dict], held: list[dict], out: Path, timeout: float) -> dict:
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=export_fuzz._child, args=((src, preset, calib, held, out), q))
    p.start()
    try:
        row = q.get(timeout=timeout)
    except Exception:  # noqa: BLE001 - no answer: the child died or ran out of time
        row = {"preset": preset, "status": "timeout/crash", "error": f"exit code {p.exitcode}" if p.exitcode is not None else f"over {timeout:g} s"}
    p.join(5)
    if p.is_alive():
        p.kill()
    return row


def _floor_cosine(preset: str) -> float:
    from onnxptq.analysis.floor import floor_for
    from onnxptq.config.presets import resolve_config

    return floor_for(resolve_config(preset)).cosine


def markdown(paths: list[str]) -> str:
    """One table row per campaign file: statuses, floor verdicts, and the rows whose floor held with a float
    output's cosine on the fresh feeds (pooled) below the preset family's floor cosine (a SILENT candidate)."""
    lines = ["| campaign | cases | quantizations | ok | floor held / broken (ok rows) | documented error | raw exception "
             "| does not load/run | NaN | timeout/crash | held, fresh cosine below the family's floor |", "| --- |" + " --- |" * 10]
    for path in paths:
        rows = [r for r in json.loads(Path(path).read_text()) if r.get("preset") != "-"]
        st = collections.Counter(r["status"] for r in rows)
        ok = [r for r in rows if r["status"] == "ok"]
        held = sum(r.get("floor") == "held" for r in ok)
        quiet = [f"{r['case']} {r['preset']} {r['cosine']}" for r in ok
                 if r.get("floor") == "held" and r.get("cosine", 1) < _floor_cosine(r["preset"])]
        lines.append(f"| {Path(path).stem} | {len({r['case'] for r in rows})} | {len(rows)} | {st['ok']} | {held} / {len(ok) - held} "
                     f"| {st['documented error']} | {st['raw exception']} | {st['does not load'] + st['does not run'] + st['wrong output']} "
                     f"| {st['NaN where float has none']} | {st['timeout/crash']} | {len(quiet)}{': ' + '; '.join(quiet) if quiet else ''} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markdown", nargs="+", help="print the table of these campaign files and exit")
    ap.add_argument("--cases", default=None, help="comma-separated case names (default: all)")
    ap.add_argument("--presets", default=",".join(export_fuzz.PRESETS))
    ap.add_argument("--seed", type=int, default=20)
    ap.add_argument("--samples", type=int, default=24, help="calibration samples handed to quantize (the floor holds out a third)")
    ap.add_argument("--timeout", type=float, default=240.0)
    ap.add_argument("--out-dir")
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.markdown:
        print(markdown(a.markdown))
        return
    if not a.out_dir or not a.json:
        ap.error("--out-dir and --json are needed for a campaign")
    names = list(CASES) if a.cases is None else a.cases.split(",")
    out_dir = Path(a.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    t0 = time.time()
    for i, name in enumerate(names):
        model, feeds = CASES[name](a.seed * 1000 + i)
        src = out_dir / f"{name}.onnx"
        if name in EXTERNAL_CASES:
            onnx.save(model, src, save_as_external_data=True, all_tensors_to_one_file=True, location=f"{name}.onnx.data",
                      size_threshold=0)
        else:
            onnx.save(model, src)
        calib, held = feeds(a.samples, a.seed), feeds(16, a.seed + 7919)
        try:
            export_fuzz._session(src).run(None, calib[0])
        except Exception as exc:  # noqa: BLE001 - the generator's own fault, recorded
            rows.append({"case": name, "preset": "-", "status": "float does not run", "error": str(exc).splitlines()[0][:300]})
            continue
        for preset in a.presets.split(","):
            row = _quantize_forked(src, preset, calib, held, out_dir / f"{name}.{preset}.onnx", a.timeout)
            row["case"] = name
            rows.append(row)
            print(f"{time.time() - t0:7.1f}s {name:32s} {preset:11s} {row['status']:18s} {row.get('floor', '')[:40]:40s} "
                  f"cos {row.get('cosine', '-')} {row.get('error', '')[:150]}", flush=True)
        Path(a.json).write_text(json.dumps(rows, indent=1))
    counts = collections.Counter(r["status"] for r in rows)
    print(dict(counts))


if __name__ == "__main__":
    main()
