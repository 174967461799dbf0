"""ONNX realisation of block floating point (reference: :mod:`onnxptq.formats.bfp`).

One node ``onnxptq.BFPQuantizeDequantize__<variant>`` calling a model-local FunctionProto built
from standard ops only. The node carries the reference tool's attribute names (``bfp_method``,
``axis``, ``bit_width``, ``block_size``, ``rounding_mode``, ``sub_block_size``,
``sub_block_shift_bits``, ``convert_to_bfloat_before_bfp``, ``use_compiler_version_cpu_kernel``)
so a reader sees the format; the body is specialised to them (constants folded in), hence the
variant suffix: several variants can live in one model.

Why the body looks the way it does (measured on one core, 1×64×112×112 float32; a plain copy of
the tensor is ~0.12 ms on a quiet core and every extra full-tensor op costs about that much):

* **No Transpose, except for the last axis.** The tensor is viewed as ``(rows, bs, post)`` by
  Reshape (free in onnxruntime) and reduced over the block axis; scales broadcast back. A
  transpose to put the channel axis last doubled the cost in earlier measurements. But when the
  block axis *is* the last one (``post`` = 1), every broadcast and reduction runs over spans of
  ``bs`` elements, which onnxruntime loops over one at a time (~10x the cost per element): there
  the blocks are transposed to ``(1, bs, blocks)`` and back (6x faster on 40×6625 logits), unless
  the tensor is known to be small (:data:`LAST_AXIS_MIN_SIZE`: an SE block's ``[?, C, 1, 1]``).
* **Exponent math on block maxima only.** ``2^floor(log2 amax)`` is found exactly on the
  ``1/block_size``-sized tensor of maxima by a Veltkamp split in float64 (round
  ``amax·(3/4 + 2^-40)`` to one significant bit) — no Log/Pow, no compare/Where, no bit casts
  (ONNX has none below opset 26).
* **No full-tensor Where.** It is ~5–20× slower than an arithmetic op in onnxruntime, and it
  turns a -0 taken from its *then* input into +0; the formula for finite data uses none, the
  exact formulas keep every possible -0 in the *else* slot.
* **Masked formulas only when needed.** ``ReduceMax`` in onnxruntime does not propagate NaN
  reliably (a NaN can silently drop out of, or corrupt, a vectorised max), so one ``ReduceSum``
  over the tensor (which does propagate NaN/Inf) decides for ``to_bfp``: a finite sum takes
  the plain formulas, anything else the formulas that mask Inf/NaN (block maxima without them,
  Inf/NaN put back). ``to_bfp_prime`` has no masked formulas (:func:`_prime_scale`): a block
  holding Inf turns NaN through its maximum's power of two, one holding NaN through its sum of
  |x|, and only the subnormal flush keeps a small ``If`` (:func:`_prime_apply`; none on tensors
  known to be small, suffix ``f``). The plain path has no per-row machinery (the earlier Compress/ScatterND stand-in cost a full copy
  per call). For ``to_bfp`` the block maxima of |x| come from ReduceMax and ReduceMin of x (two
  reads; Abs would write a tensor).
* **Masked formulas in few nodes.** They are never taken on real activations, but every node of
  them costs onnxruntime session-creation time (~0.1 ms, an ``If`` ~0.2 ms) in every call, and
  that creation was most of a block format's quantize time. ``to_bfp`` branches only what
  differs, with one small ``If`` before one set of scale and rounding nodes: the block maxima,
  and a carrier the rounding multiplies, +0 on finite data and -Inf/NaN where the masked branch
  must put Inf/NaN back (:func:`_bfp_split`; it took a second ``If`` at the end). A branch-free
  ``to_bfp`` (masked maxima, Inf/NaN put back, no ``If``) cost +14 % a call (bench/RESULTS.md,
  branch blockif): its mask and put-back are three full passes each.
* **Ragged axis by shape.** ``build(shape=...)`` (the emitter passes the static shape from shape
  inference) tells the block axis's length: a body with no Pad/Slice (it divides, ``_p0``) or
  a constant Pad/Slice (``_p<k>``), or, when the whole axis is shorter than a block, blocks of
  that length (``_c<n>``, no padding); ``l`` marks a non-negative axis that is the last one.
  A known rank with an unknown axis length takes ``_r<rank>`` (no rank arithmetic, see
  :func:`onnxptq.onnx_ops.body.view_ranked`). ``to_bfp_prime`` on an axis of length n (a
  multiple of the sub-block size, not the last axis) takes ``_n<n>r<rank>``: views shaped from the input's own dims, and only the sub-block
  maxima padded (see :func:`_prime_static`); so does ``to_bfp`` on an axis that blocks tile where
  the shape values do not fold (:func:`_bfp_static`: the view's Reshape copies the other dims). Without a shape, the generic body always pads by a
  computed amount (0 when it divides) and slices back: two copies, no branch.
* **Node count.** In a model of many activations onnxruntime spends about 0.8 µs per executed
  node (PP-OCR cls MX9: 110 calls, 4 400 nodes per inference after this rework, 5 050 before),
  as much as a pass over 10k elements: a ``_...s`` body (its known dims hold >= 2 elements) has
  no size ``If``, an ``_f32`` body no Cast pair, and shape values only the masked branch needs
  are built inside it.
* **Shape values folded.** Where shape inference knows every dim of the input but one (a
  dynamic batch), the view's shape arithmetic (``Shape``, ``ReduceProd``, the ``Concat`` of a
  ``Reshape`` target) is computed when the body is built, the unknown dim becoming the targets'
  ``-1`` (:class:`onnxptq.onnx_ops.body.Body`, name suffix ``_k<dims>``): none of it is created
  per session or run per call. ``to_bfp`` on a tensor known to be small has no ``If`` at all
  (:func:`_bfp_flat`, view suffix ``f``).
* **Session creation.** Loading must stay cheap with hundreds of calls (one per activation):
  every node costs onnxruntime time when it inlines the function and optimises the graph (so
  constants are shared and the node count is kept low), and its allocation planner scans all
  freed buffers for every new tensor of known rank — quadratic when the main graph collects
  never-reused tensors from every call. So the body sits in an ``If`` on the element count
  (a tensor of < 2 elements is returned unchanged), whose subgraphs get their own planners, and
  shape arithmetic is built once at the top level for every branch. 80 chained calls load in
  about 1 s (was 10–20 s before the If).
* Rounding: mode 2 is ``Round`` (half to even); for ``to_bfp`` it also reproduces the
  reference's ``py3_round`` zero sign (v in [-0.5, 0) → +0, v = -0 stays -0). Modes 0 and 1 are
  ``Round`` plus an exact tie correction (``v - Round(v)`` is exact), a few more passes.
"""

from __future__ import annotations

import functools

from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

from ..formats.base import DOMAIN, DOMAIN_VERSION, QDQNodes
from ..formats.bfp import normalize_attrs
from .body import (
    HALVES_MIN_SIZE, LAST_AXIS_MIN_SIZE, Body, foldable_shape, axis_length, known_dims, halves_shapes, known_dim, known_size, masked_neg_abs, max_by_halves,
    pow2_floor as _pow2_floor, put_back_nonfinite, trailing_size,
    SplitAxis, ones_after, small, view_generic, view_last as _view_last, view_ranked, view_static,
)

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


def function_name(attrs: dict[str, Any], opset: int, view: str | None = None) -> str:
    """The variant name: every attribute that shapes the body, the body's opset, and the view of
    the block axis the body is specialised to (see :func:`variant`), if any."""
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
    name += f"_o{opset}"
    view, _, dims = (view or "").partition("_k")
    if dims:  # the input's dims, the body's shape values folded (see onnx_ops.body.Body)
        name += f"_k{dims}"
    return f"{name}_{view}" if view else name


# ------------------------------------------------------------------------------- building blocks


def _round(g: Body, v: str, mode: int, py3_zero: bool, zero: str, carrier: str | None = None) -> str:
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

    ``carrier``: a runtime tensor read where the formulas above read the constant 0 of ``c``
    (mode 2 with ``py3_zero``: the factor of ``(v + 0)·0``; modes 0 and 1: the first term of
    ``0 - …``), so that ``c`` can carry ±Inf/NaN into the codes (:func:`_bfp_split`): +0 in
    every finite position gives the formulas above, bit for bit. None: the constant.
    """
    q = g.op("Round", v)
    nought = carrier if carrier is not None else g.wide(0.0)
    if mode == 2:
        if not py3_zero:
            return q
        c = g.op("Mul", g.op("Add", v, zero), nought)
        return g.op("Sub", q, c)
    t = g.op("Sub", v, q)
    if mode == 1:
        hit = g.op("Cast", g.op("Equal", t, g.wide(0.5)), to=_F)
        return g.op("Sub", q, g.op("Sub", nought, hit))
    sign = g.op("Sign", v)
    hit = g.op("Cast", g.op("Equal", g.op("Mul", t, sign), g.wide(0.5)), to=_F)
    return g.op("Sub", q, g.op("Sub", nought, g.op("Mul", hit, sign)))


def _wide_zero(g: Body, total: str) -> str:
    """A runtime +0 shaped ``[1] * rank`` from the tensor's finite sum ``total`` (rank 0): the
    ``py3_round`` zero sign of :func:`_round` adds it to the full view, and a rank-0 operand
    there is onnxruntime's element-by-element broadcast when the view's last dim is 1
    (:meth:`onnxptq.onnx_ops.body.Body.wide`; 17 ms on a (84000, 8, 1) view, against ~0.3)."""
    t = g.op("Reshape", total, g.i64(*[1] * g.root.rank))
    return g.op("Sub", t, t)


def _nonfinite(g: Body, x: str) -> str:
    return g.op("Or", g.op("IsNaN", x), g.op("IsInf", x))


# ------------------------------------------------------------------------------------ to_bfp


def _bfp_quant(g: Body, xr: str, amax: str, smax: str, a: dict[str, Any], zero: str | None = None) -> str:
    """to_bfp with the compiler kernel on ``xr`` (rows, bs, post) given the block maxima of |x|
    clamped below at 2^-127 and the maxima of x over its finite elements; finite elements come
    out right. ``zero``: a runtime +0 shaped ``[1] * rank`` (:func:`_wide_zero`), if the caller has one.
    (to_bfp without the compiler kernel: :func:`_bfp_split`, :func:`_bfp_flat`.)"""
    m = a["bit_width"] - 9
    s = _pow2_floor(g, amax, 2.0 ** (1 - m))
    if zero is None:
        zero = g.op("Sub", s, s)
    rm = a["rounding_mode"]
    # The largest rounded code of a block is R(max(x)/s) (R is monotone); if it reaches 2^m
    # the block's exponent goes up once. The clamp of that kernel can never bind afterwards.
    top = _round(g, g.op("Div", smax, s), rm, True, zero)
    s = g.op("Where", g.op("GreaterOrEqual", top, g.wide(2.0**m)), g.op("Mul", s, g.wide(2.0)), s)
    q = _round(g, g.op("Div", xr, s), rm, True, zero)
    return g.op("Mul", q, s)


def _bfp_exact(g: Body, xr: str, a: dict[str, Any]) -> str:
    """to_bfp with the compiler kernel on any ``xr`` (rows, bs, post): block maxima without Inf/NaN,
    which pass through."""
    special = _nonfinite(g, xr)
    xz = g.op("Where", special, g.wide(0.0), xr)
    amax = g.op("Max", g.reduce("ReduceMax", g.op("Abs", xz), [1]), g.wide(2.0**-127))
    y = _bfp_quant(g, xr, amax, g.reduce("ReduceMax", xz, [1]), a)
    # A result that may be -0 sits in Where's else slot: onnxruntime's Where turns a -0 taken
    # from its then slot into +0.
    return g.op("Where", special, xr, y)


# ------------------------------------------------------------------------------ to_bfp_prime


def _prime_scale(g: Body, sbmax: str, bmax: str, bsum: str, a: dict[str, Any]) -> str:
    """The sub-block scales (shaped like ``sbmax``) from the sub-block and block maxima of |x|
    and the blocks' sums of |x| ``bsum`` (shaped like ``bmax``), exact on every input: NaN
    throughout a block that holds Inf or NaN, the reference's scale for every sub-block holding
    a normal value, a positive one for the rest (zeros and subnormals, which
    :func:`_prime_apply` flushes).

    The sub-block scale is ``2^(max(Ej, Es-D) - 127 + 1 - m)`` (D = 2^d - 1), from ``Ps``, the
    block's power of two (:func:`onnxptq.onnx_ops.body.pow2_floor` of its maximum clamped below
    at 2^-127): with ``chain`` (:func:`_prime_chain`) the shift is found by comparing the
    sub-block maximum with ``Ps·2^-i`` — with ``Pj = Ps·2^-j`` the sub-block's power of two,
    the count of hits over ``i < D`` is ``D - j`` when ``j < D`` and 0 otherwise, so
    ``Ps·2^(-D+1-m)`` doubled that many times is ``max(Pj, Ps·2^-D)·2^(1-m)`` — otherwise by
    taking the sub-block exponents too. A subnormal sub-block maximum may count a hit the
    reference (exponent 0) would not, but such a sub-block holds only values that are flushed.

    Inf and NaN need no branch: a block maximum of +Inf makes ``Ps`` NaN (``Inf - (Inf - Inf)``
    in the split), and every scale of the block after it. ``ReduceMax`` in onnxruntime drops a
    NaN unless it comes first, so NaN is found by the block's sum of |x| (a sum of non-negative
    values is NaN exactly when one of them is; an overflow gives +Inf, never NaN): ``-sum`` is
    NaN there and at most 0 elsewhere (-Inf on an overflow), so as a third operand of the clamp
    ``Max(max, 2^-127, -sum)`` it changes nothing but a NaN block, whose maximum it makes NaN:
    onnxruntime's elementwise ``Max`` propagates NaN from any operand (since 1.14; the minimum
    supported is 1.20), unlike ``ReduceMax``. One ``Neg`` for the ``0 / (sum + 1)`` added to ``Ps``
    before (``Add``, ``Div``, ``Add``: two nodes less a call, the same bits; blockq18). This replaced an
    ``If`` on the tensor's sum whose masked branch (~25 nodes) onnxruntime built, optimised and
    planned in every call of every session (bench/RESULTS.md, branch bodyif).
    """
    m = a["bit_width"] - 9
    dmax = (1 << a["sub_block_shift_bits"]) - 1
    ps = _pow2_floor(g, g.op("Max", bmax, g.wide(2.0**-127), g.op("Neg", bsum)))
    if _prime_chain(a):
        # shift = D - #{i < D : sbmax >= Ps·2^-i}; each hit doubles the scale (no Where).
        s = g.op("Mul", ps, g.wide(2.0 ** (-dmax + 1 - m)))
        for i in range(dmax):
            bound = ps if i == 0 else g.op("Mul", ps, g.wide(2.0**-i))
            hit = g.op("Cast", g.op("GreaterOrEqual", sbmax, bound), to=_F)
            s = g.op("Mul", s, g.op("Add", hit, g.wide(1.0)))
        return s
    pj = _pow2_floor(g, g.op("Max", sbmax, g.wide(2.0**-127)))
    base = g.op("Max", pj, g.op("Mul", ps, g.wide(2.0**-dmax)))
    # Max propagates a poisoned block's NaN Ps (see above) into its every sub-block's scale.
    return g.op("Mul", base, g.wide(2.0 ** (1 - m)))


def _prime_apply(g: Body, x: str, az: str, s: str, bmax: str, a: dict[str, Any], flat: bool = False) -> str:
    """``x`` rounded to codes of its (broadcast) sub-block scales ``s``, within ±(2^m - 1), its
    subnormals flushed to zeros of their sign (``az`` = |x|, ``bmax`` the block maxima).

    The flush is the one part of the reference that needs a per-element test, and only in a
    block whose maximum is below T (:func:`_prime_threshold`; elsewhere every scale is at least
    2^-124, so a subnormal's code rounds to ±0 by itself). Written without a branch it costs
    three full passes per call (compare, Cast, Mul: +13-20 % on conv-net activations), so a
    small ``If`` on "some block is below T" holds just the division, of x or of the flushed x:
    five nodes for onnxruntime to build per call, where the masked branch it replaces had ~25.
    ``flat`` (a tensor known to be small, :data:`FLAT_MAX_SIZE`): the flush without the ``If``.
    """
    qmax = float(2 ** (a["bit_width"] - 9) - 1)
    if flat:
        v = g.op("Div", g.op("Mul", x, g.op("Cast", g.op("GreaterOrEqual", az, g.wide(2.0**-126)), to=_F)), s)
        return g.op("Mul", _round(g, g.op("Clip", v, g.const(-qmax), g.const(qmax)), a["rounding_mode"], False, ""), s)
    # "Some block has 0 < max < T", without a Where on the block maxima (onnxruntime's CPU Where
    # costs several elementwise passes: MX9 per call 0.93-1.00x without it, bench/RESULTS.md, branch
    # blockspeed): ThresholdedRelu(-max, alpha=-T) keeps -max where max < T (-0 for an all-zero
    # block, which needs no flush) and is 0 elsewhere, NaN included; a negative minimum is a hit.
    low = g.op("ThresholdedRelu", g.op("Neg", bmax), alpha=-_prime_threshold(a))
    tiny = g.op("Less", g.reduce("ReduceMin", low, None, keepdims=0), g.const(0.0))  # False when empty (+inf)
    plain, flush = g.branch(), g.branch()
    v_plain = plain.op("Div", x, s)
    normal = flush.op("Cast", flush.op("GreaterOrEqual", az, g.wide(2.0**-126)), to=_F)
    v_flush = flush.op("Div", flush.op("Mul", x, normal), s)  # x·0 keeps the sign of x
    v = g.op("If", tiny, then_branch=flush.graph(v_flush, g.fresh("flush")), else_branch=plain.graph(v_plain, g.fresh("plain")))
    v = g.op("Clip", v, g.const(-qmax), g.const(qmax))
    return g.op("Mul", _round(g, v, a["rounding_mode"], False, ""), s)


# --------------------------------------------------------------------------------- fast paths


def _prime_view(g: Body, xr: str, post: str | None, a: dict[str, Any]) -> tuple[str, Any]:
    """(rows, nsb, k, post) sub-block view of ``xr`` (rows, bs, post), and its inverse."""
    bs, k = a["block_size"], min(a["sub_block_size"], a["block_size"])
    nsb = -(-bs // k)
    xk = xr
    if nsb * k != bs:  # a shorter last sub-block: zero-pad every block (zeros never win a max)
        xk = g.op("Pad", xr, g.i64(0, 0, 0, 0, nsb * k - bs, 0))
    # post None: the (1, bs, blocks) view of :func:`_view_last`.
    x5 = g.op("Reshape", xk, g.i64(1, nsb, k, -1) if post is None else g.shared("Concat", g.i64(-1, nsb, k), post, axis=0))
    if nsb * k == bs:
        return x5, lambda y: y

    def restore(y5: str) -> str:
        yk = g.op("Reshape", y5, g.i64(1, nsb * k, -1) if post is None else g.shared("Concat", g.i64(-1, nsb * k), post, axis=0))
        return g.op("Slice", yk, g.i64(0), g.i64(bs), g.i64(1))

    return x5, restore


def variant(a: dict[str, Any], shape: Any, observed: int | None = None) -> str | None:
    """The body variant for an input of ``shape``: ``"n<n>r<rank>"`` (to_bfp_prime, a block axis
    of known length n, a multiple of the sub-block size, that is not the last one, in a tensor of
    known rank: see :func:`_prime_static`; to_bfp's split body where the shape values do not
    fold, a block axis that blocks tile: see :func:`_bfp_static`), ``"p<k>"`` (block axis of known length, padded
    by k), ``"c<n>"`` (the whole axis, n < block_size elements, is one block: no padding), either
    with an ``l`` when a non-negative axis is the last one (see :func:`_view_last`), ``"r<rank>"``
    (``q<post>``) when only the rank is known (see :func:`_ranked_variant`), or None (the
    generic body: any shape, the axis padded by a computed amount and sliced back). A trailing
    ``s`` marks a shape whose known dims hold at least 2 elements: such a tensor is empty or
    quantized, never returned unchanged, so the body needs no ``If`` on its size; an ``f``
    before it, a to_bfp_prime body for a tensor of known dims below :data:`FLAT_MAX_SIZE`
    elements, which flushes subnormals with no ``If``, or a to_bfp one (:func:`_bfp_flat`);
    ``observed``: the most elements the tensor held on the calibration feeds (a hint, see
    :func:`onnxptq.onnx_ops.body.small`), which makes those bodies branch-free where the declared
    dims do not tell the size."""
    n = axis_length(shape, a["axis"])
    if n is None:
        return _ranked_variant(a, shape)
    bs = a["block_size"]
    k = min(a["sub_block_size"], bs)
    # A non-negative axis that is the last one takes the transposed view of axis -1 (suffix l),
    # and so does an axis whose later dims are all 1 (see :func:`onnxptq.onnx_ops.body.ones_after`),
    # unless the tensor is known to be small (see :data:`LAST_AXIS_MIN_SIZE`).
    last = "l" if ((a["axis"] == len(list(shape)) - 1 or (a["axis"] != -1 and ones_after(shape, a["axis"])))
                   and not _small_for_transpose(shape)) else ""
    # Never empty-or-single: the body needs no guard for tensors of < 2 elements (suffix s).
    sized = "s" if known_size(shape) >= 2 else ""
    if a["bfp_method"] == "to_bfp_prime" and small(shape, observed, FLAT_MAX_SIZE, FLAT_SEEN_MAX_SIZE):
        sized = "f" + sized  # the subnormal flush without a branch (see :data:`FLAT_MAX_SIZE`)
    elif a["bfp_method"] == "to_bfp" and not a["use_compiler_version_cpu_kernel"] and _to_bfp_flat(shape, observed):
        sized = "f" + sized  # no If (see :func:`_bfp_flat`)
    rank = len(list(shape))
    big = known_size(shape) >= HALVES_MIN_SIZE
    transposed = bool(last) or a["axis"] == -1
    if a["bfp_method"] == "to_bfp_prime" and not last and a["axis"] != -1 and n > 0 and n % k == 0:
        # halves where the axis is one block (see :func:`_prime_static`)
        h = "h" if big and n <= bs and (n // k) % 2 == 0 else ""
        return f"n{n}r{rank}{h}{sized}"  # see :func:`_prime_static`
    if _bfp_copied(a, shape, n, bool(last), big, sized):
        return f"n{n}r{rank}{sized}"  # see :func:`_bfp_static`
    if 0 < n < bs:
        # The whole axis is one block; to_bfp_prime pads its last sub-block (zeros never win a
        # maximum), which is what the reference's zero-padded block of bs amounts to.
        return f"c{n}{last}{_halves(a, n, True, big)}{sized}"
    return f"p{(-n) % bs}{last}{_halves(a, bs, transposed, big)}{sized}"


def _small_for_transpose(shape: Any) -> bool:
    """Whether ``shape`` is known to hold fewer than :data:`LAST_AXIS_MIN_SIZE` elements (per
    image, for an image batch): every dim known, or every dim but the first of a rank-4+ tensor
    (an NCHW batch: an SE block's ``[?, C, 1, 1]``). A rank-3 ``[?, C, 1]``'s first dim is often
    time (``[21000, 32, 1]``, the case the transposed view was made for): it keeps the view."""
    dims = [known_dim(d) for d in shape]
    batch = len(dims) >= 4 and dims[0] is None
    return all(d is not None for d in dims[1 if batch else 0:]) and known_size(shape) < LAST_AXIS_MIN_SIZE


def _bfp_copied(a: dict[str, Any], shape: Any, n: int, last: bool, big: bool, sized: str) -> bool:
    """Whether a to_bfp body takes the view of :func:`_bfp_static`: the split body (no compiler
    kernel, not known small), a block axis of known length ``n`` that blocks tile (or one block
    shorter than ``block_size``) and is not viewed transposed, no halves (``big``), a sized body
    (its input keeps ``x``'s shape), and shape values that do not fold at build time (two or more
    unknown dims: where they fold, the ``(rows, bs, post)`` view runs no shape node either)."""
    bs = a["block_size"]
    return (a["bfp_method"] == "to_bfp" and not a["use_compiler_version_cpu_kernel"] and not last
            and a["axis"] != -1 and not big and sized in ("s", "fs") and foldable_shape(shape) is None
            and n > 0 and (n % bs == 0 or n < bs))


def _to_bfp_flat(shape: Any, observed: int | None = None) -> bool:
    """Whether a to_bfp body for ``shape`` (``observed``: the calibration's hint) is branch-free (:func:`_bfp_flat`)."""
    return small(shape, observed, TO_BFP_FLAT_MAX_SIZE, TO_BFP_FLAT_SEEN_MAX_SIZE)


def _halves(a: dict[str, Any], bs: int, one: bool, big: bool) -> str:
    """``"h"`` when a view of blocks of ``bs`` takes its block maxima by halves
    (:func:`onnxptq.onnx_ops.body.max_by_halves`): a tensor of at least
    :data:`onnxptq.onnx_ops.body.HALVES_MIN_SIZE` elements, and for to_bfp an even block that is
    one row of blocks (``one``: the transposed view or a whole axis shorter than a block) or 16+
    long (blocks of 8 in several rows measured 2x slower); for to_bfp_prime an even number of
    sub-blocks in one row."""
    if not big:
        return ""
    if a["bfp_method"] == "to_bfp":
        return "h" if not a["use_compiler_version_cpu_kernel"] and bs % 2 == 0 and (one or bs >= 16) else ""
    nsb = -(-bs // min(a["sub_block_size"], bs))
    return "h" if one and nsb % 2 == 0 else ""


def _ranked_variant(a: dict[str, Any], shape: Any) -> str | None:
    """``"r<rank>"`` (``q<post>`` when the dims after the axis are known) for a tensor of known
    rank whose block-axis length is unknown (a sequence axis): the view skips the generic body's
    rank arithmetic (see :func:`onnxptq.onnx_ops.body.view_ranked`); None when the rank is
    unknown, 1, or the axis out of range (the generic body)."""
    if shape is None:
        return None
    rank = len(list(shape))
    if rank < 2 or not -rank <= a["axis"] < rank:
        return None
    post = trailing_size(shape, a["axis"])
    return f"r{rank}" + ("" if post is None else f"q{post}")


def _view(g: Body, xf: str, a: dict[str, Any], view: str | None) -> tuple[str, str, Any, dict[str, Any]]:
    """The (rows, bs, post) view for ``view`` (see :func:`variant`), its inverse, and the
    attributes the formulas see (a ``"c<n>"`` view has blocks of n)."""
    bs = a["block_size"]
    spec = (view or "").rstrip("s")
    if spec.startswith("r"):  # known rank, unknown axis length (see :func:`_ranked_variant`)
        rank, _, post = spec[1:].partition("q")
        axis = a["axis"] % int(rank)
        if axis == int(rank) - 1:
            return (*_view_last(g, xf, bs, None), a)
        return (*view_ranked(g, xf, axis, bs, int(post) if post else None), a)
    if a["axis"] == -1 or spec.endswith("l"):
        # the axis's own length: the last dim, or the axis itself when the dims after it are 1s
        axis = a["axis"]
        if spec.startswith("c"):
            a = dict(a, block_size=int(spec[1:].rstrip("l")))
            return (*_view_last(g, xf, a["block_size"], 0, axis), a)
        return (*_view_last(g, xf, bs, int(spec[1:].rstrip("l")) if spec else None, axis), a)
    if not spec:
        return (*view_generic(g, xf, a["axis"], bs), a)
    if spec.startswith("c"):
        a = dict(a, block_size=int(spec[1:]))
        return (*view_static(g, xf, a["axis"], a["block_size"], 0), a)
    return (*view_static(g, xf, a["axis"], bs, int(spec[1:])), a)


def _quantized(g: Body, xf: str, a: dict[str, Any], view: str | None, total: str) -> str:
    """The quantized ``xf`` (a tensor of >= 2 elements, or an empty one), built into ``g``.

    The blocked view, the block maxima, then for to_bfp an ``If``: the plain formulas when the
    tensor's sum is finite, otherwise the formulas that mask Inf/NaN — never taken on
    real activations, written for few nodes (session creation), not speed. ``total``: that sum
    for the compiler kernel's body ("" otherwise: the split body takes it over its view,
    :func:`_bfp_split`). to_bfp_prime needs no sum: its formulas are exact on every input
    (:func:`_prime_scale`, :func:`_prime_apply`). ``n<n>r<rank>`` views go to :func:`_prime_static`."""
    spec = (view or "").rstrip("s")
    flat = spec.endswith("f")  # to_bfp_prime with no If at all (see :data:`FLAT_MAX_SIZE`)
    spec = spec.rstrip("f")
    halve = spec.endswith("h")  # block maxima by halves (see :func:`_halves`)
    spec = spec.rstrip("h")
    # Every view tensor and block-maxima tensor of the formulas has this rank, so their
    # elementwise constants are shaped [1] * rank (:meth:`onnxptq.onnx_ops.body.Body.wide`):
    # onnxruntime broadcasts a tensor whose last dim is 1 against a rank-0 operand one element
    # at a time (a (84000, 8, 1) view times a scalar: 17 ms, bench/bfp_body_profile.py).
    if spec.startswith("n"):
        n, rank = (int(v) for v in spec[1:].split("r"))
        g.root.rank = rank + 1  # (lead..., n/k, k, trail...)
        if a["bfp_method"] == "to_bfp":
            return _bfp_static(g, xf, a, n, rank, flat)
        return _prime_static(g, xf, a, n, rank, halve, flat, (view or "").endswith("s"))
    g.root.rank = 3 if a["bfp_method"] == "to_bfp" else 4  # (rows, bs, post) or (rows, nsb, k, post)
    xr, post, restore, a = _view(g, xf, a, spec or None)
    quant, exact = g.branch(), g.branch()
    if a["bfp_method"] == "to_bfp" and not a["use_compiler_version_cpu_kernel"]:
        halves = halves_shapes(g, a["block_size"], post) if halve else None
        if flat:
            return restore(_bfp_flat(g, xr, a, halves))
        return restore(_bfp_split(g, xr, a, halves))
    if a["bfp_method"] == "to_bfp":  # the compiler kernel's body (the others returned above)
        finite = g.op("Less", g.op("Abs", total), g.const(np.inf))
        zero = _wide_zero(g, total)
        # |x| maxima from the maxima and minima of x: two reads, where Abs would write a tensor.
        smax = g.reduce("ReduceMax", xr, [1])
        amax = g.op("Max", smax, g.op("Neg", g.reduce("ReduceMin", xr, [1])), g.wide(2.0**-127))
        quant_y = _bfp_quant(quant, xr, amax, smax, a, zero)
        exact_y = _bfp_exact(exact, xr, a)
        yr = g.op("If", finite, then_branch=quant.graph(quant_y, g.fresh("quant")),
                  else_branch=exact.graph(exact_y, g.fresh("masked")))
    else:
        x5, restore5 = _prime_view(g, xr, post, a)
        az = g.op("Abs", x5)
        sbmax = g.reduce("ReduceMax", az, [2])
        k = min(a["sub_block_size"], a["block_size"])
        nsb = -(-a["block_size"] // k)
        if not halve:
            bmax = g.reduce("ReduceMax", sbmax, [1])
            bsum = g.reduce("ReduceSum", az, [1, 2])
        else:  # the block maxima of the sub-block maxima by halves (see onnx_ops.body.max_by_halves)
            if post is None:  # (1, nsb, 1, blocks): the transposed view
                first, second, whole = g.i64(2, nsb // 2, 1, -1), g.i64(1, 2, 1, -1), g.i64(2, nsb * k // 2, 1, -1)
            else:
                first = g.shared("Concat", g.i64(-1, nsb // 2, 1), post, axis=0)
                second = g.shared("Concat", g.i64(-1, 2, 1), post, axis=0)
                whole = g.shared("Concat", g.i64(-1, nsb * k // 2, 1), post, axis=0)
            bmax = max_by_halves(g, sbmax, first, second, lambda b, t: b.reduce("ReduceMax", t, [1]))
            # the blocks' sums of |x| by halves too (their reduction over the leading axes is as slow)
            bsum = max_by_halves(g, az, whole, second, lambda b, t: b.reduce("ReduceSum", t, [1]), merge="Add")
        s = _prime_scale(g, sbmax, bmax, bsum, a)
        yr = restore5(_prime_apply(g, x5, az, s, bmax, a, flat))
    return restore(yr)


def _bfp_flat(g: Body, xr: str, a: dict[str, Any], halves: tuple[str, str] | None = None, axis: int = 1) -> str:
    """to_bfp (without the compiler kernel) on ``xr`` (rows, bs, post), exact on every input with
    no ``If`` and no sum over the tensor: the body of a tensor known to be small (view suffix
    ``f``, :data:`TO_BFP_FLAT_MAX_SIZE`).

    :func:`_bfp_split` picks plain or masked block maxima and the last node by two ``If`` nodes
    on the tensor's sum; each ``If`` holds two subgraphs onnxruntime builds, optimises and plans
    in every session (the split body's creation is ~2x this one's) and runs with their own
    frames in every call. Here, as in the MX INT8 bodies (``onnx_ops.mx._fake_quantize_flat``),
    the block maxima are ``-ReduceMin`` of ``-|x|`` with ±Inf/NaN masked to 0
    (:func:`onnxptq.onnx_ops.body.masked_neg_abs`), and ±Inf and NaN, which the ``Clip`` of the
    codes saturates, are put back at the end (:func:`onnxptq.onnx_ops.body.put_back_nonfinite`).
    Those are six full passes more than the plain formulas' three reads, so larger tensors keep
    the split body. Finite elements see the masked formulas' maxima and the same rounding nodes,
    hence the same bits. The runtime +0 of the ``py3_round`` zero sign (see :func:`_round`) comes
    from the block minima (finite: ``r - r = +0``), a scalar. ``axis``: the view's block axis (2
    and more: :func:`_bfp_static`'s view, no halves)."""
    m = masked_neg_abs(g, xr)
    if halves is None:
        low = g.reduce("ReduceMin", m, [axis])
    else:
        low = max_by_halves(g, m, *halves, lambda b, t: b.reduce("ReduceMin", t, [1]), merge="Min")
    amax = g.op("Max", g.op("Neg", low), g.wide(2.0**-127))
    # keepdims: a [1, 1, 1] +0, not a scalar (see :func:`_wide_zero`)
    r = g.op("ReduceMin", low, keepdims=1)  # finite (masked maxima); an empty tensor's +inf makes NaN, read by no element
    zero = g.op("Sub", r, r)
    m_bits = a["bit_width"] - 9
    s = _pow2_floor(g, amax, 2.0 ** (1 - m_bits))
    qmax = float(2**m_bits - 1)
    q = _round(g, g.op("Clip", g.op("Div", xr, s), g.const(-qmax), g.const(qmax)), a["rounding_mode"], True, zero)
    return put_back_nonfinite(g, g.op("Mul", q, s), xr)


def _bfp_split(g: Body, xr: str, a: dict[str, Any], halves: tuple[str, str] | None = None, axis: int = 1) -> str:
    """to_bfp (without the compiler kernel) on ``xr`` (rows, bs, post), the plain/masked choice
    made by one small ``If`` on the finiteness of the tensor's sum, before one set of scale and
    rounding nodes, instead of one ``If`` holding :func:`_bfp_quant` twice.

    Creating a session costs onnxruntime ~0.1 ms per inlined node for every call of every
    quantizer, each ``If`` about as much as a dozen nodes more (a session state, kernels and an
    allocation plan per branch), and the masked formulas (Inf/NaN: never taken on real
    activations) were more than half of each body's nodes. They differ from the plain ones in
    two places: the block maxima (plain: of x and -x, with a runtime +0 from the sum; masked: of
    |x| with Inf/NaN replaced by 0, +0 from those maxima) and where Inf/NaN are put back. Both
    are decided by the one ``If``: besides the maxima and the +0, its branches return the
    *carrier* ``w`` that the rounding's zero-sign correction multiplies (see :func:`_round`):
    plain, a runtime +0 shaped ``[1, 1, 1]`` (what the constant 0 was: the plain path runs the
    same nodes as before, one ``If`` fewer); masked, the masked |x| (Inf/NaN made 0, as
    for the maxima) less |x|: +0 where x is finite, -Inf where it is ±Inf, NaN where it is NaN.
    A non-finite x has the saturated code ``±qmax``, so ``c = (±qmax + 0)·(-Inf) = ∓Inf`` and
    ``q - c = ±Inf``, which the scale (finite, > 0) keeps; NaN stays NaN. Rounding modes 0 and 1
    subtract the carrier from their tie correction instead (``c = w - hit``), so there it is the
    masked x less x, ∓Inf at ±Inf. Finite elements see ``w = +0``: the same nodes on the same values as the two-
    ``If`` body this replaced (the second ``If`` put Inf/NaN back with ``Where``), hence the same
    bits (payloads of NaN aside). Each branch computes its outputs (onnxruntime copies a branch
    output that is an outer-scope value).

    ``halves``: the Reshape targets of :func:`onnxptq.onnx_ops.body.halves_shapes` (blocks of an
    even length): the plain maxima are taken in two stages (:func:`onnxptq.onnx_ops.body.max_by_halves`,
    several times faster in onnxruntime where the view has one row), the same values.

    The sum is taken over the view with its dims kept, ``[1, 1, 1]``: the plain branch's runtime
    +0 (the ``py3_round`` zero sign, see :func:`_round`) is then ``total - total`` in that shape
    directly, one node where :func:`_wide_zero` reshapes a rank-0 sum first (the ``If`` reads its
    one-element condition in any shape). The zero padding of a ragged view adds nothing to it.
    ``axis``: the view's block axis (2 and more: :func:`_bfp_static`'s view, no halves)."""
    total = g.op("ReduceSum", xr, keepdims=1)
    finite = g.op("Less", g.op("Abs", total), g.const(np.inf))
    plain, masked = g.branch(), g.branch()

    def int_max(b: Body, t: str, floor: bool = False) -> str:
        # |x| maxima from the maxima and minima of x: two reads, where Abs would write a tensor.
        hi, lo = b.reduce("ReduceMax", t, [axis]), b.op("Neg", b.reduce("ReduceMin", t, [axis]))
        return b.op("Max", hi, lo, *([b.wide(2.0**-127)] if floor else []))

    if halves is None:  # one Max with the floor (the body as it was before the halves)
        amax_plain = int_max(plain, xr, floor=True)
    else:
        amax_plain = plain.op("Max", max_by_halves(plain, xr, *halves, int_max), plain.wide(2.0**-127))
    zero_plain = plain.op("Sub", total, total)  # finite sum: +0, shaped [1, 1, 1]
    carrier_plain = plain.op("Sub", total, total)  # the same +0 (a branch's outputs are distinct values)
    # Inf and NaN masked to 0 (Less is false for both; 0 never raises a maximum), and the carrier
    # as that masked tensor less the unmasked one: +0 where finite, -Inf (mode 2, of |x|) or ∓Inf
    # (modes 0 and 1, of x) at ±Inf, NaN at NaN.
    ax = masked.op("Abs", xr)
    ok = masked.op("Less", ax, g.const(np.inf))
    if a["rounding_mode"] == 2:
        am = masked.op("Where", ok, ax, masked.wide(0.0))
        carrier_masked = masked.op("Sub", am, ax)
    else:
        xm = masked.op("Where", ok, xr, masked.wide(0.0))
        am = masked.op("Abs", xm)
        carrier_masked = masked.op("Sub", xm, xr)
    amax_masked = masked.op("Max", masked.reduce("ReduceMax", am, [axis]), masked.wide(2.0**-127))
    zero_masked = masked.op("Sub", amax_masked, amax_masked)  # finite maxima: +0
    amax, zero, carrier = g.fresh("amax"), g.fresh("zero"), g.fresh("carrier")
    f = TensorProto.FLOAT
    outs = (amax_plain, zero_plain, carrier_plain), (amax_masked, zero_masked, carrier_masked)
    g.nodes.append(helper.make_node(
        "If", [finite], [amax, zero, carrier],
        then_branch=helper.make_graph(plain.nodes, g.fresh("plain_max"), [],
                                      [helper.make_tensor_value_info(o, f, None) for o in outs[0]]),
        else_branch=helper.make_graph(masked.nodes, g.fresh("masked_max"), [],
                                      [helper.make_tensor_value_info(o, f, None) for o in outs[1]])))
    m = a["bit_width"] - 9
    s = _pow2_floor(g, amax, 2.0 ** (1 - m))
    qmax = float(2**m - 1)
    q = _round(g, g.op("Clip", g.op("Div", xr, s), g.const(-qmax), g.const(qmax)), a["rounding_mode"], True, zero,
               carrier)
    return g.op("Mul", q, s)


#: Largest known size (elements, every dim known) below which a to_bfp_prime body flushes
#: subnormals without an ``If`` (view suffix ``f``): on such tensors the three passes of the flush
#: cost less at run time than the ``If`` (1-thread, MX9, median of 80 interleaved runs: 1x8x12x48
#: 0.91x, 1x32x6x24 0.95x, 1x64x6x24 0.98x the small-``If`` body; 1x32x12x48 1.015x, 1x16x24x96
#: 1.01x; 1x48x96x96 1.16x, bench/RESULTS.md, branch bodyif), and they save its creation. The same
#: line as the MX INT8 bodies' (``onnx_ops.mx.BRANCHED_INT_MIN_SIZE``).
FLAT_MAX_SIZE = HALVES_MIN_SIZE
#: Largest known size (elements, every dim known) below which a to_bfp body is branch-free
#: (:func:`_bfp_flat`, view suffix ``f``).
TO_BFP_FLAT_MAX_SIZE = HALVES_MIN_SIZE
#: The same lines for a tensor whose declared dims do not tell its size but that calibration saw
#: hold fewer elements (:func:`onnxptq.onnx_ops.body.small`). Measured with every dim but the
#: channels unknown (bench/block_size_rule.py --unknown; bench/RESULTS.md, blockhint15): MX9's
#: flush without its ``If`` ran 0.93-1.09x the branched body's time per call up to 37 k elements and
#: 1.16x at 74 k, and saved 0.3-0.8 ms of creation a call; to_bfp's branch-free body (six passes
#: more against one ``If``) ran 1.08x at 18 k and 1.16-1.26x at 37 k: its line stays.
FLAT_SEEN_MAX_SIZE = 2 * HALVES_MIN_SIZE
TO_BFP_FLAT_SEEN_MAX_SIZE = HALVES_MIN_SIZE


def _prime_threshold(a: dict[str, Any]) -> float:
    """T: blocks whose |max| is at least T need no subnormal flush: every sub-block scale there
    is at least 2^-124, so |subnormal|/scale < 1/4 rounds to ±0 by itself (see :func:`_prime_apply`)."""
    return 2.0 ** ((1 << a["sub_block_shift_bits"]) + a["bit_width"] - 9 + 1 - 127)


def _prime_chain(a: dict[str, Any]) -> bool:
    """Whether the sub-block shift is found by a few compares (see :func:`_prime_scale`): D <= 3,
    and the smallest scale the compares can give, ``2^(-127-D+1-m)`` (a block maximum clamped
    at 2^-127), stays a non-zero float32 (2^-148 or more, exact); otherwise the sub-block
    exponents are taken, as the reference does."""
    m = a["bit_width"] - 9
    dmax = (1 << a["sub_block_shift_bits"]) - 1
    return dmax <= 3 and -127 - dmax + 1 - m >= -148


def _prime_static(g: Body, xf: str, a: dict[str, Any], n: int, rank: int, halve: bool = False, flat: bool = False,
                  shaped: bool = True) -> str:
    """to_bfp_prime on a block axis (not the last) of known length ``n``, a multiple of the
    sub-block size k, in a tensor of known ``rank``: the quantized tensor, shaped
    ``(lead..., n/k, k, trail...)``.

    Two things make it cheaper than the generic view, and both matter on models of many small
    activations, where each executed node costs onnxruntime about as much as a pass over 10k
    elements:

    * every view's shape is the input's own dims around constants — ``Concat(Shape(x)[:axis],
      [n/k, k], Shape(x)[axis+1:])`` — so no shape arithmetic runs, and no ``-1`` is left for
      Reshape to infer (an empty tensor keeps every dim, zero ones included);
    * the tensor itself is never padded: sub-blocks tile the axis, only the sub-block maxima
      (1/k of the elements) are zero-padded to whole blocks (zeros never win a maximum), and
      the scales are sliced back. Padding and slicing the tensor cost two full copies, and most
      channel counts of real models are not multiples of 16 (PP-OCR cls: 55 of 110 activations).

    A whole axis shorter than a block is one block of n (the reference's zero padding of it
    changes no maximum). ``flat``: the flush without an ``If`` (see :func:`_prime_apply`).
    ``shaped``: ``xf`` has ``x``'s shape (a sized body), so that where the shape values do not
    fold its views copy the input's dims (:class:`onnxptq.onnx_ops.body.SplitAxis`).
    """
    bs, k = a["block_size"], min(a["sub_block_size"], a["block_size"])
    axis = a["axis"] % rank
    blk = min(n, bs)  # block length: the whole axis when it is shorter than a block
    nsb, nb = blk // k, -(-n // blk)
    padk = nb * nsb - n // k  # sub-blocks of zeros that complete the last block
    split = SplitAxis(g, rank, axis, shaped)  # the views' targets (see onnx_ops.body.SplitAxis)

    def on_axis(*before_after: int) -> str:  # Pad's pads for the sub-block axis of a rank+1 view
        pads = [0] * (2 * (rank + 1))
        pads[axis], pads[rank + 1 + axis] = before_after
        return g.i64(*pads)

    # A zero dim of x stays zero (an empty tensor keeps its shape).
    x4 = split.view(xf, n // k, k)
    az = g.op("Abs", x4)
    sb = g.reduce("ReduceMax", az, [axis + 1])
    # The blocks' sums of |x| (NaN detection, see :func:`_prime_scale`), shaped like the maxima.
    if padk:  # from the sub-blocks' sums, padded as the maxima are
        ss = g.op("Pad", g.reduce("ReduceSum", az, [axis + 1]), on_axis(0, padk))
        bsum = g.reduce("ReduceSum", split.reshape(ss, nb, nsb), [axis + 1])
    elif nb > 1:
        bsum = g.reduce("ReduceSum", split.reshape(az, nb, blk), [axis + 1])
    elif halve and n % 2 == 0:  # by halves, as the maxima: onnxruntime reduces slowly over the axis when lead is 1
        bsum = max_by_halves(g, az, split.target(2, n // 2), None, lambda b, t: b.reduce("ReduceSum", t, [axis + 1]),
                             axis=axis, allowzero=not split.copy, merge="Add")
    else:
        bsum = g.reduce("ReduceSum", az, [axis, axis + 1])
    if padk:
        sb = g.op("Pad", sb, on_axis(0, padk))
    sbb = split.reshape(sb, nb, nsb) if nb > 1 else sb
    if halve:  # nb == 1 and nsb even (see :func:`variant`)
        # One block along the axis: its maximum by halves (see onnx_ops.body.max_by_halves), from
        # (lead..., 2, nsb/2, trail...): onnxruntime reduces slowly over the axis when lead is 1.
        bmax = max_by_halves(g, sbb, split.target(2, nsb // 2), None, lambda b, t: b.reduce("ReduceMax", t, [axis + 1]),
                             axis=axis, allowzero=not split.copy)
    else:
        bmax = g.reduce("ReduceMax", sbb, [axis + 1 if nb > 1 else axis])
    s = _prime_scale(g, sbb, bmax, bsum, a)
    if nb > 1:
        s = split.reshape(s, nb * nsb, 1)
    if padk:
        s = g.op("Slice", s, g.i64(0), g.i64(n // k), g.i64(axis))
    return _prime_apply(g, x4, az, s, bmax, a, flat)


def _bfp_static(g: Body, xf: str, a: dict[str, Any], n: int, rank: int, flat: bool = False) -> str:
    """to_bfp (the split body, :func:`_bfp_split`) on a block axis of known length ``n`` that
    blocks tile (or one block shorter than ``block_size``) in a tensor of known ``rank`` whose
    shape values do not fold at build time (PP-OCR cls: ``[?, C, ?, ?]``), viewed as
    ``(lead..., n/bs, bs, trail...)``, the blocks along axis ``axis + 1``.

    The ``(rows, bs, post)`` view (:func:`onnxptq.onnx_ops.body.view_static`) computes ``post``
    from the input's shape in every call: ``Shape``, ``ReduceProd``, ``Max`` and ``Concat``, four
    nodes to run and to create per call. This one is an ``Unsqueeze`` and a ``Reshape`` to a
    constant target that copies the other dims (:class:`onnxptq.onnx_ops.body.SplitAxis`); the
    body's last ``Reshape`` to ``x``'s shape undoes it. The same elements in the same blocks and
    the same formulas, hence the same bits; empty tensors keep their zero dims. ``flat``: the
    branch-free formulas (:func:`_bfp_flat`) on that view, for a tensor seen small."""
    axis = a["axis"] % rank
    bs = min(n, a["block_size"])  # the whole axis is one block when it is shorter
    xr = SplitAxis(g, rank, axis).view(xf, n // bs, bs)
    if flat:
        return _bfp_flat(g, xr, a, None, axis + 1)
    return _bfp_split(g, xr, a, None, axis + 1)


def _function(a: dict[str, Any], opset: int, name: str, view: str | None = None, float32: bool = False) -> onnx.FunctionProto:
    """The body for ``view`` (see :func:`variant`; None: any shape).

    A tensor of < 2 elements is returned unchanged; any other goes through :func:`_quantized`,
    which for to_bfp picks its formulas by whether the tensor's sum is finite (a sum propagates
    Inf and NaN whatever its order; a finite sum that overflows only takes the masked formulas,
    which are still right). The formulas sit in ``If`` subgraphs, each with its own allocation planner in
    onnxruntime (whose cost grows with the square of the values it plans), so hundreds of
    quantizers stay cheap to load.

    What each call costs in a real model is mostly its node count: onnxruntime spends about
    0.8 µs per executed node in a model of thousands (measured on PP-OCR cls, 110 calls), as
    much as a pass over 10k elements. Hence: a ``...s`` view (see :func:`variant`) is never a
    single element, so its body has no size ``If`` and no flattening Reshape; ``float32`` (the
    caller knows the input is float32) drops the Cast pair around the body, whose trailing
    CastLike onnxruntime keeps as a full copy; shape values only the masked branch needs are
    computed in that branch.
    """
    view, _, dims = (view or "").partition("_k")
    view = view or None
    top = Body(opset, known=[None if d == "u" else int(d) for d in dims.split("x")] if dims else None)
    attrs = a
    sized = (view or "").endswith("s")
    x32 = "x" if float32 else top.op("Cast", "x", to=_F)
    # Unsized: flattened by a free Reshape outside the If: onnxruntime drops the Cast for
    # float32 inputs, which it cannot do when the Cast feeds a subgraph directly.
    flat = xf = x32 if sized else top.op("Reshape", x32, top.i64(-1))
    if a["convert_to_bfloat_before_bfp"]:
        # Rounded before the finiteness test: a finite float32 may round to a bfloat16 Inf.
        xf = top.op("Cast", top.op("Cast", xf, to=TensorProto.BFLOAT16), to=_F)
        a = dict(a, convert_to_bfloat_before_bfp=0)
    # Only the compiler kernel's to_bfp body takes the sum here: to_bfp_prime and the branch-free
    # to_bfp body need none, the split to_bfp body takes it over its view (:func:`_bfp_split`).
    compiler = a["bfp_method"] == "to_bfp" and a["use_compiler_version_cpu_kernel"]
    total = top.op("ReduceSum", xf, keepdims=0) if compiler else ""
    if sized:
        y = _quantized(top, xf, a, view, total)
    else:
        keep_y = top.fresh("keep")
        keep = helper.make_graph([helper.make_node("Identity", [flat], [keep_y])], top.fresh("tiny"), [],
                                 [helper.make_tensor_value_info(keep_y, _F, None)])
        main = top.branch()
        main_y = _quantized(main, xf, a, view, total)
        tiny = top.op("Less", top.op("Size", "x"), top.const(2, np.int64))
        y = top.op("If", tiny, then_branch=keep, else_branch=main.graph(main_y, top.fresh("main")))
    # The final Reshape sits outside the If: a branch output that is a Reshape costs a copy.
    # allowzero: a zero dim of an empty x is a zero, not "copy the input's dim".
    shape = top.shared("Shape", "x")  # a constant where the shape is known (see Body)
    if float32:
        top.nodes.append(helper.make_node("Reshape", [y, shape], ["y"], allowzero=1))
    else:
        top.nodes.append(helper.make_node("CastLike", [top.op("Reshape", y, shape, allowzero=1), "x"], ["y"]))
    return helper.make_function(
        DOMAIN,
        name,
        ["x"],
        ["y"],
        top.live_nodes(),
        opset_imports=[helper.make_opsetid("", opset)],
        attributes=list(_ATTR_ORDER),
        doc_string=f"BFP quantize-dequantize ({attrs['bfp_method']}), attributes {attrs}; see onnxptq.formats.bfp.",
    )


@functools.lru_cache(maxsize=512)
def _cached_function(items: tuple[tuple[str, Any], ...], opset: int, name: str, view: str | None,
                     float32: bool) -> onnx.FunctionProto:
    return _function(dict(items), opset, name, view, float32)


def _function_once(a: dict[str, Any], opset: int, name: str, view: str | None, float32: bool) -> onnx.FunctionProto:
    """:func:`_function`, built once per distinct body in the process (a copy is returned).

    Every quantizer node asks for its body, and a model's hundreds of calls share a few dozen
    bodies (PP-OCR cls MX9: 110 calls, 18 bodies); emit keeps one per name. Building a body
    is ~2.5 ms of Python, rebuilt per call and per build (the floor's repair rebuilds the model
    for every candidate): the 800x608 layout detector spent 4.8 s CPU in it over 6 builds."""
    fn = onnx.FunctionProto()
    fn.CopyFrom(_cached_function(tuple(a.items()), opset, name, view, float32))  # in order: the doc string shows it
    return fn


def body_view(a: dict[str, Any], shape: Any, observed: int | None = None) -> str | None:
    """The body :func:`build` makes for ``shape`` (``observed``: see :func:`variant`): its
    :func:`variant`, and ``_k<dims>`` where the shape values fold at build time (see
    :class:`onnx_ops.body.Body`)."""
    view = variant(a, shape, observed)
    if view is not None and not view.startswith("r") and foldable_shape(shape) is not None:
        view += "_k" + known_dims(shape)
    return view


def build(fmt: str, x: str, y: str, *, name: str, opset: int, shape: Any = None, dtype: str | None = None,
          observed: int | None = None, **attrs: Any) -> QDQNodes:
    """One ``BFPQuantizeDequantize`` node (domain ``onnxptq``) mapping ``x`` to its BFP value ``y``.

    ``attrs`` are the BFPAttributes (validated by :func:`onnxptq.formats.bfp.normalize_attrs`).
    ``shape``: the static shape of ``x`` when known (ints; None or a name for an unknown dim):
    when it tells the block axis's length, the body has no Pad/Slice (the axis divides) or
    constant ones; the function name says which (``_p0``, ``_p3``, …); the generic body has no
    suffix. ``dtype``: ``"float32"`` when ``x`` is known to be float32: the body has no Cast
    pair (suffix ``_f32``); any other value, or None, gives the type-generic body. The function
    body is built for ``max(opset, 15)``; ``min_opset`` tells the caller to raise the model to
    that opset first. ``observed``: the most elements ``x`` held on the calibration feeds, where
    known (``pipeline/observed_sizes.py``): below the size rules' lines the body is branch-free
    even where ``shape`` leaves dims unknown (:func:`variant`); the body is exact at any size.
    """
    if fmt != "bfp":
        raise ValueError(f"onnx_ops.bfp builds the 'bfp' format, not {fmt!r}")
    a = normalize_attrs(**attrs)
    body_opset = max(int(opset), MIN_OPSET)
    view = body_view(a, shape, observed)
    float32 = dtype == "float32"
    fname = function_name(a, body_opset, view) + ("_f32" if float32 else "")
    node_attrs = {k: a[k] for k in _ATTR_ORDER}
    node = helper.make_node(fname, [x], [y], name=name, domain=DOMAIN, **node_attrs)
    return QDQNodes(
        nodes=[node],
        functions=[_function_once(a, body_opset, fname, view, float32)],
        opset_imports={DOMAIN: DOMAIN_VERSION},
        min_opset=MIN_OPSET,
    )
