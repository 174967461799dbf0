"""The attributes of a call to a model-local function, whichever form the file holds them in.

Why: a delivered file may carry the attributes our quantizer calls share (``bfp_method``, ``axis``,
``block_size``, ...) once, as the called function's attribute defaults, instead of on every call
(pipeline/lean_file.py: ~280 B a call, 0.5-6 % of a block-format file). ONNX gives a function
call its definition's defaults for the attributes it does not set, so both forms mean the same;
a reader that looked only at ``node.attribute`` would see nothing on the lean form. Read them here.
"""

from __future__ import annotations

from typing import Any, Iterable

import onnx
from onnx import helper

__all__ = ["call_attributes", "call_attribute"]


def _defaults(functions: Iterable[onnx.FunctionProto], node: onnx.NodeProto) -> list[onnx.AttributeProto]:
    for fn in functions:
        if fn.name == node.op_type and fn.domain == node.domain:
            return list(fn.attribute_proto)
    return []


def call_attributes(model: onnx.ModelProto | Iterable[onnx.FunctionProto], node: onnx.NodeProto) -> dict[str, Any]:
    """``node``'s attributes by name (values as :func:`onnx.helper.get_attribute_value` gives
    them): the called function's defaults (``model``'s local functions), overridden by the ones
    the node sets itself. A node that calls no local function gives only its own."""
    functions = model.functions if isinstance(model, onnx.ModelProto) else model
    out = {a.name: helper.get_attribute_value(a) for a in _defaults(functions, node)}
    out.update({a.name: helper.get_attribute_value(a) for a in node.attribute})
    return out


def call_attribute(model: onnx.ModelProto | Iterable[onnx.FunctionProto], node: onnx.NodeProto, name: str,
                   default: Any = None) -> Any:
    """One attribute of ``node`` as :func:`call_attributes` reads it (``default`` where neither
    the node nor its function's defaults hold it)."""
    return call_attributes(model, node).get(name, default)
