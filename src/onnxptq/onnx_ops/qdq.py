"""The ONNX form of any format: ``build_qdq`` picks the family module, ``qdq_model`` wraps it in a model.

``build_qdq(fmt, x, y, name=..., opset=...)`` is the fragment computing ``y = fake_quantize(x, fmt)``
(:func:`onnxptq.formats.fake_quantize`, the reference it must agree with bit for bit) that the
emitter writes into a model; ``qdq_model(fmt, shape, **attrs)`` is a one-op model with float input
``x`` and output ``y`` that stock onnxruntime runs, for tests and benchmarks.
"""

from __future__ import annotations

import importlib
from typing import Any, Sequence

import numpy as np
import onnx

from ..formats import QDQNodes, check_format, family_of
from ..graph.io import ORT_MAX_IR_VERSION

__all__ = ["build_qdq", "qdq_model"]


def _builder(fmt: str):
    """The onnx_ops module that owns ``fmt``, imported on first use (one family never needs another's)."""
    return importlib.import_module(f"{__package__}.{family_of(fmt)}")


def build_qdq(fmt: str, x: str, y: str, *, name: str, opset: int, **attrs: Any) -> QDQNodes:
    """The ONNX fragment computing ``y = fake_quantize(x, fmt, **attrs)`` for a model of ``opset``."""
    fmt = check_format(fmt)
    return _builder(fmt).build(fmt, x, y, name=name, opset=opset, **attrs)


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
