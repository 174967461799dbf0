"""The block bodies' own node and constant builders give onnx.helper's messages, field for field (blockq19).

``onnx_ops.body.make_node`` and ``constant_tensor`` replace ``onnx.helper.make_node`` and
``onnx.numpy_helper.from_array`` where the BFP and MX bodies are built (~20 % of building a model's
bodies, in every process that quantizes: bench/RESULTS.md, blockq19). Nothing delivered may change:
each is held to the helper it replaces on every attribute kind and element type, and whole bodies
of every block preset, at several shapes, are built both ways and compared byte for byte.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq.onnx_ops import bfp, body, build_qdq, mx
from onnxptq.formats.bfp import PRESETS

BRANCH = helper.make_graph([helper.make_node("Identity", ["a"], ["b"])], "g", [], [helper.make_tensor_value_info("b", 1, [1])])
ATTRS = [{}, {"to": TensorProto.DOUBLE}, {"keepdims": True}, {"axis": np.int64(-1)}, {"allowzero": 1, "axis": 0},
         {"value": numpy_helper.from_array(np.array([1.5], np.float32), "v")}, {"perm": [0, 2, 1]}, {"alpha": 0.25},
         {"mode": "constant"}, {"then_branch": BRANCH, "else_branch": BRANCH}, {"axes": None, "keepdims": 0},
         {"z": 1, "a": 2, "m": [1.0, 2.0]}]


@pytest.mark.parametrize("attrs", ATTRS, ids=lambda a: ",".join(a) or "none")
def test_make_node_is_helpers(attrs):
    ours = body.make_node("Op", ["x", "y"], ["z"], **attrs)
    theirs = helper.make_node("Op", ["x", "y"], ["z"], **attrs)
    assert ours.SerializeToString() == theirs.SerializeToString()
    assert ours == theirs


VALUES = [np.float32(0.75), np.array([1, -2, 3], np.int64), np.full([1, 1, 1], 2.0**52 + 1, np.float64),
          np.zeros((0, 3), np.float32), np.array(7, np.int32), np.arange(6, dtype=np.float32).reshape(2, 3).T,
          np.array([np.nan, -0.0, np.inf, 1e-45], np.float32), np.array([True, False]), np.array(2, np.float16),
          np.array([255], np.uint8), np.array(-1, np.int64)]


@pytest.mark.parametrize("value", VALUES, ids=lambda v: f"{np.asarray(v).dtype}{np.asarray(v).shape}")
@pytest.mark.parametrize("name", ["c_3", ""])
def test_constant_tensor_is_from_array(value, name):
    value = np.asarray(value)
    ours, theirs = body.constant_tensor(value, name), numpy_helper.from_array(value, name)
    assert ours.SerializeToString() == theirs.SerializeToString()
    np.testing.assert_array_equal(numpy_helper.to_array(ours), value)


def _fmt(preset: str, axis: int) -> tuple[str, dict]:
    elements = {"MXINT8": "int8", "MXFP8_E4M3": "fp8_e4m3", "MXFP4": "fp4_e2m1"}
    if preset in elements:
        return "mx", dict(element_dtype=elements[preset], axis=axis, block_size=32, rounding_mode=2)
    return "bfp", dict(PRESETS[preset], axis=axis)


def _bodies(presets, shapes) -> list[bytes]:
    """Every body of ``presets`` x ``shapes`` (axis 1), serialized, built afresh (the caches cleared)."""
    bfp._cached_function.cache_clear()
    mx._cached_function.cache_clear()
    out = []
    for preset in presets:
        for shape, dtype in shapes:
            fmt, attrs = _fmt(preset, 1)
            frag = build_qdq(fmt, "x", "y", name="q", opset=17, shape=shape, dtype=dtype, **attrs)
            out += [f.SerializeToString() for f in frag.functions]
    return out


def test_whole_bodies_as_with_helpers(monkeypatch):
    """Bodies of every block preset (static, ragged, dynamic-batch, unknown-shape and type-generic
    views, branched and branch-free) are the bytes onnx.helper's builders give."""
    presets = ["BFP16", "MX9", "MX6", "MXINT8", "MXFP8_E4M3", "MXFP4"]
    shapes = [((None, 32, 6, 10), "float32"), ((None, 40, 3, 5), "float32"), ((1, 24, 7), "float32"),
              ((None, 3, 4096, 8), "float32"), (None, None), ((None, None, None, None), "float32")]
    ours = _bodies(presets, shapes)
    monkeypatch.setattr(body, "make_node", helper.make_node)
    monkeypatch.setattr(body, "constant_tensor", lambda value, name: numpy_helper.from_array(value, name))
    theirs = _bodies(presets, shapes)
    monkeypatch.undo()
    bfp._cached_function.cache_clear()
    mx._cached_function.cache_clear()
    assert len(ours) == len(theirs) == len(presets) * len(shapes)
    assert ours == theirs
