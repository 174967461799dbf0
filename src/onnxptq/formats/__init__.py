"""Numeric formats: one NumPy reference each (the truth), the bottom of the house.

``fake_quantize(x, fmt, **attrs)`` is the reference. The math of each family lives in one module
here (``integer``, ``floating``, ``bfp``, ``mx``); its ONNX form lives in the same-named module of
:mod:`onnxptq.onnx_ops`, one floor up (``onnx_ops.qdq_model(fmt, shape, **attrs)`` is a one-op
ONNX model that stock onnxruntime runs and that must agree with the reference bit for bit). This
package imports nothing of the rest of onnxptq: everything else may read it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

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
    "fake_quantize",
    "family_of",
]


def family_of(fmt: str) -> str:
    """The family module name (``integer``, ``floating``, ``bfp``, ``mx``) that owns a checked ``fmt``,
    in :mod:`onnxptq.formats` (its reference) and in :mod:`onnxptq.onnx_ops` (its ONNX form)."""
    return "integer" if fmt in INTEGER_FORMATS else "floating" if fmt in FLOAT_FORMATS else fmt


def _reference(fmt: str):
    """The reference module that owns ``fmt``."""
    # Import only the family asked for, so one family's modules never depend on another's.
    import importlib

    return importlib.import_module(f"{__package__}.{family_of(fmt)}")


def fake_quantize(x: np.ndarray, fmt: str, **attrs: Any) -> np.ndarray:
    """Quantize then dequantize ``x`` in ``fmt``; the result has the dtype of ``x``.

    Integer formats take ``scale``, ``zero_point``, ``axis``, ``block_size``; float element
    formats take ``scale`` (default 1); ``bfp`` takes the BFPAttributes and ``mx`` the MXAttributes
    of the reference tool (see docs/formats.md).
    """
    fmt = check_format(fmt)
    reference = _reference(fmt)
    if fmt in BLOCK_FORMATS:
        return reference.fake_quantize(np.asarray(x), **attrs)
    return reference.fake_quantize(np.asarray(x), fmt, **attrs)
