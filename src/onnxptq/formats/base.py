"""What every numeric format shares: the names users pass and the ONNX fragment a format emits.

A format is defined once by its NumPy reference (``fake_quantize``) and realised in ONNX by a
builder in :mod:`onnxptq.onnx_ops`. Builders return a :class:`QDQNodes` fragment rather than a
whole model, so the same code serves the one-op test models (``qdq_model``) and the quantizer's
emit step, and the property tests that hold the two bit-exact cover exactly what ships.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import onnx

#: The domain of our ONNX functions. Models carry the function bodies, so nothing is registered.
DOMAIN = "onnxptq"
DOMAIN_VERSION = 1

INTEGER_FORMATS = ("int4", "uint4", "int8", "uint8", "int16", "uint16", "int32", "uint32")
FLOAT_FORMATS = ("bf16", "fp16", "fp8_e4m3", "fp8_e5m2")
BLOCK_FORMATS = ("bfp", "mx")
ALL_FORMATS = INTEGER_FORMATS + FLOAT_FORMATS + BLOCK_FORMATS

#: OCP MX element types accepted by the ``mx`` format (attribute ``element_dtype``).
MX_ELEMENT_DTYPES = ("int8", "fp8_e4m3", "fp8_e5m2", "fp6_e3m2", "fp6_e2m3", "fp4_e2m1")


@dataclass
class QDQNodes:
    """An ONNX fragment that maps tensor ``x`` to its fake-quantized value ``y``.

    ``nodes`` are in topological order. ``functions`` are the FunctionProtos (domain
    :data:`DOMAIN`) the nodes call; the caller adds each once to the model. ``opset_imports`` maps
    every domain the fragment uses to its version, and ``min_opset`` is the lowest default-domain
    opset the fragment is valid for: the caller raises the model's opset to it first.
    """

    nodes: list[onnx.NodeProto] = field(default_factory=list)
    initializers: list[onnx.TensorProto] = field(default_factory=list)
    functions: list[onnx.FunctionProto] = field(default_factory=list)
    opset_imports: dict[str, int] = field(default_factory=dict)
    min_opset: int = 13


def check_format(fmt: str) -> str:
    """Return ``fmt`` normalised to lower case, or raise naming the valid choices."""
    name = str(fmt).lower()
    if name not in ALL_FORMATS:
        raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(ALL_FORMATS)}")
    return name
