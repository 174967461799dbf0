"""A converted model's interface: the element types of its graph inputs and outputs.

The functions live in :mod:`onnxptq.graph.interface` (the quantizer's fp16 entry uses them too, and
``pipeline`` may not import ``conversion``); this module keeps the conversion's import path.
"""

from __future__ import annotations

from ..graph.interface import has_type, io_types, set_io_types

__all__ = ["has_type", "io_types", "set_io_types"]
