"""Fuzzing the pipeline: random small valid graphs, corrupted model bytes, corrupted data files.

Shared by the bounded property tests (``tests/test_fuzz.py``, fixed seed, run in the suite) and the
long run (``bench/fuzz.py``, thousands of examples, findings in ``bench/RESULTS.md``). Needs
``hypothesis`` (the ``test`` extra).

The contract checked (issue 18, item 13): ``quantize`` either returns a model that the ONNX checker
accepts and stock onnxruntime runs, with outputs within the format's expected error of the float
model's, or raises one of the documented error classes (:mod:`onnxptq.errors`) — never a raw
``KeyError``, ``IndexError``, protobuf ``EncodeError`` or checker exception.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from onnxptq.errors import DOCUMENTED_ERRORS

#: One preset per distinct configuration, finetuning ones left out (they need torch and minutes).
FUZZ_PRESETS = ("A8W8", "A16W8", "U8S8", "S8S8", "U8U8", "U16S8", "A8W4", "FP16", "BF16", "FP8_E4M3", "FP8_E5M2",
                "BFP16", "MX4", "MX6", "MX9", "MXINT8", "MXFP8_E4M3", "MXFP8_E5M2", "MXFP6_E3M2", "MXFP6_E2M3",
                "MXFP4", "BF16_BFP16", "BF16_MXINT8", "MX9_INT8")

#: Largest relative L2 error ``|q - f| / |f|`` of an output, by preset; chains of up to eight
#: random layers with random weights compound the error, so these are loose (a broken emission
#: gives errors near or above 1). 4-bit and 6-bit element formats are the loosest.
_LOOSE = {"A8W4": 0.9, "MX4": 0.9, "MXFP4": 0.9, "MX6": 0.6, "MXFP6_E3M2": 0.6, "MXFP6_E2M3": 0.6,
          "FP8_E5M2": 0.6, "MXFP8_E5M2": 0.6}


def max_relative_error(preset: str) -> float:
    """The loosest output error accepted for ``preset`` in the fuzz contract."""
    return _LOOSE.get(preset, 0.35)


@dataclass
class RandomGraph:
    """A drawn model and what to feed it."""

    model: onnx.ModelProto
    input_shape: tuple[int, ...]
    dtype: Any
    ops: list[str] = field(default_factory=list)

    def feeds(self, n: int, seed: int) -> list[dict[str, np.ndarray]]:
        rng = np.random.default_rng(seed)
        return [{"x": rng.normal(0, 1, self.input_shape).astype(self.dtype)} for _ in range(n)]


class _Builder:
    """Appends nodes to a graph while tracking every tensor's shape (all shapes are static)."""

    def __init__(self, rng: random.Random, elem: int, opset: int) -> None:
        self.rng = rng
        self.elem = elem
        self.np_dtype = np.float16 if elem == TensorProto.FLOAT16 else np.float32
        self.opset = opset
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.ops: list[str] = []
        self.count = 0

    def name(self, stem: str) -> str:
        self.count += 1
        return f"{stem}{self.count}"

    def weight(self, shape: tuple[int, ...], scale: float = 0.5) -> str:
        name = self.name("w")
        values = np.asarray(np.random.default_rng(self.rng.randrange(2**31)).normal(0, scale, shape), self.np_dtype)
        self.inits.append(numpy_helper.from_array(values, name))
        return name

    def const_i64(self, values: list[int]) -> str:
        name = self.name("k")
        self.inits.append(numpy_helper.from_array(np.asarray(values, np.int64), name))
        return name

    def const_f32(self, values: list[float]) -> str:
        name = self.name("f")
        self.inits.append(numpy_helper.from_array(np.asarray(values, np.float32), name))
        return name

    def scalar(self, value: float) -> str:
        """A rank-0 constant of the graph's float type (an exporter's literal)."""
        name = self.name("s")
        self.inits.append(numpy_helper.from_array(np.asarray(value, self.np_dtype), name))
        return name

    def node(self, op: str, inputs: list[str], shape: tuple[int, ...], n_out: int = 1, **attrs: Any) -> list[str]:
        outs = [self.name(op.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=self.name(f"n_{op}_"), **attrs))
        for out in outs:
            self.shapes[out] = shape
        self.ops.append(op)
        return outs

    # -- one step: an op applied to a tensor (and maybe a second one of the same shape) --------

    def step(self, op: str, x: str, other: str | None) -> str | None:
        """Apply ``op`` to ``x``; None when ``op`` does not fit ``x``'s shape."""
        s = self.shapes[x]
        r = self.rng
        if op == "Conv" and len(s) == 4:
            cout, k = r.randint(1, 6), r.choice([1, 3])
            inputs = [x, self.weight((cout, s[1], k, k))] + ([self.weight((cout,), 0.1)] if r.random() < 0.7 else [])
            return self.node("Conv", inputs, (s[0], cout, s[2], s[3]), pads=[k // 2] * 4)[0]
        if op == "MatMul":
            dout = r.randint(1, 8)
            return self.node("MatMul", [x, self.weight((s[-1], dout))], (*s[:-1], dout))[0]
        if op == "Gemm" and len(s) == 2:
            dout = r.randint(1, 8)
            return self.node("Gemm", [x, self.weight((dout, s[1])), self.weight((dout,), 0.1)], (s[0], dout), transB=1)[0]
        if op in ("Add", "Mul"):
            operand = other if other is not None and self.shapes[other] == s else self.weight((s[-1],), 1.0)
            return self.node(op, [x, operand], s)[0]
        if op in ("Relu", "Sigmoid"):
            return self.node(op, [x], s)[0]
        if op == "Softmax":
            return self.node("Softmax", [x], s, axis=-1)[0]
        if op == "Concat":
            operand = other if other is not None and self.shapes[other] == s else x
            axis = len(s) - 1
            return self.node("Concat", [x, operand], (*s[:-1], 2 * s[-1]), axis=axis)[0]
        if op == "Reshape" and len(s) > 2:
            flat = int(np.prod(s[1:]))
            return self.node("Reshape", [x, self.const_i64([s[0], flat])], (s[0], flat))[0]
        if op == "Transpose" and len(s) >= 2:
            perm = list(range(len(s)))
            perm[-1], perm[-2] = perm[-2], perm[-1]
            return self.node("Transpose", [x], tuple(s[p] for p in perm), perm=perm)[0]
        if op == "Split" and s[-1] % 2 == 0 and s[-1] >= 2:
            half = (*s[:-1], s[-1] // 2)
            if self.opset >= 18:
                a, b = self.node("Split", [x], half, n_out=2, axis=-1, num_outputs=2)
            else:
                a, b = self.node("Split", [x, self.const_i64([s[-1] // 2] * 2)], half, n_out=2, axis=-1)
            return self.node("Add", [a, b], half)[0]
        if op == "Resize" and len(s) == 4 and s[2] * 2 <= 16:
            scales = self.const_f32([1.0, 1.0, 2.0, 2.0])
            return self.node("Resize", [x, "", scales], (s[0], s[1], 2 * s[2], 2 * s[3]), mode="nearest")[0]
        if op == "NormSumSquare" and s[-1] >= 2:
            return self._norm_sum_square(x, s)
        if op == "ReduceMaxSub":
            return self._reduce_max_sub(x, s)
        if op == "ScanMatMul" and s[0] >= 1:
            return self._scan_matmul(x, s)
        if op == "LoopMatMul" and s[0] >= 1:
            return self._loop_matmul(x, s)
        if op == "CausalSoftmax" and len(s) >= 2 and s[-1] == s[-2] and self.opset >= 14:
            return self._causal_softmax(x, s)
        if op == "MaskedMeanPool" and len(s) >= 2:
            return self._masked_mean_pool(x, s)
        if op == "EinsumMatMul" and len(s) >= 2:
            dout = r.randint(1, 8)
            letters = "abcd"[: len(s) - 1]
            return self.node("Einsum", [x, self.weight((s[-1], dout))], (*s[:-1], dout), equation=f"{letters}i,ij->{letters}j")[0]
        if op == "DepthToSpaceClip" and len(s) == 4 and s[1] % 4 == 0 and s[2] * 2 <= 16:
            up = self.node("DepthToSpace", [x], (s[0], s[1] // 4, 2 * s[2], 2 * s[3]), blocksize=2, mode="CRD")[0]
            return self.node("Clip", [up, self.scalar(0.0), self.scalar(1.0)], self.shapes[up])[0]
        if op == "GRUSeqLens" and len(s) == 2 and self.opset >= 14:
            return self._gru_seq_lens(x, s)
        if op == "ConvTransposeGroups" and len(s) == 4 and s[1] % 2 == 0 and s[2] * 2 <= 16:
            cout = 2 * r.randint(1, 3)  # group 2: (C, cout/2, 3, 3); stride 2, pads 1, output_padding 1: 2H × 2W
            return self.node("ConvTranspose", [x, self.weight((s[1], cout // 2, 3, 3)), self.weight((cout,), 0.1)],
                             (s[0], cout, 2 * s[2], 2 * s[3]), group=2, strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1])[0]
        if op == "DilatedConv" and len(s) == 4:
            cout = r.randint(1, 6)
            return self.node("Conv", [x, self.weight((cout, s[1], 3, 3))], (s[0], cout, s[2], s[3]), dilations=[2, 2], pads=[2, 2, 2, 2])[0]
        if op == "GroupNormInstNorm" and len(s) == 4 and s[1] % 2 == 0:
            return self._group_norm_inst_norm(x, s)
        if op == "HardSigmoidMul":
            return self.node("Mul", [x, self.node("HardSigmoid", [x], s, alpha=0.2, beta=0.5)[0]], s)[0]
        if op == "PReluChannel":
            slope_shape = (s[1], 1, 1) if len(s) == 4 else (s[-1],)
            slope = self.name("slope")
            self.inits.append(numpy_helper.from_array(np.asarray(np.random.default_rng(self.rng.randrange(2**31)).uniform(0.05, 0.3, slope_shape), self.np_dtype), slope))
            return self.node("PRelu", [x, slope], s)[0]
        if op == "ClipMin":
            return self.node("Clip", [x, self.scalar(-0.5)], s)[0]
        if op == "WeightViaCast":
            return self._weight_via_cast(x, s)
        if op == "SharedWeightAdd" and len(s) >= 2 and s[-1] == s[-2]:
            w = self.weight((s[-1], s[-1]))
            return self.node("Add", [self.node("MatMul", [x, w], s)[0], w], s)[0]
        if op == "LayerNormalization" and self.opset >= 17:
            return self.node("LayerNormalization", [x, self.weight((s[-1],), 1.0), self.weight((s[-1],), 0.1)], s, axis=-1)[0]
        if op == "SiLUDivExp":  # x / (1 + exp(-x))
            e = self.node("Exp", [self.node("Neg", [x], s)[0]], s)[0]
            return self.node("Div", [x, self.node("Add", [e, self.scalar(1.0)], s)[0]], s)[0]
        if op == "SoftmaxWritten":  # exp(x - max) / sum(exp(x - max)) over the last axis
            keep = (*s[:-1], 1)
            e = self.node("Exp", [self.node("Sub", [x, self._reduce("ReduceMax", x, [-1], keep, 1)], s)[0]], s)[0]
            return self.node("Div", [e, self._reduce("ReduceSum", e, [-1], keep, 1)], s)[0]
        if op == "GroupNorm5D" and len(s) == 4 and s[1] % 2 == 0:
            return self._group_norm_5d(x, s)
        if op == "LogSoftmaxWritten":  # (x − max) − log(sum(exp(x − max))) over the last axis (jax.nn.log_softmax)
            keep = (*s[:-1], 1)
            d = self.node("Sub", [x, self._reduce("ReduceMax", x, [-1], keep, 1)], s)[0]
            lse = self.node("Log", [self._reduce("ReduceSum", self.node("Exp", [d], s)[0], [-1], keep, 1)], keep)[0]
            return self.node("Sub", [d, lse], s)[0]
        if op == "LayerNormMaxEps" and s[-1] >= 2:
            return self._layer_norm_max_eps(x, s)
        if op == "SpaceToDepth" and len(s) == 4 and s[2] % 2 == 0 and s[3] % 2 == 0:
            return self.node("SpaceToDepth", [x], (s[0], 4 * s[1], s[2] // 2, s[3] // 2), blocksize=2)[0]
        if op == "DropoutIdentity":  # an inference leftover: Dropout (ratio input, training_mode false), then Identity
            train = self.name("train")
            self.inits.append(numpy_helper.from_array(np.asarray(False), train))
            dropped = self.node("Dropout", [x, self.scalar(0.25), train], s)[0]
            return self.node("Identity", [dropped], s)[0]
        if op == "InstanceNormHW" and len(s) == 4:  # InstanceNorm as moments over (H, W): prepare pools both means
            keep = (s[0], s[1], 1, 1)
            d = self.node("Sub", [x, self._reduce("ReduceMean", x, [2, 3], keep, 1)], s)[0]
            var = self._reduce("ReduceMean", self.node("Mul", [d, d], s)[0], [2, 3], keep, 1)
            y = self.node("Div", [d, self.node("Sqrt", [self.node("Add", [var, self.scalar(1e-5)], keep)[0]], keep)[0]], s)[0]
            return self.node("Add", [self.node("Mul", [y, self.weight((s[1], 1, 1), 1.0)], s)[0], self.weight((s[1], 1, 1), 0.1)], s)[0]
        if op == "GemmRowBias" and len(s) == 2:  # Keras through tf2onnx: C a (1, N) row, transB, alpha/beta ≠ 1
            dout = r.randint(1, 8)
            return self.node("Gemm", [x, self.weight((dout, s[1])), self.weight((1, dout), 0.1)], (s[0], dout),
                             transB=1, alpha=0.5, beta=2.0)[0]
        if op == "SplitNumOutputs" and self.opset >= 18 and s[-1] >= 3:  # Split-18 into 3 (a short last piece), back reversed
            piece = -(-s[-1] // 3)
            sizes = [piece, piece, s[-1] - 2 * piece] if s[-1] > 2 * piece else None
            if sizes is None:
                return None
            parts = self.node("Split", [x], s, n_out=3, axis=len(s) - 1, num_outputs=3)
            for part, size in zip(parts, sizes):
                self.shapes[part] = (*s[:-1], size)
            return self.node("Concat", parts[::-1], s, axis=-1)[0]
        return None

    def _layer_norm_max_eps(self, x: str, s: tuple[int, ...]) -> str:
        """LayerNorm as Keras/TF exporters write it: the variance floored by Max(var, ε) (no Add), Sqrt, Reciprocal,
        a Mul by the centred input, a scale and a shift."""
        keep = (*s[:-1], 1)
        d = self.node("Sub", [x, self._reduce("ReduceMean", x, [-1], keep, 1)], s)[0]
        var = self._reduce("ReduceMean", self.node("Mul", [d, d], s)[0], [-1], keep, 1)
        inv = self.node("Reciprocal", [self.node("Sqrt", [self.node("Max", [var, self.scalar(1e-5)], keep)[0]], keep)[0]], keep)[0]
        y = self.node("Mul", [d, inv], s)[0]
        return self.node("Add", [self.node("Mul", [y, self.weight((s[-1],), 1.0)], s)[0], self.weight((s[-1],), 0.1)], s)[0]


    def _reduce(self, op: str, x: str, axes: list[int] | None, shape: tuple[int, ...], keepdims: int) -> str:
        """A Reduce* node in the spelling of this opset: axes as an attribute before 18, an input from
        18 (ReduceSum took the input form at 13); ``axes=None`` reduces every axis."""
        as_input = self.opset >= 18 or op == "ReduceSum"
        if axes is None:
            return self.node(op, [x], shape, keepdims=keepdims)[0]
        if as_input:
            return self.node(op, [x, self.const_i64(axes)], shape, keepdims=keepdims)[0]
        return self.node(op, [x], shape, axes=axes, keepdims=keepdims)[0]

    def _norm_sum_square(self, x: str, s: tuple[int, ...]) -> str:
        """LayerNorm as exporters of Keras-style graphs write it: variance as ReduceSumSquare/n − mean²,
        then Reciprocal of the root (no Div), a scale and a shift."""
        keep = (*s[:-1], 1)
        mu = self._reduce("ReduceMean", x, [-1], keep, 1)
        ss = self._reduce("ReduceSumSquare", x, [-1], keep, 1)
        ex2 = self.node("Mul", [ss, self.scalar(1.0 / s[-1])], keep)[0]
        var = self.node("Sub", [ex2, self.node("Mul", [mu, mu], keep)[0]], keep)[0]
        var = self.node("Relu", [var], keep)[0]  # rounding can make E[x²] − E[x]² a hair negative
        root = self.node("Sqrt", [self.node("Add", [var, self.scalar(1e-5)], keep)[0]], keep)[0]
        y = self.node("Mul", [self.node("Sub", [x, mu], s)[0], self.node("Reciprocal", [root], keep)[0]], s)[0]
        return self.node("Add", [self.node("Mul", [y, self.weight((s[-1],), 1.0)], s)[0], self.weight((s[-1],), 0.1)], s)[0]

    def _reduce_max_sub(self, x: str, s: tuple[int, ...]) -> str:
        """ReduceMax with keepdims=0 (the last axis), Unsqueeze back and Sub, and a rank-0 tensor (the
        whole tensor's ReduceMax with keepdims=0) dividing the result: scalars between nodes."""
        m = self._reduce("ReduceMax", x, [-1], s[:-1], 0)
        back = self.node("Unsqueeze", [m, self.const_i64([len(s) - 1])], (*s[:-1], 1))[0]
        d = self.node("Sub", [x, back], s)[0]
        peak = self._reduce("ReduceMax", self.node("Abs", [x], s)[0], None, (), 0)
        return self.node("Div", [d, self.node("Add", [peak, self.scalar(1.0)], ())[0]], s)[0]

    def _causal_softmax(self, x: str, s: tuple[int, ...]) -> str:
        """GPT-2's causal mask as exporters write it: Trilu of a constant ones square, a bool Cast, Where
        with float32's lowest value (fp16's where the graph is fp16) where the mask is off, Softmax."""
        n = s[-1]
        ones = self.name("ones")
        self.inits.append(numpy_helper.from_array(np.ones((n, n), np.int64), ones))
        tril = self.node("Trilu", [ones], (n, n), upper=0)[0]
        keep = self.node("Cast", [tril], (n, n), to=TensorProto.BOOL)[0]
        low = self.scalar(float(np.finfo(self.np_dtype).min))
        return self.node("Softmax", [self.node("Where", [keep, x, low], s)[0]], s, axis=-1)[0]

    def _masked_mean_pool(self, x: str, s: tuple[int, ...]) -> str:
        """sentence-transformers' mean pooling: an int64 mask (a constant here: its later half zero) Cast to
        the float type, Unsqueezed; Σ(x·m) over the sequence axis (−2) ÷ max(Σm, 1e-9), Added back to x."""
        t = s[-2]
        mask = self.name("mask")
        self.inits.append(numpy_helper.from_array((np.arange(t) < max(1, (t + 1) // 2)).astype(np.int64), mask))
        m = self.node("Unsqueeze", [self.node("Cast", [mask], (t,), to=self.elem)[0], self.const_i64([1])], (t, 1))[0]
        keep = (*s[:-2], 1, s[-1])
        total = self._reduce("ReduceSum", self.node("Mul", [x, m], s)[0], [-2], keep, 1)
        count = self._reduce("ReduceSum", m, [-2], (1, 1), 1)
        count = self.node("Max", [count, self.scalar(1e-9)], (1, 1))[0]
        return self.node("Add", [x, self.node("Div", [total, count], keep)[0]], s)[0]

    def _scan_matmul(self, x: str, s: tuple[int, ...]) -> str:
        """A recurrence as a Scan over axis 0: ``h_t = Tanh(x_t·Wx + h_{t-1}·Wh)``, the weights outer-scope
        initializers read by the body (as exporters of RNN cells write it), the states stacked as output."""
        el, d, row = self.elem, s[-1], list(s[1:])
        wx, wh = self.weight((d, d), 0.5 / np.sqrt(d)), self.weight((d, d), 0.5 / np.sqrt(d))
        h0 = self.name("h0")
        self.inits.append(numpy_helper.from_array(np.zeros(s[1:], self.np_dtype), h0))
        n = {k: self.name(f"scan_{k}_") for k in ("h", "x", "xw", "hw", "sum", "new", "out")}
        inner = [helper.make_node("MatMul", [n["x"], wx], [n["xw"]]), helper.make_node("MatMul", [n["h"], wh], [n["hw"]]),
                 helper.make_node("Add", [n["xw"], n["hw"]], [n["sum"]]), helper.make_node("Tanh", [n["sum"]], [n["new"]]),
                 helper.make_node("Identity", [n["new"]], [n["out"]])]
        body = helper.make_graph(inner, self.name("scan_body"),
                                 [helper.make_tensor_value_info(n["h"], el, row), helper.make_tensor_value_info(n["x"], el, row)],
                                 [helper.make_tensor_value_info(n["new"], el, row), helper.make_tensor_value_info(n["out"], el, row)])
        last, ys = self.node("Scan", [h0, x], s, n_out=2, body=body, num_scan_inputs=1)
        self.shapes[last] = s[1:]
        return ys

    def _loop_matmul(self, x: str, s: tuple[int, ...]) -> str:
        """TorchScript's spelling of a scripted ``for`` over a tensor's first axis: a Loop whose body
        Gathers row ``i`` of the outer-scope input, MatMuls it with an outer-scope weight, adds the carried
        state, Tanh; the rows stacked as the Loop's scan output."""
        el, d, row = self.elem, s[-1], list(s[1:])
        w = self.weight((d, d), 0.5 / np.sqrt(d))
        h0, cond, trip = self.name("h0"), self.name("cond"), self.name("trip")
        self.inits += [numpy_helper.from_array(np.zeros(s[1:], self.np_dtype), h0),
                       numpy_helper.from_array(np.asarray(True), cond), numpy_helper.from_array(np.asarray(s[0], np.int64), trip)]
        n = {k: self.name(f"loop_{k}_") for k in ("i", "c", "h", "row", "rw", "sum", "new", "c_out", "out")}
        inner = [helper.make_node("Gather", [x, n["i"]], [n["row"]], axis=0), helper.make_node("MatMul", [n["row"], w], [n["rw"]]),
                 helper.make_node("Add", [n["rw"], n["h"]], [n["sum"]]), helper.make_node("Tanh", [n["sum"]], [n["new"]]),
                 helper.make_node("Identity", [n["c"]], [n["c_out"]]), helper.make_node("Identity", [n["new"]], [n["out"]])]
        body = helper.make_graph(inner, self.name("loop_body"),
                                 [helper.make_tensor_value_info(n["i"], TensorProto.INT64, []),
                                  helper.make_tensor_value_info(n["c"], TensorProto.BOOL, []),
                                  helper.make_tensor_value_info(n["h"], el, row)],
                                 [helper.make_tensor_value_info(n["c_out"], TensorProto.BOOL, []),
                                  helper.make_tensor_value_info(n["new"], el, row),
                                  helper.make_tensor_value_info(n["out"], el, row)])
        last, ys = self.node("Loop", [trip, cond, h0], s, n_out=2, body=body)
        self.shapes[last] = s[1:]
        return ys

    def _gru_seq_lens(self, x: str, s: tuple[int, ...]) -> str:
        """The GRU op as Keras/tf2onnx write it: the rows of ``x`` (n, d) as a sequence of n steps of batch 1,
        a constant ``sequence_lens`` (int32), an ``initial_h`` initializer, forward or bidirectional,
        ``linear_before_reset`` 1; the states (n, dirs, 1, h) Reshaped to (n, dirs·h)."""
        n, d = s
        h, dirs = self.rng.randint(1, 6), self.rng.choice([1, 2])
        seq = self.node("Unsqueeze", [x, self.const_i64([1])], (n, 1, d))[0]
        lens = self.name("seqlens")
        self.inits.append(numpy_helper.from_array(np.asarray([n], np.int32), lens))
        h0 = self.weight((dirs, 1, h), 0.3)
        inputs = [seq, self.weight((dirs, 3 * h, d), 0.5 / np.sqrt(d)), self.weight((dirs, 3 * h, h), 0.5 / np.sqrt(h)),
                  self.weight((dirs, 6 * h), 0.1), lens, h0]
        y, last = self.node("GRU", inputs, (n, dirs, 1, h), n_out=2, hidden_size=h, linear_before_reset=1,
                            direction="bidirectional" if dirs == 2 else "forward")
        self.shapes[last] = (dirs, 1, h)
        return self.node("Reshape", [y, self.const_i64([n, dirs * h])], (n, dirs * h))[0]

    def _group_norm_inst_norm(self, x: str, s: tuple[int, ...]) -> str:
        """torch's GroupNorm as its TorchScript exporter writes it below opset 18: Reshape to (b, 2 groups, −1),
        InstanceNormalization with a ones scale and zeros shift, Reshape back by the input's Shape, the
        per-channel affine as Mul/Add."""
        b, c = s[0], s[1]
        flat = self.node("Reshape", [x, self.const_i64([b, 2, -1])], (b, 2, int(np.prod(s[1:])) // 2))[0]
        ones, zeros = self.name("gn_scale"), self.name("gn_shift")
        self.inits += [numpy_helper.from_array(np.ones(2, self.np_dtype), ones), numpy_helper.from_array(np.zeros(2, self.np_dtype), zeros)]
        normed = self.node("InstanceNormalization", [flat, ones, zeros], self.shapes[flat], epsilon=1e-5)[0]
        back = self.node("Reshape", [normed, self.node("Shape", [x], (len(s),))[0]], s)[0]
        return self.node("Add", [self.node("Mul", [back, self.weight((c, 1, 1), 1.0)], s)[0], self.weight((c, 1, 1), 0.1)], s)[0]

    def _group_norm_5d(self, x: str, s: tuple[int, ...]) -> str:
        """GroupNorm as Keras/TF exporters write it: a 5-D view (b, 2 groups, c/2, h, w), mean and variance by
        ReduceMean over its last three axes, Div by the root, the view back, the per-channel affine as Mul/Add."""
        b, c, h, w = s
        grouped = (b, 2, c // 2, h, w)
        keep = (b, 2, 1, 1, 1)
        g = self.node("Reshape", [x, self.const_i64(list(grouped))], grouped)[0]
        d = self.node("Sub", [g, self._reduce("ReduceMean", g, [2, 3, 4], keep, 1)], grouped)[0]
        var = self._reduce("ReduceMean", self.node("Mul", [d, d], grouped)[0], [2, 3, 4], keep, 1)
        root = self.node("Sqrt", [self.node("Add", [var, self.scalar(1e-5)], keep)[0]], keep)[0]
        back = self.node("Reshape", [self.node("Div", [d, root], grouped)[0], self.const_i64(list(s))], s)[0]
        return self.node("Add", [self.node("Mul", [back, self.weight((c, 1, 1), 1.0)], s)[0], self.weight((c, 1, 1), 0.1)], s)[0]

    def _weight_via_cast(self, x: str, s: tuple[int, ...]) -> str:
        """A MatMul whose weight reaches it through Identity → Transpose → Cast (stored in the other float
        type, transposed, as converters from frameworks that keep (out, in) weights write it)."""
        dout = self.rng.randint(1, 8)
        other = np.float32 if self.np_dtype == np.float16 else np.float16
        stored = self.name("wt")
        values = np.random.default_rng(self.rng.randrange(2**31)).normal(0, 0.5, (dout, s[-1])).astype(other)
        self.inits.append(numpy_helper.from_array(values, stored))
        w = self.node("Identity", [stored], (dout, s[-1]))[0]
        w = self.node("Transpose", [w], (s[-1], dout), perm=[1, 0])[0]
        w = self.node("Cast", [w], (s[-1], dout), to=self.elem)[0]
        return self.node("MatMul", [x, w], (*s[:-1], dout))[0]

FUZZ_OPS = ("Conv", "MatMul", "Gemm", "Add", "Mul", "Relu", "Sigmoid", "Concat", "Reshape", "Transpose", "Split",
            "Resize", "Softmax", "LayerNormalization", "NormSumSquare", "ReduceMaxSub", "ScanMatMul", "LoopMatMul",
            "CausalSoftmax", "MaskedMeanPool", "EinsumMatMul", "DepthToSpaceClip", "GRUSeqLens", "ConvTransposeGroups",
            "DilatedConv", "GroupNormInstNorm", "HardSigmoidMul", "PReluChannel", "ClipMin", "WeightViaCast", "SharedWeightAdd",
            "SiLUDivExp", "SoftmaxWritten", "GroupNorm5D", "LogSoftmaxWritten", "LayerNormMaxEps", "SpaceToDepth", "DropoutIdentity",
            "InstanceNormHW", "GemmRowBias", "SplitNumOutputs")


def run_step(op: str, x: np.ndarray, opset: int, seed: int = 5) -> tuple[np.ndarray, _Builder]:
    """One drawn step alone on an input like ``x`` (its dtype picks the graph's float type), checked and run
    by onnxruntime: ``(its output on x, the builder)`` — the builder's nodes and initializers are what a
    test compares with a reference written from the operators' definitions."""
    import onnxruntime as ort

    elem = TensorProto.FLOAT16 if x.dtype == np.float16 else TensorProto.FLOAT
    b = _Builder(random.Random(seed), elem, opset)
    b.shapes["x"] = x.shape
    out = b.step(op, "x", None)
    assert out is not None, f"{op} does not fit {x.shape}"
    graph = helper.make_graph(b.nodes, "g", [helper.make_tensor_value_info("x", elem, list(x.shape))],
                              [helper.make_tensor_value_info(out, elem, list(b.shapes[out]))], initializer=b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert got.shape == b.shapes[out], f"{op}: onnxruntime gives {got.shape}, the builder tracked {b.shapes[out]}"
    return got, b


@st.composite
def random_graphs(draw: Callable[..., Any]) -> RandomGraph:
    """A small valid model: 1-8 random layers in a chain with branches that join again."""
    opset = draw(st.integers(13, 21))
    fp16 = draw(st.booleans())
    rank4 = draw(st.booleans())
    seed = draw(st.integers(0, 2**31 - 1))
    ops = draw(st.lists(st.sampled_from(FUZZ_OPS), min_size=1, max_size=8))
    branch_p = draw(st.sampled_from([0.0, 0.3, 0.6]))
    elem = TensorProto.FLOAT16 if fp16 else TensorProto.FLOAT
    b = _Builder(random.Random(seed), elem, opset)
    if rank4:
        shape: tuple[int, ...] = (1, draw(st.integers(1, 4)), draw(st.integers(1, 6)), draw(st.integers(1, 6)))
    else:
        shape = (draw(st.integers(1, 3)), draw(st.integers(1, 8)))
    b.shapes["x"] = shape
    current, earlier = "x", ["x"]
    for op in ops:
        other = b.rng.choice(earlier) if b.rng.random() < branch_p else None
        out = b.step(op, current, other)
        if out is not None:
            current = out
            earlier.append(out)
    if not b.nodes:  # nothing fitted: one MatMul always does
        current = b.step("MatMul", current, None)  # type: ignore[assignment]
    graph = helper.make_graph(
        b.nodes, "fuzz", [helper.make_tensor_value_info("x", elem, list(shape))],
        [helper.make_tensor_value_info(current, elem, list(b.shapes[current]))], initializer=b.inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return RandomGraph(model, shape, b.np_dtype, b.ops)


# ---------------------------------------------------------------------------------------------
# the contract


@dataclass
class Outcome:
    """What one quantization did: ``ok`` with its worst output error, or a documented error."""

    preset: str
    ok: bool
    error: str = ""
    relative_error: float = 0.0


def open_session_for(model: onnx.ModelProto) -> Any:
    """An onnxruntime session on ``model`` through the package's one session factory."""
    from onnxptq.sessions import open_session

    return open_session(model)


def relative_error(reference: np.ndarray, value: np.ndarray) -> float:
    """``|value - reference| / |reference|`` in float64 (0 for two zero tensors)."""
    ref = np.asarray(reference, np.float64)
    val = np.asarray(value, np.float64)
    denom = float(np.linalg.norm(ref))
    diff = float(np.linalg.norm(val - ref))
    if denom < 1e-6:
        return 0.0 if diff < 1e-3 else diff
    return diff / denom


def check_quantize(graph: RandomGraph, preset: str, seed: int = 0) -> Outcome:
    """Quantize ``graph`` with ``preset``; assert the contract; return what happened.

    Raises AssertionError (the fuzz failure) for an undocumented exception, a model the checker
    or onnxruntime refuses, or outputs further from float than :func:`max_relative_error`.
    """
    from onnxptq.api import quantize

    calib = graph.feeds(4, seed)
    try:
        result = quantize(graph.model, preset, calib, eval_samples=0)
    except DOCUMENTED_ERRORS as exc:
        return Outcome(preset, False, f"{type(exc).__name__}: {exc}")
    onnx.checker.check_model(result.model)
    # Judged on the calibration samples themselves: the contract is about emission, not about
    # how well four samples of a tiny tensor predict a fifth (clipping an unseen sample is not a
    # defect). The error is relative to each output's size over all four samples, not to one
    # sample's: a one-element output that one sample happens to drive near zero (a cancellation,
    # a+b with a = -b) is off by a step of its range, which is a huge fraction of itself but no
    # defect (the long fuzz run flagged 20 such cases before this was so).
    float_session, quant_session = open_session_for(graph.model), open_session_for(result.model)
    expected = [np.stack(outs) for outs in zip(*(float_session.run(None, feed) for feed in calib))]
    got = [np.stack(outs) for outs in zip(*(quant_session.run(None, feed) for feed in calib))]
    worst = 0.0
    for ref, val in zip(expected, got):
        assert ref.shape == val.shape, f"{preset}: output shape {val.shape[1:]} != float {ref.shape[1:]}"
        finite = np.isfinite(np.asarray(ref, np.float64))
        if not finite.all():
            continue  # the float model itself overflows (fp16); nothing to compare against
        assert np.isfinite(np.asarray(val, np.float64)).all(), f"{preset}: non-finite outputs where float is finite"
        worst = max(worst, relative_error(ref, val))
    assert worst <= max_relative_error(preset), f"{preset}: relative output error {worst:.3f} > {max_relative_error(preset)} ({graph.ops})"
    return Outcome(preset, True, relative_error=worst)


# ---------------------------------------------------------------------------------------------
# corrupted files


@st.composite
def corruptions(draw: Callable[..., Any], size: int) -> tuple[str, list[tuple[int, int]] | int]:
    """A way to damage ``size`` bytes: ``("truncate", n)`` or ``("flip", [(offset, xor mask), ...])``."""
    if draw(st.booleans()):
        return "truncate", draw(st.integers(0, max(0, size - 1)))
    flips = draw(st.lists(st.tuples(st.integers(0, size - 1), st.integers(1, 255)), min_size=1, max_size=8))
    return "flip", flips


def corrupt(data: bytes, how: tuple[str, Any]) -> bytes:
    """``data`` damaged as :func:`corruptions` drew."""
    kind, arg = how
    if kind == "truncate":
        return data[:arg]
    out = bytearray(data)
    for offset, mask in arg:
        out[offset] ^= mask
    return bytes(out)


def check_corrupt_model(path: Path, data: Any) -> str:
    """Quantize a (corrupted) model file: fine, or a documented error; returns what happened."""
    from onnxptq.api import quantize

    try:
        quantize(path, "A8W8", data, eval_samples=1)
    except DOCUMENTED_ERRORS as exc:
        return type(exc).__name__
    return "ok"
