"""ONNX form of the OCP MX formats: one ``MXQuantizeDequantize_*`` function call, standard ops only.

The node carries the reference tool's attributes (``element_dtype``, ``axis``, ``block_size``,
``rounding_mode``) plus our ``scale_search``. ``axis`` and ``block_size`` reach the body through
attribute references, so one body serves every axis, block size, rank (1–5 and beyond) and shape;
the element type, the int8 rounding mode and ``scale_search`` change the body's structure, so
they are part of the function name (``MXQuantizeDequantize_fp8_e4m3``,
``MXQuantizeDequantize_int8_rm2_ss``, …) and variants coexist in one model.

How the body stays fast and exact (see DESIGN.md's measurements):
- blocks are formed by a Reshape to ``(pre, n_blocks, block_size, post)`` around the block axis —
  no Transpose — after zero-padding a ragged axis;
- the exponent math runs on the block maxima only (``1/block_size`` of the elements):
  ``floor(log2(amax))`` is estimated with ``Log`` and corrected exactly by comparing with powers of
  two looked up in a constant table (``Gather``), so no libm result is trusted to be exact and no
  opset-24 E8M0 ``Cast`` is needed;
- elements are rounded with arithmetic, not a float8 ``Cast`` (onnxruntime's float8 Cast pair
  costs ~15 ms on a 1×64×112×112 tensor; one elementwise op costs ~0.15 ms): the normal range by
  Veltkamp splitting ``hi = c - (c - v)``, ``c = v·(2^(23−m) + 1)``, which rounds a float32 to
  ``m`` mantissa bits with ties to even (checked exhaustively over whole binades), the subnormal
  range of the element by ``Round`` on a fixed grid; ``Clip`` saturates first;
- every scaling is a multiplication by an exact power of two, so it never rounds.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

from onnxptq.formats.base import DOMAIN, DOMAIN_VERSION, QDQNodes
from onnxptq.formats.mx import E8M0_MAX, E8M0_MIN, ElementFormat, check_attributes

log = logging.getLogger(__name__)

OP_BASE = "MXQuantizeDequantize"
#: Default-domain opset the body needs: ReduceMax/ReduceSum/Pad with tensor axes/pads (18).
MIN_OPSET = 18
ATTRIBUTES = ("element_dtype", "axis", "block_size", "rounding_mode", "scale_search")

#: Powers of two 2**(i - _POW2_BIAS) for every float32 exponent (subnormals included).
_POW2_BIAS = 149
_POW2_TABLE = np.ldexp(np.float32(1.0), np.arange(-149, 128)).astype(np.float32)
_FLT_MAX = float(np.finfo(np.float32).max)


def function_name(element_dtype: str, rounding_mode: int, scale_search: int) -> str:
    """Name of the body variant: element type, int8 rounding mode and search change its ops."""
    name = f"{OP_BASE}_{element_dtype}"
    if element_dtype == "int8":
        name += f"_rm{rounding_mode}"
    if scale_search:
        name += "_ss"
    return name


class _Body:
    """Collects the nodes of a function body with fresh value names."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self._count = 0

    def op(self, op_type: str, *inputs: str, n_out: int = 1, **attrs: Any) -> str:
        outs = [self._fresh(op_type) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, **attrs))
        return outs[0]

    def const(self, value: Any, dtype: Any = np.float32) -> str:
        arr = np.asarray(value, dtype=dtype)
        name = self._fresh("c")
        self.nodes.append(
            helper.make_node("Constant", [], [name], value=onnx.numpy_helper.from_array(arr, name))
        )
        return name

    def attr_int(self, attr: str) -> str:
        """A scalar int64 holding the calling node's attribute ``attr``."""
        name = self._fresh(attr)
        node = helper.make_node("Constant", [], [name])
        node.attribute.append(
            onnx.AttributeProto(name="value_int", ref_attr_name=attr, type=onnx.AttributeProto.INT)
        )
        self.nodes.append(node)
        return name

    def _fresh(self, hint: str) -> str:
        self._count += 1
        return f"{hint}_{self._count}"


def _pow2(b: _Body, table: str, exponent: str, offset: float = 0.0) -> str:
    """``2**(exponent + offset)`` exactly, for integer-valued float ``exponent`` (table lookup)."""
    e = b.op("Add", exponent, b.const(offset + _POW2_BIAS))
    return b.op("Gather", table, b.op("Cast", e, to=TensorProto.INT64))


def _block_exponent(b: _Body, table: str, amax: str, fmt: ElementFormat) -> str:
    """E8M0 shared exponent ``max(floor(log2(amax)) - emax, -127)`` as float (amax finite ≥ 0)."""
    am = b.op("Max", amax, b.const(2.0**-126))
    est = b.op("Floor", b.op("Mul", b.op("Log", am), b.const(1.0 / math.log(2.0))))
    est = b.op("Clip", est, b.const(-126.0), b.const(127.0))
    p = _pow2(b, table, est)
    too_big = b.op("Cast", b.op("Greater", p, amax), to=TensorProto.FLOAT)
    too_small = b.op("Cast", b.op("LessOrEqual", b.op("Add", p, p), amax), to=TensorProto.FLOAT)
    e = b.op("Add", b.op("Sub", est, too_big), too_small)
    return b.op("Max", b.op("Sub", e, b.const(float(fmt.emax))), b.const(float(E8M0_MIN)))


def _round_int(b: _Body, w: str, rounding_mode: int) -> str:
    """Round to integer: 0 half away, 1 half up, 2 half even; ties found exactly, -0 kept.

    ``Round`` is RNE; at a tie the other modes may need one more step ``t``, added as ``r + t``
    with ``t = -0.0`` where no step is needed, because ``-0 + -0 = -0`` keeps the sign of zero
    (``r + 0.0`` would not). The ``-0.0`` sits in ``Where``'s else branch on purpose (see
    :func:`_quantize`).
    """
    r = b.op("Round", w)
    if rounding_mode == 2:
        return r
    d = b.op("Sub", w, r)  # exact: |w - r| <= 0.5 and r within a factor 2 of w
    if rounding_mode == 1:
        step = b.op("Where", b.op("Equal", d, b.const(0.5)), b.const(1.0), b.const(-0.0))
    else:
        sign = b.op("Sign", w)
        toward_zero = b.op("Equal", b.op("Mul", d, sign), b.const(0.5))
        step = b.op("Where", toward_zero, sign, b.const(-0.0))
    return b.op("Add", r, step)


def _quantize(b: _Body, table: str, x4: str, a: str, exp: str, fmt: ElementFormat, rounding_mode: int) -> str:
    """Fake-quantize the blocked tensor ``x4`` with per-block exponent ``exp`` (no Inf/NaN care)."""
    v = b.op("Mul", x4, _pow2(b, table, b.op("Neg", exp)))
    if fmt.is_int:
        w = b.op("Mul", v, b.const(64.0))
        w = b.op("Clip", w, b.const(-127.0), b.const(127.0))
        return b.op("Mul", _round_int(b, w, rounding_mode), _pow2(b, table, exp, -6.0))
    vc = b.op("Clip", v, b.const(-fmt.max_norm), b.const(fmt.max_norm))
    c = b.op("Mul", vc, b.const(2.0 ** (23 - fmt.mbits) + 1.0))
    hi = b.op("Sub", c, b.op("Sub", c, vc))
    sub = b.op("Round", b.op("Mul", vc, b.const(2.0 ** (fmt.mbits - fmt.emin))))
    y_norm = b.op("Mul", hi, _pow2(b, table, exp))
    y_sub = b.op("Mul", sub, _pow2(b, table, exp, float(fmt.emin - fmt.mbits)))
    # y_sub may be -0, so it goes in Where's else branch: onnxruntime's CPU Where merges the two
    # branches with ``then if then != 0 else else``, so a -0 in the then branch comes out +0.
    normal = b.op("GreaterOrEqual", a, _pow2(b, table, exp, float(fmt.emin)))
    return b.op("Where", normal, y_norm, y_sub)


def make_function(
    element_dtype: str, rounding_mode: int, scale_search: int, opset: int
) -> onnx.FunctionProto:
    """The FunctionProto for one variant; the body imports the default domain at ``opset``."""
    fmt = check_attributes(element_dtype, 1, 1, rounding_mode, scale_search)
    b = _Body()
    table = b.const(_POW2_TABLE)
    xf = b.op("Cast", "x", to=TensorProto.FLOAT)
    shp = b.op("Shape", "x")
    rank = b.op("Size", shp)
    zero, one = b.const(0, np.int64), b.const(1, np.int64)
    ax = b.attr_int("axis")
    bs = b.op("Unsqueeze", b.attr_int("block_size"), b.const([0], np.int64))
    ax = b.op("Where", b.op("Less", ax, zero), b.op("Add", ax, rank), ax)
    ax = b.op("Where", b.op("Equal", rank, one), zero, ax)  # rank 1 ignores axis
    ax = b.op("Where", b.op("Less", ax, zero), rank, ax)  # out of range -> Gather fails loudly
    ax1 = b.op("Unsqueeze", ax, b.const([0], np.int64))
    n = b.op("Gather", shp, ax1)
    one1 = b.const([1], np.int64)
    pre = b.op("ReduceProd", b.op("Concat", one1, b.op("Slice", shp, b.const([0], np.int64), ax1), axis=0),
               keepdims=1)
    tail = b.op("Slice", shp, b.op("Add", ax1, one1), b.const([np.iinfo(np.int64).max], np.int64))
    post = b.op("ReduceProd", b.op("Concat", one1, tail, axis=0), keepdims=1)
    nb = b.op("Div", b.op("Sub", b.op("Add", n, bs), one1), bs)
    padded = b.op("Mul", nb, bs)
    npad = b.op("Sub", padded, n)
    x3 = b.op("Reshape", xf, b.op("Concat", pre, n, post, axis=0))
    pads = b.op("Concat", b.const([0, 0, 0, 0], np.int64), npad, b.const([0], np.int64), axis=0)
    xp = b.op("Pad", x3, pads)
    x4 = b.op("Reshape", xp, b.op("Concat", pre, nb, bs, post, axis=0))

    a = b.op("Abs", x4)
    finite = b.op("LessOrEqual", a, b.const(_FLT_MAX))  # false for Inf and NaN
    amax = b.op("ReduceMax", b.op("Where", finite, a, b.const(0.0)), b.const([2], np.int64), keepdims=1)
    exp = _block_exponent(b, table, amax, fmt)
    yq = _quantize(b, table, x4, a, exp, fmt, rounding_mode)
    if scale_search:
        exp1 = b.op("Min", b.op("Add", exp, b.const(1.0)), b.const(float(E8M0_MAX)))
        y1 = _quantize(b, table, x4, a, exp1, fmt, rounding_mode)
        # Compare the values as returned (input dtype), so a candidate overflowing to Inf loses.
        d0 = b.op("Cast", b.op("CastLike", yq, "x"), to=TensorProto.DOUBLE)
        d1 = b.op("Cast", b.op("CastLike", y1, "x"), to=TensorProto.DOUBLE)
        dx = b.op("Cast", x4, to=TensorProto.DOUBLE)
        two_x = b.op("Mul", dx, b.const(2.0, np.float64))
        delta = b.op("Mul", b.op("Sub", d1, d0), b.op("Sub", b.op("Add", d1, d0), two_x))
        delta = b.op("Where", finite, delta, b.const(0.0, np.float64))
        total = b.op("ReduceSum", delta, b.const([2], np.int64), keepdims=1)
        # Choose per block, then quantize once more: selecting elements with Where would lose -0.
        exp = b.op("Where", b.op("Less", total, b.const(0.0, np.float64)), exp1, exp)
        yq = _quantize(b, table, x4, a, exp, fmt, rounding_mode)
    # Inf/NaN pass through: yq - (clip(x) - x) is yq where x is finite (clip(x) - x = +0 and
    # yq - +0 keeps -0) and x itself where x is ±Inf or NaN. No Where: onnxruntime's Where
    # turns a -0 from its then branch into +0 and its Not+Where fusion swaps branches.
    xc = b.op("Clip", x4, b.const(-_FLT_MAX), b.const(_FLT_MAX))
    y4 = b.op("Sub", yq, b.op("Sub", xc, x4))
    y3 = b.op("Reshape", y4, b.op("Concat", pre, padded, post, axis=0))
    ys = b.op("Slice", y3, b.const([0], np.int64), n, one1)
    y = b.op("Reshape", ys, shp)
    b.nodes.append(helper.make_node("CastLike", [y, "x"], ["y"]))
    return helper.make_function(
        DOMAIN,
        function_name(fmt.name, rounding_mode, scale_search),
        ["x"],
        ["y"],
        b.nodes,
        [helper.make_opsetid("", opset)],
        attributes=list(ATTRIBUTES),
        doc_string=f"OCP MX fake quantization, element {fmt.name} (see onnxptq.formats.mx).",
    )


def build(
    fmt: str,
    x: str,
    y: str,
    *,
    name: str,
    opset: int,
    element_dtype: str = "int8",
    axis: int = 1,
    block_size: int = 32,
    rounding_mode: int = 0,
    scale_search: int = 0,
) -> QDQNodes:
    """One ``MXQuantizeDequantize_*`` node computing ``y = formats.mx.fake_quantize(x, ...)``.

    ``opset`` is the model's default-domain opset; the body is emitted for it (onnxruntime checks a
    function body against the model's opset). Below :data:`MIN_OPSET` the fragment is built for
    :data:`MIN_OPSET` and says so in ``min_opset``: the caller raises the model first.
    """
    if fmt != "mx":
        raise ValueError(f"onnx_ops.mx builds the 'mx' format, not {fmt!r}")
    elem = check_attributes(element_dtype, axis, block_size, rounding_mode, scale_search)
    body_opset = max(int(opset), MIN_OPSET)
    function = make_function(elem.name, int(rounding_mode), int(scale_search), body_opset)
    node = helper.make_node(
        function.name,
        [x],
        [y],
        name=name,
        domain=DOMAIN,
        element_dtype=elem.name,
        axis=int(axis),
        block_size=int(block_size),
        rounding_mode=int(rounding_mode),
        scale_search=int(scale_search),
    )
    return QDQNodes(
        nodes=[node],
        functions=[function],
        opset_imports={"": body_opset, DOMAIN: DOMAIN_VERSION},
        min_opset=MIN_OPSET,
    )
