"""ONNX realisations of the formats: one builder module per family, standard ops only.

Each module exposes ``build(fmt, x, y, *, name, opset, **attrs) -> QDQNodes``. Formats that
standard ONNX lacks become FunctionProtos in the ``onnxptq`` domain, embedded in the model.
"""

import importlib
from types import ModuleType

__all__ = ["bfp", "floating", "integer", "mx"]


def __getattr__(name: str) -> ModuleType:
    """Import a family's builder module on first use (``onnx_ops.integer`` etc.).

    Lazy so that importing one family never requires the others to import cleanly.
    """
    if name in __all__:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
