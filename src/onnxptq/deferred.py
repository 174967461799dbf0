"""Import sympy only when something reads it (peak RSS and import time, issue 26 item 4).

Why: onnx-ir 1.1 (the only release on the index) imports sympy at the top of ``onnx_ir._core`` and
``onnx_ir._symbolic_shapes``. It uses sympy for one thing: arithmetic on symbolic dimensions
(``SymbolicDim`` ``+ - * // %``, ``simplify``, parsing an expression such as ``"N*2"``), which no
quantization asks for: the preparation passes and the plan read dimensions, they never compute
with named ones. Importing sympy (and mpmath under it) costs ~34 MiB of resident memory and
~0.25 s of CPU in every process that imports onnxptq: on PP-OCR cls that was a third of an A8W8
quantization's peak and more than onnxruntime's own ``quantize_static`` adds (bench/RESULTS.md,
peak22).

:func:`defer_sympy` puts a stand-in module in ``sys.modules`` for ``sympy`` and for
``onnx_ir._symbolic_shapes`` (whose module level builds a table of sympy functions) before onnx-ir
is first imported. ``import sympy`` then binds the stand-in; the first read of any attribute that
the stand-in lacks imports the real module (taking the stand-in out of ``sys.modules`` first, so
the import runs as usual and later ``import sympy`` statements get the real module) and answers
from it. Nothing is changed where sympy or onnx-ir is already imported, or where either is not
installed. Values are never affected: the real module answers every read.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import logging
import sys
import threading
import types
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["defer_sympy", "is_deferred"]

#: re-entrant: importing ``onnx_ir._symbolic_shapes`` reads the sympy stand-in, which imports sympy
_LOCK = threading.RLock()

#: deferred in this order: sympy before the onnx-ir module that reads it at its top
DEFERRED = ("sympy", "onnx_ir._symbolic_shapes")


class _StandIn(types.ModuleType):
    """Holds a module's place in ``sys.modules`` until an attribute it lacks is read."""

    def __getattr__(self, name: str) -> Any:
        return getattr(_real(self), name)


def _real(stand_in: _StandIn) -> types.ModuleType:
    """The module ``stand_in`` holds the place of, imported on the first call."""
    with _LOCK:
        real = stand_in.__dict__.get("_deferred_module")
        if real is None:
            if sys.modules.get(stand_in.__name__) is stand_in:
                del sys.modules[stand_in.__name__]
            real = importlib.import_module(stand_in.__name__)
            stand_in.__dict__["_deferred_module"] = real
            log.debug("deferred module %s imported (an attribute was read)", stand_in.__name__)
    return real


def _spec(name: str) -> importlib.machinery.ModuleSpec | None:
    """``name``'s spec, found without importing its parent package (None where it is not installed)."""
    parent, _, leaf = name.rpartition(".")
    if not parent:
        return importlib.util.find_spec(name)
    parent_spec = importlib.util.find_spec(parent)
    if parent_spec is None or not parent_spec.submodule_search_locations:
        return None
    return importlib.machinery.PathFinder.find_spec(name, list(parent_spec.submodule_search_locations))


def defer_sympy() -> bool:
    """Put stand-ins for sympy and ``onnx_ir._symbolic_shapes`` in ``sys.modules``; True where it did.

    Only before either module or onnx-ir itself is imported (afterwards sympy is already loaded and
    a stand-in would save nothing), and only where both are installed.
    """
    if any(name in sys.modules for name in (*DEFERRED, "onnx_ir")):
        return False
    try:
        specs = [_spec(name) for name in DEFERRED]
    except (ImportError, ValueError):
        return False
    if any(spec is None for spec in specs):
        return False
    for name, spec in zip(DEFERRED, specs):
        stand_in = _StandIn(name)
        stand_in.__spec__ = spec
        stand_in.__loader__ = spec.loader
        # No ``__path__``: ``import sympy.core`` reads the parent's, which imports the real package first
        # (its submodules expect its ``__init__`` to have run).
        sys.modules[name] = stand_in
    return True


def is_deferred(name: str) -> bool:
    """Whether ``sys.modules[name]`` is a stand-in whose module has not been imported yet."""
    module = sys.modules.get(name)
    return isinstance(module, _StandIn) and "_deferred_module" not in module.__dict__
