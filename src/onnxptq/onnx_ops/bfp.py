"""ONNX realisation of block floating point (reference: :mod:`onnxptq.formats.bfp`).

One node ``onnxptq.BFPQuantizeDequantize__<variant>`` calling a model-local FunctionProto built
from standard ops only. The node carries the reference tool's attribute names (``bfp_method``,
``axis``, ``bit_width``, ``block_size``, ``rounding_mode``, ``sub_block_size``,
``sub_block_shift_bits``, ``convert_to_bfloat_before_bfp``, ``use_compiler_version_cpu_kernel``)
so a reader sees the format; the body is specialised to them (constants folded in), hence the
variant suffix: several variants can live in one model.

Why the body looks the way it does (measured on one core, 1×64×112×112 float32; a plain copy of
the tensor is ~0.12 ms and every extra full-tensor op costs about that much):

* **No Transpose.** The tensor is viewed as ``(pre, C/bs, bs, post)`` by Reshape (free in
  onnxruntime) and reduced over the block axis; scales broadcast back. A transpose to put the
  channel axis last doubled the cost in earlier measurements.
* **Exponent math on block maxima only.** ``2^floor(log2 amax)`` is found exactly with a
  Veltkamp split in float64 (round to one significant bit, halve if it rounded up) on the
  ``1/block_size``-sized tensor of maxima — no Log/Pow, no bit casts (ONNX has none below opset
  26).
* **Fast path / exact path via If.** ``ReduceMax`` in onnxruntime does not propagate NaN reliably
  (a NaN can silently drop out of, or corrupt, a vectorised max), so one ``ReduceSum`` over the
  tensor (which does propagate NaN/Inf) decides: all finite → the short path; otherwise the exact
  path masks Inf/NaN explicitly (``to_bfp``: pass through; ``to_bfp_prime``: block → NaN).
  ``to_bfp_prime`` also needs the exact path when a block's exponent is so small that a subnormal
  input (which the reference flushes to zero) could round to a non-zero code.
* **Ragged rows via If.** Only when ``C % block_size != 0`` is the row zero-padded (Pad) and
  sliced back; otherwise no copy is made.
* Rounding: mode 2 is ``Round`` (half to even); for ``to_bfp`` it also reproduces the
  reference's ``py3_round`` zero sign (v in [-0.5, 0) → +0, v = -0 stays -0). Modes 0 and 1 are
  ``Round`` plus an exact tie correction (``v - Round(v)`` is exact), a few more passes.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

from ..formats.base import DOMAIN, DOMAIN_VERSION, QDQNodes
from ..formats.bfp import normalize_attrs

#: Base op/function name; the emitted name carries a variant suffix (see :func:`function_name`).
OP_TYPE = "BFPQuantizeDequantize"
#: CastLike (type-generic output) needs opset 15.
MIN_OPSET = 15

_ATTR_ORDER = (
    "bfp_method",
    "axis",
    "bit_width",
    "block_size",
    "rounding_mode",
    "sub_block_size",
    "sub_block_shift_bits",
    "convert_to_bfloat_before_bfp",
    "use_compiler_version_cpu_kernel",
)
_F = TensorProto.FLOAT
_I64_MAX = np.iinfo(np.int64).max


def function_name(attrs: dict[str, Any], opset: int) -> str:
    """The variant name: every attribute that shapes the body, and the body's opset."""
    a = attrs
    axis = f"m{-a['axis']}" if a["axis"] < 0 else str(a["axis"])
    name = f"{OP_TYPE}__{'prime' if a['bfp_method'] == 'to_bfp_prime' else 'bfp'}_w{a['bit_width']}_b{a['block_size']}"
    if a["bfp_method"] == "to_bfp_prime":
        name += f"_s{a['sub_block_size']}_d{a['sub_block_shift_bits']}"
    name += f"_r{a['rounding_mode']}_a{axis}"
    if a["convert_to_bfloat_before_bfp"]:
        name += "_bf"
    if a["use_compiler_version_cpu_kernel"] and a["bfp_method"] == "to_bfp":
        name += "_cc"
    return f"{name}_o{opset}"


class _Graph:
    """A list of nodes with SSA names; sub-graphs (If branches) share the name counter."""

    def __init__(self, counter: itertools.count, opset: int) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.counter = counter
        self.opset = opset

    def sub(self) -> "_Graph":
        return _Graph(self.counter, self.opset)

    def fresh(self, hint: str) -> str:
        return f"{hint}_{next(self.counter)}"

    def op(self, op_type: str, *inputs: str, hint: str | None = None, **attrs: Any) -> str:
        out = self.fresh(hint or op_type.lower())
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], **attrs))
        return out

    def const(self, value: Any, dtype: Any = np.float32) -> str:
        arr = np.asarray(value, dtype=dtype)
        out = self.fresh("c")
        self.nodes.append(
            helper.make_node("Constant", [], [out], value=onnx.numpy_helper.from_array(arr, out))
        )
        return out

    def i64(self, *values: int) -> str:
        return self.const(list(values), np.int64)

    def reduce(self, op_type: str, x: str, axes: list[int] | None, keepdims: int = 1) -> str:
        """Reduce over ``axes`` (None: all), with axes as input from opset 18 (13 for ReduceSum)."""
        if axes is None:
            return self.op(op_type, x, keepdims=keepdims)
        if op_type == "ReduceSum" or self.opset >= 18:
            return self.op(op_type, x, self.i64(*axes), keepdims=keepdims)
        return self.op(op_type, x, axes=axes, keepdims=keepdims)

    def if_(self, cond: str, then: "_Graph", then_out: str, other: "_Graph", other_out: str) -> str:
        def graph(g: _Graph, out: str, tag: str) -> onnx.GraphProto:
            return helper.make_graph(g.nodes, self.fresh(tag), [], [helper.make_tensor_value_info(out, _F, None)])

        return self.op("If", cond, then_branch=graph(then, then_out, "then"), else_branch=graph(other, other_out, "else"))


# ------------------------------------------------------------------------------- building blocks


def _pow2_floor(g: _Graph, a: str) -> str:
    """``2^floor(log2 a)`` for finite ``a >= 2^-127``, exactly.

    Veltkamp split in float64: ``c = a·(2^52+1)``, ``h = c - (c - a)`` is ``a`` rounded to one
    significant bit, i.e. ``2^e`` or ``2^(e+1)``; halve where it rounded up. float64 keeps
    ``a·(2^52+1)`` finite and float32 subnormals normal, so no special cases remain.
    """
    ad = g.op("Cast", a, to=TensorProto.DOUBLE)
    c = g.op("Mul", ad, g.const(2.0**52 + 1.0, np.float64))
    h = g.op("Sub", c, g.op("Sub", c, ad))
    p = g.op("Where", g.op("Greater", h, ad), g.op("Mul", h, g.const(0.5, np.float64)), h)
    return g.op("Cast", p, to=_F)


def _round(g: _Graph, v: str, mode: int, py3_zero: bool, zero: str) -> str:
    """Round ``v`` (float32 codes) the way the reference does.

    mode 2: half to even. With ``py3_zero`` (``to_bfp``), v in [-0.5, 0) gives +0 and v = -0
    stays -0, like the tool's ``py3_round``: ``Round(v) + zero`` turns every -0 into +0 (``zero``
    is a runtime +0 tensor, so graph optimisers cannot drop the Add as a no-op) and a Where puts
    back the exact zeros of ``v``.
    mode 1: half towards +inf: ties that Round sent down (``v - Round(v) == 0.5``) go up.
    mode 0: half away from zero: at a tie (``|v - Round(v)| == 0.5``) take ``v + sign(v)/2``.
    ``v - Round(v)`` is exact in float32, so the tie tests are exact.
    """
    q = g.op("Round", v)
    if mode == 2:
        if not py3_zero:
            return q
        return g.op("Where", g.op("Equal", v, g.const(0.0)), v, g.op("Add", q, zero))
    t = g.op("Sub", v, q)
    if mode == 1:
        return g.op("Where", g.op("Equal", t, g.const(0.5)), g.op("Add", q, g.const(1.0)), q)
    away = g.op("Add", v, g.op("Mul", g.op("Sign", v), g.const(0.5)))
    return g.op("Where", g.op("Equal", g.op("Abs", t), g.const(0.5)), away, q)


def _nonfinite(g: _Graph, x: str) -> str:
    return g.op("Or", g.op("IsNaN", x), g.op("IsInf", x))


def _all_finite(g: _Graph, x: str) -> str:
    """A scalar bool: no Inf/NaN in ``x`` (a sum propagates both; an overflowing sum of finite
    values only sends the tensor down the exact path, which is still correct)."""
    total = g.reduce("ReduceSum", x, None, keepdims=0)
    return g.op("Not", g.op("Or", g.op("IsNaN", total), g.op("IsInf", total)))


# ------------------------------------------------------------------------------------ to_bfp


def _bfp_quant(g: _Graph, x4: str, a: dict[str, Any]) -> str:
    """to_bfp on finite ``x4`` of shape (pre, nb, bs, post)."""
    m = a["bit_width"] - 9
    amax = g.reduce("ReduceMax", g.op("Abs", x4), [2])
    p = _pow2_floor(g, g.op("Max", amax, g.const(2.0**-127)))
    s = g.op("Mul", p, g.const(2.0 ** (1 - m)))
    zero = g.op("Sub", s, s)
    rm = a["rounding_mode"]
    if a["use_compiler_version_cpu_kernel"]:
        # The largest rounded code of a block is R(max(x)/s) (R is monotone); if it reaches 2^m
        # the block's exponent goes up once. The clamp of that kernel can never bind afterwards.
        top = _round(g, g.op("Div", g.reduce("ReduceMax", x4, [2]), s), rm, True, zero)
        s = g.op("Where", g.op("GreaterOrEqual", top, g.const(2.0**m)), g.op("Mul", s, g.const(2.0)), s)
        zero = g.op("Sub", s, s)
        q = _round(g, g.op("Div", x4, s), rm, True, zero)
    else:
        qmax = float(2**m - 1)
        v = g.op("Clip", g.op("Div", x4, s), g.const(-qmax), g.const(qmax))
        q = _round(g, v, rm, True, zero)
    return g.op("Mul", q, s)


def _bfp_body(g: _Graph, x4: str, a: dict[str, Any]) -> str:
    fast = g.sub()
    fast_y = _bfp_quant(fast, x4, a)
    slow = g.sub()
    bad = _nonfinite(slow, x4)
    xz = slow.op("Where", bad, slow.const(0.0), x4)
    slow_y = slow.op("Where", bad, x4, _bfp_quant(slow, xz, a))
    return g.if_(_all_finite(g, x4), fast, fast_y, slow, slow_y)


# ------------------------------------------------------------------------------ to_bfp_prime


def _prime_quant(g: _Graph, x5: str, sbmax: str, bmax: str, a: dict[str, Any], floor: float, chain: bool) -> str:
    """to_bfp_prime on ``x5`` (pre, nb, nsb, k, post) given sub-block and block |max|.

    The sub-block scale is ``2^(max(Ej, Es-D) - 127 + 1 - m)`` (D = 2^d - 1): with ``chain`` the
    shift is found by comparing the sub-block max with ``Ps·2^-i`` (D ≤ 3: a few Where on the
    sub-block maxima), otherwise by taking the sub-block exponent too.
    """
    m = a["bit_width"] - 9
    dmax = (1 << a["sub_block_shift_bits"]) - 1
    ps = _pow2_floor(g, g.op("Max", bmax, g.const(floor)))
    if chain:
        factor = g.const(2.0 ** (-dmax + 1 - m))
        for i in range(dmax - 1, -1, -1):
            hit = g.op("GreaterOrEqual", sbmax, g.op("Mul", ps, g.const(2.0**-i)))
            factor = g.op("Where", hit, g.const(2.0 ** (-i + 1 - m)), factor)
        s = g.op("Mul", ps, factor)
    else:
        pj = _pow2_floor(g, g.op("Max", sbmax, g.const(2.0**-127)))
        base = g.op("Max", pj, g.op("Mul", ps, g.const(2.0**-dmax)))
        s = g.op("Mul", base, g.const(2.0 ** (1 - m)))
    qmax = float(2**m - 1)
    v = g.op("Clip", g.op("Div", x5, s), g.const(-qmax), g.const(qmax))
    return g.op("Mul", _round(g, v, a["rounding_mode"], False, ""), s)


def _prime_body(g: _Graph, x4: str, shape4: dict[str, str], a: dict[str, Any]) -> str:
    """to_bfp_prime on ``x4`` (pre, nb, bs, post); returns (pre, nb, bs, post)."""
    bs, k = a["block_size"], min(a["sub_block_size"], a["block_size"])
    nsb = -(-bs // k)
    m = a["bit_width"] - 9
    dmax = (1 << a["sub_block_shift_bits"]) - 1
    xk = x4
    if nsb * k != bs:  # a shorter last sub-block: zero-pad every block (zeros never win a max)
        xk = g.op("Pad", x4, g.i64(0, 0, 0, 0, 0, 0, nsb * k - bs, 0))
    shape5 = g.op("Concat", shape4["pre"], shape4["nb"], g.i64(nsb, k), shape4["post"], axis=0)
    x5 = g.op("Reshape", xk, shape5)

    # Blocks whose exponent is at least T need no subnormal flush: |subnormal|/scale < 1/4.
    threshold = 2.0 ** ((1 << a["sub_block_shift_bits"]) + m + 1 - 127)
    sbmax = g.reduce("ReduceMax", g.op("Abs", x5), [3])
    bmax = g.reduce("ReduceMax", sbmax, [2])
    small = g.reduce(
        "ReduceMin", g.op("Where", g.op("Equal", bmax, g.const(0.0)), g.const(np.inf), bmax), None, keepdims=0
    )
    ok = g.op("And", _all_finite(g, x5), g.op("GreaterOrEqual", small, g.const(threshold)))

    fast = g.sub()
    fast_y = _prime_quant(fast, x5, sbmax, bmax, a, threshold, chain=dmax <= 3)

    slow = g.sub()
    bad_el = _nonfinite(slow, x5)
    bad = slow.op("Greater", slow.reduce("ReduceMax", slow.op("Cast", bad_el, to=_F), [2, 3]), slow.const(0.0))
    ax = slow.op("Abs", x5)
    flushed = slow.op("Where", slow.op("Less", ax, slow.const(2.0**-126)), slow.op("Mul", x5, slow.const(0.0)), x5)
    az = slow.op("Where", bad_el, slow.const(0.0), slow.op("Abs", flushed))
    s_sbmax = slow.reduce("ReduceMax", az, [3])
    s_bmax = slow.reduce("ReduceMax", s_sbmax, [2])
    yq = _prime_quant(slow, flushed, s_sbmax, s_bmax, a, 2.0**-127, chain=False)
    slow_y = slow.op("Where", bad, slow.const(np.nan), yq)

    y5 = g.if_(ok, fast, fast_y, slow, slow_y)
    if nsb * k == bs:
        return g.op("Reshape", y5, shape4["shape"])
    padded4 = g.op("Concat", shape4["pre"], shape4["nb"], g.i64(nsb * k), shape4["post"], axis=0)
    y4p = g.op("Reshape", y5, padded4)
    return g.op("Slice", y4p, g.i64(0), g.i64(bs), g.i64(2))


# ------------------------------------------------------------------------------------ function


def _blocked(g: _Graph, x3: str, dims: dict[str, str], a: dict[str, Any]) -> str:
    """Quantize ``x3`` (pre, Cp, post), Cp a multiple of block_size; same shape out."""
    shape4 = g.op("Concat", dims["pre"], dims["nb"], g.i64(a["block_size"]), dims["post"], axis=0)
    x4 = g.op("Reshape", x3, shape4)
    if a["bfp_method"] == "to_bfp":
        y4 = _bfp_body(g, x4, a)
    else:
        y4 = _prime_body(g, x4, {**dims, "shape": shape4}, a)
    return g.op("Reshape", y4, g.op("Concat", dims["pre"], dims["cp"], dims["post"], axis=0))


def _function(a: dict[str, Any], opset: int, name: str) -> onnx.FunctionProto:
    g = _Graph(itertools.count(), opset)
    bs = a["block_size"]

    main = g.sub()
    xf = main.op("Cast", "x", to=_F)
    if a["convert_to_bfloat_before_bfp"]:
        xf = main.op("Cast", main.op("Cast", xf, to=TensorProto.BFLOAT16), to=_F)
    shape = main.op("Shape", xf)
    rank = main.op("Shape", shape)
    axis = a["axis"]
    norm = main.i64(axis) if axis >= 0 else main.op("Add", rank, main.i64(axis))
    ax = main.op("Where", main.op("Equal", rank, main.i64(1)), main.i64(0), norm)
    ax1 = main.op("Add", ax, main.i64(1))
    pre = main.reduce("ReduceProd", main.op("Slice", shape, main.i64(0), ax), None)
    chan = main.op("Slice", shape, ax, ax1)
    post = main.reduce("ReduceProd", main.op("Slice", shape, ax1, main.i64(_I64_MAX)), None)
    nb = main.op("Div", main.op("Add", chan, main.i64(bs - 1)), main.i64(bs))
    cp = main.op("Mul", nb, main.i64(bs))
    dims = {"pre": pre, "nb": nb, "post": post, "cp": cp}
    x3 = main.op("Reshape", xf, main.op("Concat", pre, chan, post, axis=0))

    exact = main.sub()
    exact_y = _blocked(exact, x3, dims, a)
    ragged = main.sub()
    pads = ragged.op("Concat", ragged.i64(0, 0, 0, 0), ragged.op("Sub", cp, chan), ragged.i64(0), axis=0)
    yp = _blocked(ragged, ragged.op("Pad", x3, pads), dims, a)
    ragged_y = ragged.op("Slice", yp, ragged.i64(0), chan, ragged.i64(1))
    fits = main.op("Squeeze", main.op("Equal", chan, cp), main.i64(0))
    y3 = main.if_(fits, exact, exact_y, ragged, ragged_y)
    main_y = main.op("CastLike", main.op("Reshape", y3, shape), "x")

    single = g.sub()
    single_y = single.op("Identity", "x")
    tiny = g.op("Less", g.op("Size", "x"), g.const(2, np.int64))
    out = g.if_(tiny, single, single_y, main, main_y)
    # Inner branches are float32; these two return the input's type (float32 or float16), so
    # their declared output type is left unset.
    for attr in g.nodes[-1].attribute:
        for vi in attr.g.output:
            vi.type.Clear()
    g.nodes.append(helper.make_node("Identity", [out], ["y"]))
    return helper.make_function(
        DOMAIN,
        name,
        ["x"],
        ["y"],
        g.nodes,
        opset_imports=[helper.make_opsetid("", opset)],
        attributes=list(_ATTR_ORDER),
        doc_string=f"BFP quantize-dequantize ({a['bfp_method']}), attributes {a}; see onnxptq.formats.bfp.",
    )


def build(fmt: str, x: str, y: str, *, name: str, opset: int, **attrs: Any) -> QDQNodes:
    """One ``BFPQuantizeDequantize`` node (domain ``onnxptq``) mapping ``x`` to its BFP value ``y``.

    ``attrs`` are the BFPAttributes (validated by :func:`onnxptq.formats.bfp.normalize_attrs`).
    The function body is built for ``max(opset, 15)``; ``min_opset`` tells the caller to raise the
    model to that opset first.
    """
    if fmt != "bfp":
        raise ValueError(f"onnx_ops.bfp builds the 'bfp' format, not {fmt!r}")
    a = normalize_attrs(**attrs)
    body_opset = max(int(opset), MIN_OPSET)
    fname = function_name(a, body_opset)
    node_attrs = {k: a[k] for k in _ATTR_ORDER}
    node = helper.make_node(fname, [x], [y], name=name, domain=DOMAIN, **node_attrs)
    return QDQNodes(
        nodes=[node],
        functions=[_function(a, body_opset, fname)],
        opset_imports={DOMAIN: DOMAIN_VERSION},
        min_opset=MIN_OPSET,
    )
