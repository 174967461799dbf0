"""Which of onnxruntime's CPU integer kernels saturate on this machine: one small hand-built model per kernel.

Why: on x86 without VNNI, MLAS's U8S8 GEMM adds pairs of uint8 × int8 products in int16 (``vpmaddubsw``)
and saturates past 32767 (bench/RESULTS.md, "The U8S8 saturation guard"). The guard
(``pipeline/runtime.integer_gemm_saturates`` and ``graph/passes/unsigned_gemm_weights.py``) was checked on
one MatMulInteger and QLinearConv; this script lists every integer kernel the CPU provider may pick for
our integer outputs (the QDQ patterns onnxruntime fuses, and the integer ops a model may already hold)
and runs each on the values that make a pair sum overflow int16: activations at the top of their range
(uint8 255 / int8 127) times weights at the top of theirs (int8 127 / uint8 255), so a pair of products is
64770 (U8S8), 65025 (U8U8) or 32258 (S8S8; but onnxruntime's QDQ path shifts int8 activations to uint8 first,
making it U8S8). The reference is exact: integer sums in int64
(NumPy), requantized in float64 with round-half-even as the ONNX spec says. A row's "rel. error" is
max |got - exact| / max |exact| on the dequantized outputs (QLinear ops: codes compared, one code of
rounding allowed); "kernel" is what onnxruntime's optimised graph ran (its op types, Q/DQ left out).

    PYTHONPATH=src:. OMP_NUM_THREADS=1 python bench/avx2_kernels.py [--markdown]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402

from onnxptq.graph.passes.unsigned_gemm_weights import unsigned_gemm_weights  # noqa: E402
from onnxptq.pipeline.runtime import integer_gemm_saturates  # noqa: E402

MS = "com.microsoft"
NP_OF = {TensorProto.UINT8: np.uint8, TensorProto.INT8: np.int8}
# activation codes at the top of their type: int8 at +127, because onnxruntime's x86 QDQ path turns int8
# activations into uint8 (code + 128; inferred from the results) before a U8S8 kernel: +127 becomes 255 there
HIGH = {TensorProto.UINT8: 255, TensorProto.INT8: 127}
WHIGH = {TensorProto.UINT8: 255, TensorProto.INT8: 127}


@dataclass
class Probe:
    """One kernel: a model, its feed, the exact output and how to compare."""

    name: str
    model: onnx.ModelProto
    feed: dict[str, np.ndarray]
    exact: np.ndarray
    integer_codes: bool = False  # the output is QLinear codes: one code of rounding allowed
    note: str = ""


def _model(nodes, inputs, outputs, inits, opset: int = 21, ms: bool = False) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "probe", inputs, outputs, inits)
    imports = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(MS, 1)] if ms else [])
    return helper.make_model(graph, opset_imports=imports)


def _scalar(name: str, value, dtype) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(value, dtype), name)


def _conv_int(x: np.ndarray, w: np.ndarray, group: int, pad: int) -> np.ndarray:
    """Exact integer NCHW convolution (stride 1), int64 sums."""
    x = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    oh, ow = h - kh + 1, wd - kw + 1
    out = np.zeros((n, m, oh, ow), np.int64)
    per = m // group
    for g in range(group):
        xs = x[:, g * cg:(g + 1) * cg]
        for o in range(g * per, (g + 1) * per):
            for i in range(kh):
                for j in range(kw):
                    out[:, o] += np.einsum("nchw,c->nhw", xs[:, :, i:i + oh, j:j + ow], w[o, :, i, j].astype(np.int64))
    return out


def _requant(acc: np.ndarray, scale: float, y_type: int) -> np.ndarray:
    lo, hi = (0, 255) if y_type == TensorProto.UINT8 else (-128, 127)
    return np.clip(np.rint(acc * scale), lo, hi).astype(np.int64)


# --- integer ops a model may hold -------------------------------------------------------------------


def matmul_integer(a_type: int, b_type: int, k: int = 64) -> Probe:
    a = np.full((2, k), HIGH[a_type], NP_OF[a_type])
    b = np.full((k, 4), WHIGH[b_type], NP_OF[b_type])
    node = helper.make_node("MatMulInteger", ["a", "b"], ["y"])
    m = _model([node], [helper.make_tensor_value_info("a", a_type, [2, k])],
               [helper.make_tensor_value_info("y", TensorProto.INT32, [2, 4])], [numpy_helper.from_array(b, "b")], opset=13)
    name = f"MatMulInteger {_t(a_type)}×{_t(b_type)} (K={k})"
    return Probe(name, m, {"a": a}, a.astype(np.int64) @ b.astype(np.int64))


def conv_integer(w_type: int, group: int = 1, c: int = 16) -> Probe:
    x = np.full((1, c, 6, 6), 255, np.uint8)
    w = np.full((c, c // group, 3, 3), WHIGH[w_type], NP_OF[w_type])
    node = helper.make_node("ConvInteger", ["x", "w"], ["y"], group=group, pads=[1, 1, 1, 1])
    m = _model([node], [helper.make_tensor_value_info("x", TensorProto.UINT8, list(x.shape))],
               [helper.make_tensor_value_info("y", TensorProto.INT32, None)], [numpy_helper.from_array(w, "w")], opset=13)
    kind = "depthwise" if group == c else "dense"
    return Probe(f"ConvInteger u8×{_t(w_type)} {kind} 3×3", m, {"x": x}, _conv_int(x, w, group, 1))


def qlinear_matmul(a_type: int, b_type: int, k: int = 64) -> Probe:
    a = np.full((2, k), HIGH[a_type], NP_OF[a_type])
    b = np.full((k, 4), WHIGH[b_type], NP_OF[b_type])
    exact = a.astype(np.int64) @ b.astype(np.int64)
    ys = float(np.abs(exact).max()) / 100.0  # the exact sum lands on code ±100
    inits = [numpy_helper.from_array(b, "b"), _scalar("as", 1.0, np.float32), _scalar("az", 0, NP_OF[a_type]),
             _scalar("bs", 1.0, np.float32), _scalar("bz", 0, NP_OF[b_type]), _scalar("ys", ys, np.float32),
             _scalar("yz", 0, NP_OF[a_type])]
    node = helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])
    m = _model([node], [helper.make_tensor_value_info("a", a_type, [2, k])],
               [helper.make_tensor_value_info("y", a_type, [2, 4])], inits, opset=13)
    return Probe(f"QLinearMatMul {_t(a_type)}×{_t(b_type)} (K={k})", m, {"a": a}, _requant(exact, 1 / ys, a_type), True)


def qlinear_conv(x_type: int, w_type: int, group: int = 1, c: int = 16, k: int = 3, mult: int = 1,
                 per_channel: bool = False, rank: int = 2, stride: int = 1, dilation: int = 1) -> Probe:
    x = np.full((1, c) + (8,) * rank, HIGH[x_type], NP_OF[x_type])
    wval = WHIGH[w_type]
    w = np.full((c * mult if group > 1 else c, c // group) + (k,) * rank, wval, NP_OF[w_type])
    # constant input: every interior output sums the whole kernel; the padded border is not compared
    full = int(x.astype(np.int64).ravel()[0]) * int(w.astype(np.int64).ravel()[0]) * (c // group) * k ** rank
    n_out = w.shape[0]
    ys = abs(full) / 100.0
    wscale = np.ones(w.shape[0], np.float32) if per_channel else np.array(1.0, np.float32)
    wzero = np.zeros(w.shape[0], NP_OF[w_type]) if per_channel else np.array(0, NP_OF[w_type])
    inits = [numpy_helper.from_array(w, "w"), _scalar("xs", 1.0, np.float32), _scalar("xz", 0, NP_OF[x_type]),
             numpy_helper.from_array(wscale, "ws"), numpy_helper.from_array(wzero, "wz"), _scalar("ys", ys, np.float32),
             _scalar("yz", 0, NP_OF[x_type])]
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"], group=group,
                            pads=[0] * (2 * rank), strides=[stride] * rank, dilations=[dilation] * rank)
    m = _model([node], [helper.make_tensor_value_info("x", x_type, list(x.shape))],
               [helper.make_tensor_value_info("y", x_type, None)], inits, opset=13)
    kind = ("depthwise" if mult == 1 else f"depthwise ×{mult}") if group == c else ("dense" if group == 1 else f"grouped {group}")
    pc = ", per channel" if per_channel else ""
    extra = (f", {rank}-D" if rank != 2 else "") + (f", stride {stride}" if stride > 1 else "") + (f", dilation {dilation}" if dilation > 1 else "")
    # no padding: every output sums the whole kernel, the same value everywhere
    span = dilation * (k - 1) + 1
    shape = (1, n_out) + tuple((8 - span) // stride + 1 for _ in range(rank))
    exact = np.full(shape, full, np.int64)
    return Probe(f"QLinearConv {_t(x_type)}×{_t(w_type)} {kind} {'×'.join([str(k)] * rank)} C={c}{pc}{extra}", m, {"x": x},
                 _requant(exact, 1 / ys, x_type), True)


def matmul_integer_to_float(k: int = 64) -> Probe:
    a = np.full((2, k), 255, np.uint8)
    b = np.full((k, 4), 127, np.int8)
    inits = [numpy_helper.from_array(b, "b"), _scalar("as", 1.0, np.float32), _scalar("bs", 1.0, np.float32),
             _scalar("az", 0, np.uint8), _scalar("bz", 0, np.int8)]
    node = helper.make_node("MatMulIntegerToFloat", ["a", "b", "as", "bs", "az", "bz"], ["y"], domain=MS)
    m = _model([node], [helper.make_tensor_value_info("a", TensorProto.UINT8, [2, k])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], inits, opset=13, ms=True)
    return Probe(f"MatMulIntegerToFloat (ms) u8×s8 (K={k})", m, {"a": a}, (a.astype(np.int64) @ b.astype(np.int64)).astype(np.float64))


def dynamic_quantize_matmul(b_type: int, k: int = 64) -> Probe:
    a = np.full((2, k), 1.0, np.float32)  # DynamicQuantizeLinear: range [0, 1] -> codes 255, zero point 0
    b = np.full((k, 4), WHIGH[b_type], NP_OF[b_type])
    inits = [numpy_helper.from_array(b, "b"), _scalar("bs", 1.0, np.float32), _scalar("bz", 0, NP_OF[b_type])]
    node = helper.make_node("DynamicQuantizeMatMul", ["a", "b", "bs", "bz"], ["y"], domain=MS)
    m = _model([node], [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, k])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], inits, opset=13, ms=True)
    exact = (np.full((2, k), 255, np.int64) @ b.astype(np.int64)) / 255.0
    return Probe(f"DynamicQuantizeMatMul (ms) float×{_t(b_type)} (K={k})", m, {"a": a}, exact)


def dynamic_quantize_linear_matmul_integer(k: int = 64) -> Probe:
    """The ONNX-standard dynamic pattern: DynamicQuantizeLinear -> MatMulInteger -> Cast/Mul."""
    a = np.full((2, k), 1.0, np.float32)
    b = np.full((k, 4), 127, np.int8)
    nodes = [helper.make_node("DynamicQuantizeLinear", ["a"], ["aq", "as", "az"]),
             helper.make_node("MatMulInteger", ["aq", "b", "az", "bz"], ["acc"]),
             helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["accf", "as"], ["y"])]
    inits = [numpy_helper.from_array(b, "b"), _scalar("bz", 0, np.int8)]
    m = _model(nodes, [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, k])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], inits, opset=13)
    exact = (np.full((2, k), 255, np.int64) @ b.astype(np.int64)) / 255.0
    return Probe(f"DynamicQuantizeLinear→MatMulInteger u8×s8 (K={k})", m, {"a": a}, exact)


def qgemm(b_type: int, k: int = 64, float_out: bool = True) -> Probe:
    a = np.full((2, k), 255, np.uint8)
    b = np.full((k, 4), WHIGH[b_type], NP_OF[b_type])
    exact = (a.astype(np.int64) @ b.astype(np.int64)).astype(np.float64)
    inputs = ["a", "as", "az", "b", "bs", "bz", "", ""] if float_out else ["a", "as", "az", "b", "bs", "bz", "", "ys", "yz"]
    inits = [numpy_helper.from_array(b, "b"), _scalar("as", 1.0, np.float32), _scalar("az", 0, np.uint8),
             _scalar("bs", 1.0, np.float32), _scalar("bz", 0, NP_OF[b_type])]
    out_type = TensorProto.FLOAT
    integer = False
    if not float_out:
        ys = float(exact.max()) / 100.0
        inits += [_scalar("ys", ys, np.float32), _scalar("yz", 0, np.uint8)]
        out_type, integer, exact = TensorProto.UINT8, True, _requant(exact, 1 / ys, TensorProto.UINT8)
    node = helper.make_node("QGemm", inputs, ["y"], domain=MS)
    m = _model([node], [helper.make_tensor_value_info("a", TensorProto.UINT8, [2, k])],
               [helper.make_tensor_value_info("y", out_type, [2, 4])], inits, opset=13, ms=True)
    return Probe(f"QGemm (ms) u8×{_t(b_type)} → {'float' if float_out else 'u8'} (K={k})", m, {"a": a}, exact, integer)


def qattention(hidden: int = 32, seq: int = 4) -> Probe:
    """QAttention with one head and a constant input: every position's output is the V row, so a saturated
    V projection shows directly. Weight values 127 over K=hidden uint8 255 inputs."""
    x = np.full((1, seq, hidden), 255, np.uint8)
    w = np.full((hidden, 3 * hidden), 127, np.int8)
    bias = np.zeros(3 * hidden, np.float32)
    scale = 1.0 / (255 * 127 * hidden)  # the exact projection is 1.0
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(bias, "bias"), _scalar("xs", 1.0, np.float32),
             _scalar("ws", scale, np.float32), _scalar("xz", 0, np.uint8), _scalar("wz", 0, np.int8)]
    node = helper.make_node("QAttention", ["x", "w", "bias", "xs", "ws", "", "xz", "wz"], ["y"], domain=MS, num_heads=1)
    m = _model([node], [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, seq, hidden])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, seq, hidden])], inits, opset=13, ms=True)
    return Probe("QAttention (ms) u8×s8 (K=32)", m, {"x": x}, np.ones((1, seq, hidden)))


def dynamic_quantize_lstm(hidden: int = 8, k: int = 32) -> Probe:
    """DynamicQuantizeLSTM, one step: X = 1.0 (quantized to 255, zero point 0), W = 127 with a scale that makes
    each gate's exact pre-activation 1.0 (0.5 where the pairs saturate); R, B, initial states zero."""
    x = np.full((1, 1, k), 1.0, np.float32)
    w = np.full((1, k, 4 * hidden), 127, np.int8)
    r = np.zeros((1, hidden, 4 * hidden), np.int8)
    ws = np.array([1.0 / (127 * k)], np.float32)
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(r, "R"), numpy_helper.from_array(ws, "ws"),
             numpy_helper.from_array(np.zeros(1, np.int8), "wz"), numpy_helper.from_array(np.ones(1, np.float32), "rs"),
             numpy_helper.from_array(np.zeros(1, np.int8), "rz")]
    node = helper.make_node("DynamicQuantizeLSTM", ["X", "W", "R", "", "", "", "", "", "ws", "wz", "rs", "rz"], ["Y"],
                            domain=MS, hidden_size=hidden)
    m = _model([node], [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 1, k])],
               [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], inits, opset=13, ms=True)
    sig = 1 / (1 + np.exp(-1.0))
    c = sig * np.tanh(1.0)  # i * g, forget gate times a zero cell
    exact = np.full((1, 1, 1, hidden), sig * np.tanh(c))
    return Probe("DynamicQuantizeLSTM (ms) u8×s8 (K=32)", m, {"X": x}, exact)


# --- QDQ patterns onnxruntime fuses (what our outputs hold) ------------------------------------------


def qdq(op: str, a_type: int = TensorProto.UINT8, w_type: int = TensorProto.INT8, q_out: bool = True, group: int = 1,
        c: int = 16, k: int = 3, guard: bool = False, w_per_channel: bool = True) -> Probe:
    """Float in → Q(a_type) → DQ → op(W from DQ(w_type)) → [Q → DQ] → float out. Activation scale 1/255 or 1/128
    puts every activation on its top code; weights at the top of their type with scale 1."""
    amax = HIGH[a_type]
    xval = 1.0
    a_scale = 1.0 / amax  # x = 1.0 lands on the top code (255 / 127)
    wval = WHIGH[w_type]
    if op in ("MatMul", "Gemm"):
        x_shape, w = [2, 64], np.full((64, 8), wval, NP_OF[w_type])
        axis = 1
    elif op == "ConvTranspose":
        x_shape, w = [1, c, 6, 6], np.full((c, c, k, k), wval, NP_OF[w_type])
        axis = 1
    else:
        cout = c
        x_shape, w = [1, c, 6, 6], np.full((cout, c // group, k, k), wval, NP_OF[w_type])
        axis = 0
    n_out = w.shape[axis]
    ws = np.ones(n_out, np.float32) if w_per_channel else np.array(1.0, np.float32)
    wz = np.zeros(n_out, NP_OF[w_type]) if w_per_channel else np.array(0, NP_OF[w_type])
    codes = np.full(x_shape, amax, np.int64)
    if op in ("MatMul", "Gemm"):
        acc = codes @ w.astype(np.int64)
    elif op == "ConvTranspose":
        # stride 1, pads k//2: the same sums as a Conv over the flipped, transposed kernel
        acc = _conv_int(codes, np.flip(w.transpose(1, 0, 2, 3), (2, 3)), 1, k // 2)
    else:
        acc = _conv_int(codes, w, group, k // 2)
    exact = acc * a_scale  # the op's float output
    y_scale = float(np.abs(exact).max()) / 100.0
    nodes = [helper.make_node("QuantizeLinear", ["x", "as", "az"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "as", "az"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=axis)]
    attrs = {}
    if op in ("Conv", "ConvTranspose"):
        attrs = {"pads": [k // 2] * 4}
        if group > 1:
            attrs["group"] = group
    nodes.append(helper.make_node(op, ["xd", "wd"], ["y0"], **attrs))
    if q_out:
        nodes += [helper.make_node("QuantizeLinear", ["y0", "ys", "yz"], ["yq"]),
                  helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])]
        exact = (_requant(exact, 1 / y_scale, a_type) - 0) * y_scale
    else:
        nodes.append(helper.make_node("Identity", ["y0"], ["y"]))
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(ws, "ws"), numpy_helper.from_array(wz, "wz"),
             _scalar("as", a_scale, np.float32), _scalar("az", 0, NP_OF[a_type]), _scalar("ys", y_scale, np.float32),
             _scalar("yz", 0, NP_OF[a_type])]
    m = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = onnx.shape_inference.infer_shapes(m)
    if guard:
        unsigned_gemm_weights(m)
    kind = ""
    if op == "Conv":
        kind = " depthwise" if group == c else " dense" if group == 1 else f" grouped {group}"
        kind += f" {k}×{k}"
    wkind = "" if w_per_channel else ", weight per tensor"
    name = (f"QDQ {op}{kind} {_t(a_type)}×{_t(w_type)}{wkind} → {'Q' if q_out else 'float'}"
            + (" (guard: weights stored u8)" if guard else ""))
    return Probe(name, m, {"x": np.full(x_shape, xval, np.float32)}, exact)


def qdq_weight_first(guard: bool = False) -> Probe:
    """MatMul(W, x): the constant int8 weight as the first operand (a Conv1d or a projection written W @ x), the
    uint8 activation second. The guard's pattern reads the weight at input 1 only."""
    w = np.full((8, 64), 127, np.int8)
    a_scale = 1.0 / 255
    exact = (w.astype(np.int64) @ np.full((64, 2), 255, np.int64)) * a_scale
    y_scale = float(exact.max()) / 100.0
    nodes = [helper.make_node("QuantizeLinear", ["x", "as", "az"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "as", "az"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"]),
             helper.make_node("MatMul", ["wd", "xd"], ["y0"]),
             helper.make_node("QuantizeLinear", ["y0", "ys", "yz"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])]
    inits = [numpy_helper.from_array(w, "w"), _scalar("ws", 1.0, np.float32), _scalar("wz", 0, np.int8),
             _scalar("as", a_scale, np.float32), _scalar("az", 0, np.uint8), _scalar("ys", y_scale, np.float32),
             _scalar("yz", 0, np.uint8)]
    m = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 2])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 2])], inits)
    if guard:
        unsigned_gemm_weights(m)
    exact = _requant(exact, 1 / y_scale, TensorProto.UINT8) * y_scale
    return Probe("QDQ MatMul(W, x) s8 weight first × u8 → Q" + (" (guard)" if guard else ""), m,
                 {"x": np.full((64, 2), 1.0, np.float32)}, exact)


def qdq_int4(op: str) -> Probe:
    """A8W4's pattern: uint8 Q/DQ activations, int4 per-channel weights at 7, Q after."""
    if op == "MatMul":
        x_shape, wshape, axis = [2, 64], (64, 8), 1
    else:
        x_shape, wshape, axis = [1, 16, 6, 6], (16, 16, 3, 3), 0
    w = np.full(wshape, 7, np.int8)
    n_out = wshape[axis]
    a_scale = 1.0 / 255
    codes = np.full(x_shape, 255, np.int64)
    acc = codes @ w.astype(np.int64) if op == "MatMul" else _conv_int(codes, w, 1, 1)
    exact = acc * a_scale
    y_scale = float(np.abs(exact).max()) / 100.0
    nodes = [helper.make_node("QuantizeLinear", ["x", "as", "az"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "as", "az"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=axis),
             helper.make_node(op, ["xd", "wd"], ["y0"], **({"pads": [1, 1, 1, 1]} if op == "Conv" else {})),
             helper.make_node("QuantizeLinear", ["y0", "ys", "yz"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])]
    inits = [helper.make_tensor("w", TensorProto.INT4, list(wshape), w.ravel().tolist()),
             numpy_helper.from_array(np.ones(n_out, np.float32), "ws"),
             helper.make_tensor("wz", TensorProto.INT4, [n_out], [0] * n_out),
             _scalar("as", a_scale, np.float32), _scalar("az", 0, np.uint8), _scalar("ys", y_scale, np.float32),
             _scalar("yz", 0, np.uint8)]
    m = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    exact = _requant(exact, 1 / y_scale, TensorProto.UINT8) * y_scale
    return Probe(f"QDQ {op} u8×s4 per channel → Q (A8W4)", m, {"x": np.full(x_shape, 1.0, np.float32)}, exact)


def qdq_matmul_nbits(block: int = 32, k: int = 64, bits: int = 8) -> Probe:
    """DequantizeLinear(int8 / int4, block_size) + MatMul (opset 21): onnxruntime fuses it into MatMulNBits, which
    by default quantizes the float activation to int8 per block and sums in integers (issue 26)."""
    wtype = TensorProto.INT8 if bits == 8 else TensorProto.INT4
    top = 127 if bits == 8 else 7
    w = np.full((k, 8), top, np.int8)
    ws = np.ones((k // block, 8), np.float32)
    x = np.full((2, k), 1.0, np.float32)
    wt = helper.make_tensor("w", wtype, [k, 8], w.ravel().tolist())
    nodes = [helper.make_node("DequantizeLinear", ["w", "ws"], ["wd"], axis=0, block_size=block),
             helper.make_node("MatMul", ["x", "wd"], ["y"])]
    m = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, k])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])], [wt, numpy_helper.from_array(ws, "ws")])
    return Probe(f"DQ int{bits} block {block} + MatMul (MatMulNBits, float activations)", m, {"x": x},
                 x.astype(np.float64) @ w.astype(np.float64))


def _t(t: int) -> str:
    return {TensorProto.UINT8: "u8", TensorProto.INT8: "s8"}[t]


def probes() -> list[Callable[[], Probe]]:
    U, S = TensorProto.UINT8, TensorProto.INT8
    out: list[Callable[[], Probe]] = [
        lambda: matmul_integer(U, S, 8), lambda: matmul_integer(U, S), lambda: matmul_integer(U, U),
        lambda: matmul_integer(S, S), lambda: matmul_integer(S, U),
        lambda: conv_integer(U), lambda: conv_integer(S), lambda: conv_integer(U, group=16),
        lambda: qlinear_matmul(U, S), lambda: qlinear_matmul(U, U), lambda: qlinear_matmul(S, S),
        lambda: qlinear_conv(U, S), lambda: qlinear_conv(U, S, per_channel=True), lambda: qlinear_conv(U, S, k=1),
        lambda: qlinear_conv(U, S, c=8), lambda: qlinear_conv(U, U), lambda: qlinear_conv(S, S),
        lambda: qlinear_conv(U, S, group=4), lambda: qlinear_conv(U, S, group=16),
        lambda: qlinear_conv(U, S, group=16, k=5), lambda: qlinear_conv(U, S, group=16, per_channel=True),
        lambda: qlinear_conv(U, S, group=16, mult=2), lambda: qlinear_conv(U, U, group=16), lambda: qlinear_conv(S, S, group=16),
        lambda: qlinear_conv(U, S, group=16, stride=2), lambda: qlinear_conv(U, S, group=16, dilation=2),
        lambda: qlinear_conv(U, S, group=16, k=7), lambda: qlinear_conv(U, S, group=16, rank=1),
        lambda: qlinear_conv(U, S, group=16, rank=1, k=5), lambda: qlinear_conv(U, S, group=16, rank=3),
        lambda: qlinear_conv(U, S, group=24, c=24), lambda: qlinear_conv(U, S, group=3, c=3),
        lambda: qlinear_conv(U, S, rank=1), lambda: qlinear_conv(U, S, rank=3), lambda: qlinear_conv(U, S, stride=2),
        lambda: matmul_integer_to_float(), lambda: dynamic_quantize_matmul(S), lambda: dynamic_quantize_matmul(U),
        lambda: dynamic_quantize_linear_matmul_integer(), lambda: qgemm(S), lambda: qgemm(S, float_out=False),
        lambda: qgemm(U), lambda: qattention(), lambda: dynamic_quantize_lstm(),
    ]
    for op in ("Conv", "MatMul", "Gemm"):
        for q_out in (True, False):
            for guard in (False, True):
                out.append(lambda op=op, q_out=q_out, guard=guard: qdq(op, q_out=q_out, guard=guard))
        out.append(lambda op=op: qdq(op, w_per_channel=False))
        out.append(lambda op=op: qdq(op, w_per_channel=False, guard=True))
        out.append(lambda op=op: qdq(op, a_type=S))
        out.append(lambda op=op: qdq(op, a_type=S, q_out=False))
        out.append(lambda op=op: qdq(op, a_type=S, guard=True))
        out.append(lambda op=op: qdq(op, w_type=U))
    out += [lambda: qdq("Conv", group=4), lambda: qdq("Conv", group=4, guard=True), lambda: qdq("Conv", group=16),
            lambda: qdq("Conv", group=16, k=5), lambda: qdq("Conv", k=1), lambda: qdq("Conv", c=8),
            lambda: qdq("Conv", a_type=S, group=16), lambda: qdq("ConvTranspose"), lambda: qdq("ConvTranspose", guard=True),
            lambda: qdq_matmul_nbits(), lambda: qdq_matmul_nbits(bits=4), lambda: qdq_weight_first(),
            lambda: qdq_weight_first(guard=True), lambda: qdq_int4("MatMul"), lambda: qdq_int4("Conv"),
            lambda: qdq("Conv", group=16, guard=False), lambda: qlinear_conv(U, S, group=16, mult=2, per_channel=True)]
    return out


def run(probe: Probe, workdir: str) -> dict:
    optimized = os.path.join(workdir, "opt.onnx")
    row = {"probe": probe.name}
    try:
        sess = _common.session(probe.model, threads=1, optimized_model_path=optimized)
        got = sess.run(None, probe.feed)[0]
    except Exception as exc:  # noqa: BLE001 - a kernel onnxruntime does not have is a row too
        row.update(kernel="-", result=f"does not run: {str(exc).splitlines()[0][:120]}")
        return row
    kernels = [n.op_type for n in onnx.load(optimized).graph.node
               if n.op_type not in ("QuantizeLinear", "DequantizeLinear", "Identity", "Cast")]
    row["kernel"] = ", ".join(dict.fromkeys(kernels)) or "-"
    got = np.asarray(got, np.float64)
    exact = np.asarray(probe.exact, np.float64).reshape(got.shape)
    if probe.integer_codes:
        bad = np.abs(got - exact) > 1
        err = float(np.abs(got - exact).max() / max(np.abs(exact).max(), 1))
    else:
        err = float(np.abs(got - exact).max() / max(np.abs(exact).max(), 1e-30))
        bad = np.abs(got - exact) > 2e-3 * max(np.abs(exact).max(), 1e-30)
    row["rel_error"] = err
    row["got_exact"] = f"{got.ravel()[0]:.6g} / {exact.ravel()[0]:.6g}"
    row["result"] = "SATURATES" if bad.any() else "exact"
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    flags = {f for line in open("/proc/cpuinfo") if line.startswith("flags") for f in line.split()} if os.path.exists("/proc/cpuinfo") else set()
    import onnxruntime as ort

    print(f"onnxruntime {ort.__version__}; CPU flags: avx2={'avx2' in flags} avx512bw={'avx512bw' in flags} "
          f"avx512_vnni={'avx512_vnni' in flags} avx_vnni={'avx_vnni' in flags}; "
          f"probe integer_gemm_saturates()={integer_gemm_saturates()}")
    print("| probe | kernel onnxruntime ran | first output got / exact | rel. error | result |")
    print("| --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        for make in probes():
            row = run(make(), tmp)
            err = f"{row['rel_error']:.3f}" if "rel_error" in row else "-"
            print(f"| {row['probe']} | {row['kernel']} | {row.get('got_exact', '-')} | {err} | {row['result']} |", flush=True)


if __name__ == "__main__":
    main()
