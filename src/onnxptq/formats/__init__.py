"""Numeric formats: one NumPy reference each (the truth) and its ONNX realisation.

``fake_quantize(x, fmt, **attrs)`` is the reference; ``qdq_model(fmt, shape, **attrs)`` is a one-op
ONNX model with float input ``x`` and output ``y`` that stock onnxruntime runs and that must agree
with the reference bit for bit. The math of each family lives in one module here
(``integer``, ``floating``, ``bfp``, ``mx``); its ONNX form lives in the same-named module of
:mod:`onnxptq.onnx_ops`.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import onnx

from .base import (
    ALL_FORMATS,
    BLOCK_FORMATS,
    DOMAIN,
    DOMAIN_VERSION,
    FLOAT_FORMATS,
    INTEGER_FORMATS,
    MX_ELEMENT_DTYPES,
    QDQNodes,
    check_format,
)

__all__ = [
    "ALL_FORMATS",
    "BLOCK_FORMATS",
    "DOMAIN",
    "DOMAIN_VERSION",
    "FLOAT_FORMATS",
    "INTEGER_FORMATS",
    "MX_ELEMENT_DTYPES",
    "QDQNodes",
    "build_qdq",
    "fake_quantize",
    "qdq_model",
]


def _family(fmt: str):
    """The (reference module, onnx_ops module) pair that owns ``fmt``."""
    # Import only the family asked for, so one family's modules never depend on another's.
    import importlib

    family = "integer" if fmt in INTEGER_FORMATS else "floating" if fmt in FLOAT_FORMATS else fmt
    reference = importlib.import_module(f"{__package__}.{family}")
    builder = importlib.import_module(f"{__package__.rsplit('.', 1)[0]}.onnx_ops.{family}")
    return reference, builder


def fake_quantize(x: np.ndarray, fmt: str, **attrs: Any) -> np.ndarray:
    """Quantize then dequantize ``x`` in ``fmt``; the result has the dtype of ``x``.

    Integer formats take ``scale``, ``zero_point``, ``axis``, ``block_size``; float element
    formats take ``scale`` (default 1); ``bfp`` takes the BFPAttributes and ``mx`` the MXAttributes
    of the reference tool (see docs/formats.md).
    """
    fmt = check_format(fmt)
    reference, _ = _family(fmt)
    if fmt in BLOCK_FORMATS:
        return reference.fake_quantize(np.asarray(x), **attrs)
    return reference.fake_quantize(np.asarray(x), fmt, **attrs)


def build_qdq(fmt: str, x: str, y: str, *, name: str, opset: int, **attrs: Any) -> QDQNodes:
    """The ONNX fragment computing ``y = fake_quantize(x, fmt, **attrs)`` for a model of ``opset``."""
    fmt = check_format(fmt)
    _, builder = _family(fmt)
    return builder.build(fmt, x, y, name=name, opset=opset, **attrs)


def qdq_model(
    fmt: str,
    shape: Sequence[int | str | None],
    dtype: Any = np.float32,
    opset: int | None = None,
    **attrs: Any,
) -> onnx.ModelProto:
    """A one-op model: float input ``x`` of ``shape``/``dtype`` → output ``y`` = the fake quantization.

    ``opset`` defaults to the fragment's minimum (at least 13). The model runs in a plain
    onnxruntime session: the functions it needs are embedded.
    """
    from ..graph.io import ORT_MAX_IR_VERSION

    elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    probe = build_qdq(fmt, "x", "y", name="qdq", opset=opset or 13, **attrs)
    target = max(opset or 13, probe.min_opset)
    frag = probe if target == (opset or 13) else build_qdq(fmt, "x", "y", name="qdq", opset=target, **attrs)
    dims = [d if d is not None else None for d in shape]
    graph = onnx.helper.make_graph(
        frag.nodes,
        f"qdq_{fmt}",
        [onnx.helper.make_tensor_value_info("x", elem, dims)],
        [onnx.helper.make_tensor_value_info("y", elem, dims)],
        initializer=frag.initializers,
    )
    imports = {"": target, **{d: v for d, v in frag.opset_imports.items() if d != ""}}
    model = onnx.helper.make_model(
        graph,
        opset_imports=[onnx.helper.make_opsetid(d, v) for d, v in imports.items()],
        functions=frag.functions,
        producer_name="onnxptq",
    )
    model.ir_version = min(model.ir_version, ORT_MAX_IR_VERSION)
    return model
