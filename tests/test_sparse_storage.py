"""Mostly-zero float weights are written sparse, and sparse initializers are read (graph/sparse_storage.py).

The built graph is swift-f0's front end in small: a filter bank built at run time from a few
stored weights (``ConstantOfShape → ScatterElements → Reshape``), a MatMul with it, then a Log
(the log-domain rule keeps the bank float), then a dense MatMul the preset quantizes. Constant
folding makes the bank a 64k-element initializer; before this module the BF16 file was ~10× the
float one (swift-f0 itself: 8×, bench/RESULTS.md eleventh round).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxptq
from onnxptq.graph.sparse_storage import densify, sparsify_floats

BINS, BANDS = 513, 128


def _bank() -> tuple[np.ndarray, np.ndarray]:
    """Triangular mel-like bands over 513 bins: flat indices and values of the non-zeros (~1.6 %)."""
    edges = np.geomspace(2, BINS - 1, BANDS + 2).astype(int)
    idx, val = [], []
    for b in range(BANDS):
        lo, mid, hi = edges[b], max(edges[b + 1], edges[b] + 1), max(edges[b + 2], edges[b] + 2)
        for k in range(lo, hi + 1):
            w = (k - lo) / (mid - lo) if k <= mid else (hi - k) / max(hi - mid, 1)
            if w > 0:
                idx.append(k * BANDS + b)
                val.append(w)
    return np.array(idx, np.int64), np.array(val, np.float32)


def _model() -> onnx.ModelProto:
    idx, val = _bank()
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(np.array([BINS * BANDS], np.int64), "n"),
             numpy_helper.from_array(idx, "idx"), numpy_helper.from_array(val, "val"),
             numpy_helper.from_array(np.array([BINS, BANDS], np.int64), "shape"),
             numpy_helper.from_array(np.array(1e-6, np.float32), "eps"),
             numpy_helper.from_array(rng.normal(0, 0.1, (BANDS, 32)).astype(np.float32), "w2")]
    nodes = [helper.make_node("ConstantOfShape", ["n"], ["zeros"], value=numpy_helper.from_array(np.zeros(1, np.float32))),
             helper.make_node("ScatterElements", ["zeros", "idx", "val"], ["flat"], axis=0),
             helper.make_node("Reshape", ["flat", "shape"], ["bank"]),
             helper.make_node("MatMul", ["power", "bank"], ["mel"]),
             helper.make_node("Add", ["mel", "eps"], ["mel_eps"]),
             helper.make_node("Log", ["mel_eps"], ["logmel"]),
             helper.make_node("MatMul", ["logmel", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "filterbank", [helper.make_tensor_value_info("power", TensorProto.FLOAT, [1, 8, BINS])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 32])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def _feeds(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"power": (rng.gamma(0.5, 1.0, (1, 8, BINS)) * 10 ** rng.uniform(-3, 2)).astype(np.float32)} for _ in range(n)]


def _run(model, feed):
    data = model if isinstance(model, str) else model.SerializeToString()
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feed)[0]


@pytest.mark.parametrize("preset", ["BF16", "A8W8"])
def test_folded_filter_bank_is_written_sparse(tmp_path, preset):
    src, out = tmp_path / "float.onnx", tmp_path / f"q.{preset}.onnx"
    onnx.save_model(_model(), str(src))
    result = onnxptq.quantize(str(src), preset, data=_feeds(8, 1), output=str(out))
    saved = onnx.load(str(out))
    # The bank (64k float32, 0.25 MB dense) is the one sparse tensor: the file stays near the float one's size.
    assert [s.values.name for s in saved.graph.sparse_initializer] != []
    assert out.stat().st_size < 1.5 * src.stat().st_size, (out.stat().st_size, src.stat().st_size)
    # Storage only: the written model computes what the in-memory one does, bit for bit.
    for feed in _feeds(3, 2):
        np.testing.assert_array_equal(_run(str(out), feed), _run(result.model, feed))


def test_sparse_initializers_are_read(tmp_path):
    """A model that stores a weight as a sparse_initializer quantizes like its dense twin (onnx-ir alone drops them)."""
    dense = onnxptq.quantize(_model(), "BF16", data=_feeds(8, 1)).model
    sparse_in = sparsify_floats(dense)
    assert sparse_in is not dense and len(sparse_in.graph.sparse_initializer) == 1
    src = tmp_path / "sparse_float.onnx"
    onnx.save_model(sparsify_floats(_float_folded()), str(src))
    result = onnxptq.quantize(str(src), "BF16", data=_feeds(8, 1))
    for feed in _feeds(3, 2):
        np.testing.assert_array_equal(_run(result.model, feed), _run(dense, feed))


def _float_folded() -> onnx.ModelProto:
    """The float model with its bank already an initializer (as a tool that folded it would write it)."""
    idx, val = _bank()
    flat = np.zeros(BINS * BANDS, np.float32)
    flat[idx] = val
    model = _model()
    keep = [n for n in model.graph.node if n.op_type not in ("ConstantOfShape", "ScatterElements", "Reshape")]
    del model.graph.node[:]
    model.graph.node.extend(keep)
    inits = [t for t in model.graph.initializer if t.name in ("eps", "w2")]
    del model.graph.initializer[:]
    model.graph.initializer.extend(inits + [numpy_helper.from_array(flat.reshape(BINS, BANDS), "bank")])
    return model


def test_what_stays_dense():
    """Small, dense-enough and signed-zero tensors stay dense; a sparse one reads back to the same array."""
    rng = np.random.default_rng(3)
    sparse = np.zeros((64, 128), np.float32)
    sparse.flat[rng.choice(sparse.size, 500, replace=False)] = rng.normal(size=500)
    half_full = sparse.copy()
    half_full.flat[: sparse.size // 2] = 1.0
    signed = sparse.copy()
    signed[0, 0] = -0.0
    small = np.zeros((8, 8), np.float32)
    names = {"sparse": sparse, "half_full": half_full, "signed": signed, "small": small}
    graph = helper.make_graph([helper.make_node("Identity", [k], [k + "_out"]) for k in names], "g", [],
                              [helper.make_tensor_value_info(k + "_out", TensorProto.FLOAT, None) for k in names],
                              [numpy_helper.from_array(v, k) for k, v in names.items()])
    model = helper.make_model(graph)
    stored = sparsify_floats(model)
    assert [s.values.name for s in stored.graph.sparse_initializer] == ["sparse"]
    assert {t.name for t in stored.graph.initializer} == {"half_full", "signed", "small"}
    assert len(model.graph.sparse_initializer) == 0  # the caller's model is untouched
    back = {t.name: numpy_helper.to_array(t) for t in densify(stored).graph.initializer}
    np.testing.assert_array_equal(back["sparse"], sparse)
    assert back["sparse"].dtype == np.float32
