"""ONNX realisation of block floating point (reference: :mod:`onnxptq.formats.bfp`).

One node ``onnxptq.BFPQuantizeDequantize__<variant>`` calling a model-local FunctionProto built
from standard ops only. The node carries the reference tool's attribute names (``bfp_method``,
``axis``, ``bit_width``, ``block_size``, ``rounding_mode``, ``sub_block_size``,
``sub_block_shift_bits``, ``convert_to_bfloat_before_bfp``, ``use_compiler_version_cpu_kernel``)
so a reader sees the format; the body is specialised to them (constants folded in), hence the
variant suffix: several variants can live in one model.

Why the body looks the way it does (measured on one core, 1×64×112×112 float32; a plain copy of
the tensor is ~0.12 ms on a quiet core and every extra full-tensor op costs about that much):

* **No Transpose.** The tensor is viewed as ``(pre, C/bs, bs, post)`` by Reshape (free in
  onnxruntime) and reduced over the block axis; scales broadcast back. A transpose to put the
  channel axis last doubled the cost in earlier measurements.
* **Exponent math on block maxima only.** ``2^floor(log2 amax)`` is found exactly on the
  ``1/block_size``-sized tensor of maxima by a Veltkamp split in float64 (round
  ``amax·(3/4 + 2^-40)`` to one significant bit) — no Log/Pow, no compare/Where, no bit casts
  (ONNX has none below opset 26).
* **No full-tensor Where.** It is ~20× slower than an arithmetic op in onnxruntime, and it turns
  a -0 taken from its *then* input into +0; the fast paths use none, the exact paths keep every
  possible -0 in the *else* slot.
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

    def if_(
        self, cond: str, then: "_Graph", then_out: str, other: "_Graph", other_out: str, out: str | None = None
    ) -> str:
        def graph(g: _Graph, name: str, tag: str) -> onnx.GraphProto:
            return helper.make_graph(g.nodes, self.fresh(tag), [], [helper.make_tensor_value_info(name, _F, None)])

        out = out or self.fresh("if")
        self.nodes.append(
            helper.make_node(
                "If", [cond], [out], then_branch=graph(then, then_out, "then"), else_branch=graph(other, other_out, "else")
            )
        )
        return out


# ------------------------------------------------------------------------------- building blocks


def _pow2_floor(g: _Graph, a: str) -> str:
    """``2^floor(log2 a)`` for finite ``a >= 2^-127``, exactly, with arithmetic only.

    In float64, ``b = a·(3/4 + 2^-40)`` lies strictly inside ``(0.75·2^e, 1.5·2^e)`` for
    ``a`` in ``[2^e, 2^(e+1))`` (a float32 has 24 bits, so the product's rounding error is far
    below the margins), and rounding ``b`` to one significant bit gives ``2^e`` with no tie. The
    rounding is a Veltkamp split: ``c = b·(2^52+1)``, ``h = c - (c - b)``. float64 keeps every
    step finite and float32 subnormals normal; no Where/compare (slow in onnxruntime) is needed.
    """
    b = g.op("Mul", g.op("Cast", a, to=TensorProto.DOUBLE), g.const(0.75 + 2.0**-40, np.float64))
    c = g.op("Mul", b, g.const(2.0**52 + 1.0, np.float64))
    h = g.op("Sub", c, g.op("Sub", c, b))
    return g.op("Cast", h, to=_F)


def _round(g: _Graph, v: str, mode: int, py3_zero: bool, zero: str) -> str:
    """Round ``v`` (float32 codes) the way the reference does, signs of zero included.

    Full-tensor ``Where`` is ~20x slower than arithmetic in onnxruntime, so corrections are
    written as ``q - c``: subtracting ``c = +0`` leaves ``q`` (and a -0) untouched, while
    ``c = -0`` turns a -0 into +0 and ``c = ∓1`` moves a tie.

    mode 2: half to even (``Round``). With ``py3_zero`` (``to_bfp``) v in [-0.5, 0) gives +0
    while v = -0 stays -0, like the tool's ``py3_round``: ``c = (v + 0)·0`` is -0 exactly for
    negative non-zero v (``zero`` is a runtime +0 tensor, so optimisers cannot drop the Add).
    mode 1: half towards +inf: ties that Round sent down (``t = v - Round(v) = 0.5``) go up:
    ``c = 0 - [t == 0.5]``.
    mode 0: half away from zero: ties Round sent towards zero have ``t·sign(v) = 0.5``:
    ``c = 0 - [t·sign(v) == 0.5]·sign(v)``. ``t`` is exact in float32, so the tests are exact.
    """
    q = g.op("Round", v)
    if mode == 2:
        if not py3_zero:
            return q
        c = g.op("Mul", g.op("Add", v, zero), g.const(0.0))
        return g.op("Sub", q, c)
    t = g.op("Sub", v, q)
    if mode == 1:
        hit = g.op("Cast", g.op("Equal", t, g.const(0.5)), to=_F)
        return g.op("Sub", q, g.op("Sub", g.const(0.0), hit))
    sign = g.op("Sign", v)
    hit = g.op("Cast", g.op("Equal", g.op("Mul", t, sign), g.const(0.5)), to=_F)
    return g.op("Sub", q, g.op("Sub", g.const(0.0), g.op("Mul", hit, sign)))


def _nonfinite(g: _Graph, x: str) -> str:
    return g.op("Or", g.op("IsNaN", x), g.op("IsInf", x))


def _keep_tiny(g: _Graph, x: str, tiny: str) -> str:
    """Where a one-element tensor must be passed through: its non-zero element.

    onnxruntime's ``Where`` returns +0 for a -0 taken from its *then* input (the else input keeps
    it), so every Where here has ±0 only in the else slot; a zero needs no pass-through anyway
    (quantization maps ±0 to itself).
    """
    return g.op("And", tiny, g.op("Not", g.op("Equal", x, g.const(0.0))))


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


def _bfp_body(g: _Graph, x4: str, a: dict[str, Any], tiny: str) -> str:
    """to_bfp on ``x4`` (pre, nb, bs, post); ``tiny``: the tensor has < 2 elements (→ unchanged)."""
    fast = g.sub()
    fast_y = _bfp_quant(fast, x4, a)
    slow = g.sub()
    keep = slow.op("Or", _nonfinite(slow, x4), _keep_tiny(slow, x4, tiny))
    xz = slow.op("Where", keep, slow.const(0.0), x4)
    slow_y = slow.op("Where", keep, x4, _bfp_quant(slow, xz, a))
    ok = g.op("And", _all_finite(g, x4), g.op("Not", tiny))
    return g.if_(ok, fast, fast_y, slow, slow_y)


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
        # shift = D - #{i < D : sbmax >= Ps·2^-i}; each hit doubles the scale (no Where).
        s = g.op("Mul", ps, g.const(2.0 ** (-dmax + 1 - m)))
        for i in range(dmax):
            hit = g.op("Cast", g.op("GreaterOrEqual", sbmax, g.op("Mul", ps, g.const(2.0**-i))), to=_F)
            s = g.op("Mul", s, g.op("Add", hit, g.const(1.0)))
    else:
        pj = _pow2_floor(g, g.op("Max", sbmax, g.const(2.0**-127)))
        base = g.op("Max", pj, g.op("Mul", ps, g.const(2.0**-dmax)))
        s = g.op("Mul", base, g.const(2.0 ** (1 - m)))
    qmax = float(2**m - 1)
    v = g.op("Clip", g.op("Div", x5, s), g.const(-qmax), g.const(qmax))
    return g.op("Mul", _round(g, v, a["rounding_mode"], False, ""), s)


def _prime_body(g: _Graph, x4: str, dims: dict[str, str], a: dict[str, Any], tiny: str) -> str:
    """to_bfp_prime on ``x4`` (pre, nb, bs, post); returns the same elements in the same order
    (as a 5-D or 4-D tensor); ``tiny``: the tensor has < 2 elements (→ unchanged)."""
    bs, k = a["block_size"], min(a["sub_block_size"], a["block_size"])
    nsb = -(-bs // k)
    m = a["bit_width"] - 9
    dmax = (1 << a["sub_block_shift_bits"]) - 1
    xk = x4
    if nsb * k != bs:  # a shorter last sub-block: zero-pad every block (zeros never win a max)
        xk = g.op("Pad", x4, g.i64(0, 0, 0, 0, 0, 0, nsb * k - bs, 0))
    shape5 = g.op("Concat", dims["pre"], dims["nb"], g.i64(nsb, k), dims["post"], axis=0)
    x5 = g.op("Reshape", xk, shape5)

    # Blocks whose exponent is at least T need no subnormal flush: |subnormal|/scale < 1/4.
    threshold = 2.0 ** ((1 << a["sub_block_shift_bits"]) + m + 1 - 127)
    sbmax = g.reduce("ReduceMax", g.op("Abs", x5), [3])
    bmax = g.reduce("ReduceMax", sbmax, [2])
    low = g.op("And", g.op("Greater", bmax, g.const(0.0)), g.op("Less", bmax, g.const(threshold)))
    any_low = g.reduce("ReduceMax", g.op("Cast", low, to=_F), None, keepdims=0)
    ok = g.op("And", _all_finite(g, x5), g.op("Equal", any_low, g.const(0.0)))
    ok = g.op("And", ok, g.op("Not", tiny))

    fast = g.sub()
    fast_y = _prime_quant(fast, x5, sbmax, bmax, a, threshold, chain=dmax <= 3)

    slow = g.sub()
    bad_el = _nonfinite(slow, x5)
    bad = slow.op("Greater", slow.reduce("ReduceMax", slow.op("Cast", bad_el, to=_F), [2, 3]), slow.const(0.0))
    ax = slow.op("Abs", x5)
    normal = slow.op("GreaterOrEqual", ax, slow.const(2.0**-126))
    flushed = slow.op("Where", normal, x5, slow.op("Mul", x5, slow.const(0.0)))  # ±0 in the else slot
    az = slow.op("Where", bad_el, slow.const(0.0), slow.op("Abs", flushed))
    s_sbmax = slow.reduce("ReduceMax", az, [3])
    s_bmax = slow.reduce("ReduceMax", s_sbmax, [2])
    yq = _prime_quant(slow, flushed, s_sbmax, s_bmax, a, 2.0**-127, chain=False)
    slow_y = slow.op("Where", _keep_tiny(slow, x5, tiny), x5, slow.op("Where", bad, slow.const(np.nan), yq))

    y5 = g.if_(ok, fast, fast_y, slow, slow_y)
    if nsb * k == bs:
        return y5
    padded4 = g.op("Concat", dims["pre"], dims["nb"], g.i64(nsb * k), dims["post"], axis=0)
    y4p = g.op("Reshape", y5, padded4)
    return g.op("Slice", y4p, g.i64(0), g.i64(bs), g.i64(2))


# ------------------------------------------------------------------------------------ function


def _blocked(g: _Graph, x3: str, dims: dict[str, str], a: dict[str, Any], tiny: str) -> str:
    """Quantize ``x3`` (pre, Cp, post), Cp a multiple of block_size.

    Returns the result in (pre, Cp, post) element order but in whatever shape the last op made
    (the caller reshapes once, outside every If: a Reshape that is a branch output costs a copy).
    """
    shape4 = g.op("Concat", dims["pre"], dims["nb"], g.i64(a["block_size"]), dims["post"], axis=0)
    x4 = g.op("Reshape", x3, shape4)
    if a["bfp_method"] == "to_bfp":
        return _bfp_body(g, x4, a, tiny)
    return _prime_body(g, x4, dims, a, tiny)


def _function(a: dict[str, Any], opset: int, name: str) -> onnx.FunctionProto:
    g = _Graph(itertools.count(), opset)
    bs = a["block_size"]

    main = g
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

    # A tensor of < 2 elements is returned unchanged; the exact (slow) paths handle it.
    tiny = main.op("Less", main.op("Size", "x"), main.const(2, np.int64))
    exact = main.sub()
    exact_y = _blocked(exact, x3, dims, a, tiny)
    ragged = main.sub()
    pads = ragged.op("Concat", ragged.i64(0, 0, 0, 0), ragged.op("Sub", cp, chan), ragged.i64(0), axis=0)
    yp = _blocked(ragged, ragged.op("Pad", x3, pads), dims, a, tiny)
    yp3 = ragged.op("Reshape", yp, ragged.op("Concat", pre, cp, post, axis=0))
    ragged_y = ragged.op("Slice", yp3, ragged.i64(0), chan, ragged.i64(1))
    fits = main.op("Squeeze", main.op("Equal", chan, cp), main.i64(0))
    y3 = main.if_(fits, exact, exact_y, ragged, ragged_y)
    # float32 inside; for float32 inputs onnxruntime drops both Casts (unless y is a graph output).
    main.nodes.append(helper.make_node("CastLike", [main.op("Reshape", y3, shape), "x"], ["y"]))
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
