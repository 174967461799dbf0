"""ONNX realisations of the formats: one builder module per family, standard ops only.

Each module exposes ``build(fmt, x, y, *, name, opset, **attrs) -> QDQNodes``. Formats that
standard ONNX lacks become FunctionProtos in the ``onnxptq`` domain, embedded in the model.
:func:`build_qdq` dispatches a format to its family's module and :func:`qdq_model` wraps the
fragment in a one-op model (:mod:`.qdq`). One floor above :mod:`onnxptq.formats` (the NumPy truth
each form must match), which never imports this package.
"""

import importlib
from types import ModuleType

from .qdq import build_qdq, qdq_model

__all__ = ["bfp", "build_qdq", "floating", "integer", "mx", "qdq_model"]
_FAMILIES = ("bfp", "floating", "integer", "mx")


def __getattr__(name: str) -> ModuleType:
    """Import a family's builder module on first use (``onnx_ops.integer`` etc.).

    Lazy so that importing one family never requires the others to import cleanly.
    """
    if name in _FAMILIES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
