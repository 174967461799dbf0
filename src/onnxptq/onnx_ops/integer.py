"""ONNX realisation of the integer formats (reference: :mod:`onnxptq.formats.integer`).

- int4/uint4/int8/uint8/int16/uint16: standard ``QuantizeLinear`` → ``DequantizeLinear`` (float32
  scale, zero point of the storage type). int8/uint8 need opset 10 per tensor and 13 per axis;
  16- and 4-bit types and every blocked form need opset 21.
- int32/uint32: standard QuantizeLinear has no 32-bit output, so the pair is the model-local
  function ``onnxptq.Int32QuantizeDequantize`` / ``onnxptq.UInt32QuantizeDequantize``
  (the same body, with the type's bounds, also serves a blocked or per-axis int4 fragment whose
  scales span more than 2^13, see ``_GUARD_MAX_RATIO``)
  ``(x: float32, scale: float32, zero_point: int32|uint32) -> float32`` built from Div, Round,
  Cast, Add, Clip, IsNaN, Where, Sub, Mul. Its scale/zero point must already broadcast against
  ``x``; per-axis and blocked fragments reshape (``Reshape`` to ``[1,…,C,…,1]``) or expand
  (``Gather`` by ``arange(n) // block_size``) them with a few shape ops on the side, so the same
  function body serves every granularity.

Input dtype: the core is float32. ``dtype=None`` (default) makes the fragment type-generic with a
``CastLike`` on each side (float16 and float32 inputs both work; needs opset 15); pass
``dtype="float32"`` for the bare Q/DQ pair (what onnxruntime's QDQ fusions look for) or
``dtype="float16"`` for fixed ``Cast`` nodes.

Names: initializers ``<name>_scale``, ``<name>_zero_point``; nodes ``<name>_QuantizeLinear``,
``<name>_DequantizeLinear``; every intermediate tensor starts with ``<name>_``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..formats.base import DOMAIN, DOMAIN_VERSION, QDQNodes
from ..formats.integer import int_type

#: Function names in the :data:`DOMAIN` domain (the 32-bit types always use them; the others only in
#: the rare case described in :func:`build`).
FUNCTION_NAMES = {
    "int4": "Int4QuantizeDequantize", "uint4": "UInt4QuantizeDequantize",
    "int8": "Int8QuantizeDequantize", "uint8": "UInt8QuantizeDequantize",
    "int16": "Int16QuantizeDequantize", "uint16": "UInt16QuantizeDequantize",
    "int32": "Int32QuantizeDequantize", "uint32": "UInt32QuantizeDequantize",
}

#: onnxruntime 1.31's blocked QuantizeLinear (every type) and per-axis int4/uint4 QuantizeLinear
#: convert ``x/scale`` to int32 before saturating, so |x/scale| >= 2^31 (and ±Inf) come out as qmin.
#: NaN likewise becomes INT_MIN + zero_point (wrapping to qmax when zp < 0).
#: The fragment maps NaN to the lower bound and clips x to ±(min scale)·2^30 first, which keeps every such value saturating the
#: right way as long as max/min scale <= 2^13 (then ±bound/scale is still beyond any 16-bit range).
_GUARD_EXP = 30
_GUARD_MAX_RATIO = 2.0**13

_STANDARD_Q = ("int4", "uint4", "int8", "uint8", "int16", "uint16")


# --------------------------------------------------------------------------------------------
# Helpers shared with onnx_ops.floating
# --------------------------------------------------------------------------------------------


def normalise_dtype(dtype: Any) -> str | None:
    """``None`` (generic), ``"float32"`` or ``"float16"``; anything else is an error."""
    if dtype is None:
        return None
    name = np.dtype(dtype).name
    if name not in ("float32", "float16"):
        raise ValueError(f"dtype must be float32, float16 or None (generic), got {dtype!r}")
    return name


class FragmentBuilder:
    """Collects the nodes and initializers of one fragment; all names derive from ``name``."""

    def __init__(self, name: str, dtype: Any) -> None:
        self.name = name
        self.dtype = normalise_dtype(dtype)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._like: str | None = None

    def init(self, suffix: str, value: np.ndarray) -> str:
        """Add initializer ``<name>_<suffix>`` and return its name."""
        tname = f"{self.name}_{suffix}"
        self.initializers.append(numpy_helper.from_array(np.asarray(value), tname))
        return tname

    def node(self, op: str, inputs: list[str], suffix: str, domain: str = "", **attrs: Any) -> str:
        """Add node ``<name>_<suffix>`` with one output of the same name; return that output."""
        out = f"{self.name}_{suffix}"
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, domain=domain, **attrs))
        return out

    def to_float32(self, x: str) -> str:
        """``x`` as a float32 tensor (a no-op when the dtype is known to be float32)."""
        if self.dtype == "float32":
            return x
        if self.dtype == "float16":
            return self.node("Cast", [x], "CastToFloat", to=TensorProto.FLOAT)
        self._like = self.init("float32_like", np.zeros((), np.float32))
        return self.node("CastLike", [x, self._like], "CastToFloat")

    def from_float32(self, y32: str, x: str, y: str) -> None:
        """Write ``y`` = ``y32`` in the input's dtype (renames the last node's output if float32)."""
        if self.dtype == "float32":
            self._rename_last_output(y32, y)
            return
        if self.dtype == "float16":
            self.nodes.append(helper.make_node("Cast", [y32], [y], name=f"{self.name}_CastBack", to=TensorProto.FLOAT16))
        else:
            self.nodes.append(helper.make_node("CastLike", [y32, x], [y], name=f"{self.name}_CastBack"))

    def _rename_last_output(self, old: str, new: str) -> None:
        last = self.nodes[-1]
        assert last.output[0] == old, "the float32 result must be the last node's output"
        last.output[0] = new

    @property
    def cast_opset(self) -> int:
        """The opset the dtype handling needs (CastLike: 15)."""
        return 15 if self.dtype is None else 1


# --------------------------------------------------------------------------------------------
# Scale / zero point layout
# --------------------------------------------------------------------------------------------


def _granularity(
    scale: Any, zero_point: Any, axis: int | None, block_size: int | None, fmt: str
) -> tuple[np.ndarray, np.ndarray, str]:
    """Validated float32 scale and typed zero point, plus "tensor" / "axis" / "block"."""
    t = int_type(fmt)
    s = np.asarray(scale, dtype=np.float32)
    zp_in = np.asarray(zero_point)
    if not np.all(np.isfinite(s)) or np.any(s <= 0):
        raise ValueError(f"{fmt}: scale must be finite and > 0, got {s.ravel()[:8]}")
    if np.any(zp_in.astype(np.int64) < t.qmin) or np.any(zp_in.astype(np.int64) > t.qmax):
        raise ValueError(f"{fmt}: zero_point {zp_in.ravel()[:8]} is outside [{t.qmin}, {t.qmax}]")
    zp = np.broadcast_to(zp_in.astype(np.int64), s.shape).astype(t.dtype)
    if block_size is not None:
        if axis is None:
            raise ValueError(f"{fmt}: block_size={block_size} needs an axis")
        if int(block_size) < 1:
            raise ValueError(f"{fmt}: block_size must be a positive integer, got {block_size}")
        if s.ndim == 0:
            raise ValueError(f"{fmt}: a blocked scale must have the rank of x, got a scalar")
        return s, zp, "block"
    if s.size == 1:
        return s.reshape(()), zp.reshape(()), "tensor"
    if axis is None:
        raise ValueError(f"{fmt}: scale has {s.size} elements but no axis was given")
    if s.ndim != 1:
        raise ValueError(f"{fmt}: a per-axis scale must be 1-D, got shape {s.shape}")
    return s, zp, "axis"


def _min_opset(fmt: str, kind: str) -> int:
    if kind == "block":
        return 21
    if fmt in ("int8", "uint8", "int32", "uint32"):
        return 13
    return 21


def _axis_shape(b: FragmentBuilder, ref: str, axis: int) -> str:
    """A 1-D int64 shape ``[1, …, -1 (at axis), …, 1]`` of the rank of ``ref`` (computed at run time)."""
    shape = b.node("Shape", [ref], "Shape")
    rank = b.node("Shape", [shape], "Rank")
    ones = b.node("ConstantOfShape", [rank], "Ones", value=numpy_helper.from_array(np.ones(1, np.int64)))
    idx = b.init("axis_index", np.array([axis], np.int64))
    upd = b.init("axis_update", np.array([-1], np.int64))
    return b.node("ScatterElements", [ones, idx, upd], "BroadcastShape", axis=0)


def _block_index(b: FragmentBuilder, ref: str, axis: int, block_size: int) -> str:
    """``arange(n) // block_size`` (int64) for ``n = shape(ref)[axis]``: block of each position."""
    shape = b.node("Shape", [ref], "Shape")
    n = b.node("Gather", [shape, b.init("axis_scalar", np.array(axis, np.int64))], "AxisLength", axis=0)
    r = b.node("Range", [b.init("range_start", np.array(0, np.int64)), n, b.init("range_step", np.array(1, np.int64))],
               "Positions")
    return b.node("Div", [r, b.init("block_size", np.array(block_size, np.int64))], "BlockIndex")


def _broadcast(b: FragmentBuilder, ref: str, params: list[str], kind: str, axis: int | None,
               block_size: int | None) -> list[str]:
    """Make the 1-D / blocked ``params`` broadcast against ``ref`` (identity per tensor)."""
    if kind == "tensor":
        return params
    if kind == "axis":
        shape = _axis_shape(b, ref, int(axis))
        return [b.node("Reshape", [p, shape], f"{p[len(b.name) + 1:]}_broadcast") for p in params]
    idx = _block_index(b, ref, int(axis), int(block_size))
    return [b.node("Gather", [p, idx], f"{p[len(b.name) + 1:]}_expanded", axis=int(axis)) for p in params]


# --------------------------------------------------------------------------------------------
# The 32-bit function
# --------------------------------------------------------------------------------------------


def int_function(fmt: str, opset: int) -> onnx.FunctionProto:
    """``onnxptq.<Fmt>QuantizeDequantize(x, scale, zero_point) -> y`` with a body for ``opset``.

    ``r = Round(x/scale)`` (float32, half to even); ``q = clip(double(r) + zp, qmin, qmax)`` exactly in
    float64, NaN → qmin (as QuantizeLinear); ``y = float32(int64(q) − zp) · scale``.
    """
    t = int_type(fmt)
    dbl = TensorProto.DOUBLE
    c = lambda v: numpy_helper.from_array(np.array(v, np.float64))  # noqa: E731
    nodes = [
        helper.make_node("Div", ["x", "scale"], ["ratio"]),
        helper.make_node("Round", ["ratio"], ["rounded"]),
        helper.make_node("Cast", ["rounded"], ["rounded_d"], to=dbl),
        helper.make_node("Cast", ["zero_point"], ["zp_d"], to=dbl),
        helper.make_node("Add", ["rounded_d", "zp_d"], ["shifted"]),
        helper.make_node("Constant", [], ["qmin"], value=c(t.qmin)),
        helper.make_node("Constant", [], ["qmax"], value=c(t.qmax)),
        helper.make_node("Clip", ["shifted", "qmin", "qmax"], ["clipped"]),
        helper.make_node("IsNaN", ["rounded"], ["is_nan"]),
        helper.make_node("Where", ["is_nan", "qmin", "clipped"], ["q"]),
        # Back through int64: exact, and turns Round's −0 into 0 (onnxruntime drops "+ 0" as a no-op,
        # so float arithmetic alone would leak −0 where QuantizeLinear gives +0).
        helper.make_node("Cast", ["q"], ["q_i"], to=TensorProto.INT64),
        helper.make_node("Cast", ["zero_point"], ["zp_i"], to=TensorProto.INT64),
        helper.make_node("Sub", ["q_i", "zp_i"], ["centred"]),
        helper.make_node("Cast", ["centred"], ["centred_f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["centred_f", "scale"], ["y"]),
    ]
    return helper.make_function(
        DOMAIN, FUNCTION_NAMES[fmt], ["x", "scale", "zero_point"], ["y"], nodes,
        opset_imports=[helper.make_opsetid("", opset)],
        doc_string=f"{fmt} quantize-dequantize (onnxptq.formats.integer.fake_quantize)",
    )


# --------------------------------------------------------------------------------------------
# Builders
# --------------------------------------------------------------------------------------------


def build(
    fmt: str,
    x: str,
    y: str,
    *,
    name: str,
    opset: int,
    scale: Any,
    zero_point: Any = 0,
    axis: int | None = None,
    block_size: int | None = None,
    dtype: Any = None,
) -> QDQNodes:
    """The fragment ``y = fake_quantize(x, fmt, scale=…, zero_point=…, axis=…, block_size=…)``."""
    t = int_type(fmt)
    s, zp, kind = _granularity(scale, zero_point, axis, block_size, fmt)
    b = FragmentBuilder(name, dtype)
    min_opset = max(_min_opset(t.name, kind), b.cast_opset)
    body_opset = max(opset, min_opset)
    x32 = b.to_float32(x)
    s_name = b.init("scale", s)
    attrs: dict[str, Any] = {}
    if kind != "tensor":
        attrs["axis"] = int(axis)
    if kind == "block":
        attrs["block_size"] = int(block_size)
    functions: list[onnx.FunctionProto] = []
    imports: dict[str, int] = {}
    needs_guard = kind == "block" or (kind == "axis" and t.bits == 4)
    s_min, s_max = float(s.min()), float(s.max())
    standard = t.name in _STANDARD_Q and not (needs_guard and s_max / s_min > _GUARD_MAX_RATIO)
    if standard:
        if needs_guard:
            bound = np.float32(s_min) * np.float32(2.0**_GUARD_EXP)
            lo = b.init("guard_lower", np.array(-bound, np.float32))
            hi = b.init("guard_upper", np.array(bound, np.float32))
            # NaN too: those kernels turn it into INT_MIN + zero_point, which wraps for zp < 0.
            nan = b.node("IsNaN", [x32], "GuardIsNaN")
            x32 = b.node("Where", [nan, lo, b.node("Clip", [x32, lo, hi], "GuardClip")], "Guard")
        zp_name = b.init("zero_point", zp)
        q = b.node("QuantizeLinear", [x32, s_name, zp_name], "QuantizeLinear_Output", **attrs)
        b.nodes[-1].name = f"{name}_QuantizeLinear"
        y32 = b.node("DequantizeLinear", [q, s_name, zp_name], "DequantizeLinear_Output", **attrs)
        b.nodes[-1].name = f"{name}_DequantizeLinear"
    else:
        # Shape ops have no int4 kernels in onnxruntime: narrow zero points travel as int32 (exact).
        zp_name = b.init("zero_point", zp if t.bits == 32 else zp.astype(np.int32))
        s_b, zp_b = _broadcast(b, x32, [s_name, zp_name], kind, axis, block_size)
        y32 = b.node(FUNCTION_NAMES[t.name], [x32, s_b, zp_b], "DequantizeLinear_Output", domain=DOMAIN)
        b.nodes[-1].name = f"{name}_DequantizeLinear"
        functions.append(int_function(t.name, body_opset))
        imports[DOMAIN] = DOMAIN_VERSION
    b.from_float32(y32, x, y)
    return QDQNodes(nodes=b.nodes, initializers=b.initializers, functions=functions, opset_imports=imports,
                    min_opset=min_opset)


def build_dequantize(
    fmt: str,
    q_name: str,
    y: str,
    *,
    name: str,
    opset: int,
    scale: Any,
    zero_point: Any = 0,
    axis: int | None = None,
    block_size: int | None = None,
) -> QDQNodes:
    """``y`` (float32) = ``dequantize(q, scale, zero_point, axis, block_size)`` for a stored integer tensor.

    Standard ``DequantizeLinear`` for the 4/8/16-bit types and for int32 with zero point 0 (int32
    bias) per tensor or per axis; otherwise exact float64 nodes ``Cast → Sub → Cast → Mul``.
    """
    t = int_type(fmt)
    s, zp, kind = _granularity(scale, zero_point, axis, block_size, fmt)
    b = FragmentBuilder(name, "float32")
    s_name = b.init("scale", s)
    attrs: dict[str, Any] = {}
    if kind != "tensor":
        attrs["axis"] = int(axis)
    if kind == "block":
        attrs["block_size"] = int(block_size)
    standard = t.name in _STANDARD_Q or (t.name == "int32" and kind != "block" and not np.any(zp))
    if standard:
        inputs = [q_name, s_name]
        if t.name != "int32":
            inputs.append(b.init("zero_point", zp))
        b.nodes.append(helper.make_node("DequantizeLinear", inputs, [y], name=f"{name}_DequantizeLinear", **attrs))
        min_opset = 10 if kind == "tensor" and t.name in ("int8", "uint8", "int32") else _min_opset(t.name, kind)
        return QDQNodes(nodes=b.nodes, initializers=b.initializers, min_opset=max(min_opset, 13))
    zp_name = b.init("zero_point", zp.astype(np.float64))
    s_b, zp_b = _broadcast(b, q_name, [s_name, zp_name], kind, axis, block_size)
    qd = b.node("Cast", [q_name], "AsDouble", to=TensorProto.DOUBLE)
    centred = b.node("Sub", [qd, zp_b], "Centred")
    cf = b.node("Cast", [centred], "AsFloat", to=TensorProto.FLOAT)
    b.nodes.append(helper.make_node("Mul", [cf, s_b], [y], name=f"{name}_DequantizeLinear"))
    return QDQNodes(nodes=b.nodes, initializers=b.initializers, min_opset=21 if kind == "block" else 13)
