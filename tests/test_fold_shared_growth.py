"""Folds that share their source constants are judged together (fold_constants.shared_growth, foldgrow16).

Why: DAT-light's attention adds 18 relative-position biases, each a Gather of a small table
(computed from constants) through one of two shared 512 KB indices. Judged one at a time, each
lookup read more bytes (its table plus the whole index) than the byte-per-element result, so all
18 folded: the file held 14.2 MB of fp32 biases where the float file held 1 MB, and every
quantized file grew with it (MXINT8 1.83x the float file). The model here is that computation
small: six lookups of [64, 8] tables through one shared [4096] index, each result an fp32 addend.
"""

from __future__ import annotations

import importlib

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxptq
from onnxptq.graph.passes import fold_constants

fc = importlib.import_module("onnxptq.graph.passes.fold_constants")  # the package exports the function by this name

ROWS, WIDTH, LOOKUPS, TABLE = 4096, 8, 6, 64


def _lookup_net() -> onnx.ModelProto:
    """x [4096, 8] -> six Adds of a bias tables[i][idx] (tables[i] = table * scale_i), then Relu, a MatMul."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(size=(TABLE, WIDTH)).astype(np.float32), "table"),
             numpy_helper.from_array(rng.integers(0, TABLE, ROWS).astype(np.int64), "idx"),
             numpy_helper.from_array(rng.normal(size=(WIDTH, WIDTH)).astype(np.float32), "w")]
    nodes, x = [], "x"
    for i in range(LOOKUPS):
        inits.append(numpy_helper.from_array(np.array(0.5 + i, np.float32), f"scale{i}"))
        nodes += [helper.make_node("Mul", ["table", f"scale{i}"], [f"table{i}"]),      # [64, 8]: small, folds
                  helper.make_node("Gather", [f"table{i}", "idx"], [f"bias{i}"]),     # [4096, 8]: the growth
                  helper.make_node("Add", [x, f"bias{i}"], [f"s{i}"]),
                  helper.make_node("Relu", [f"s{i}"], [f"r{i}"])]
        x = f"r{i}"
    nodes.append(helper.make_node("MatMul", [x, "w"], ["y"]))
    graph = helper.make_graph(nodes, "lookups", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [ROWS, WIDTH])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [ROWS, WIDTH])], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _run(model: onnx.ModelProto, feeds: list[dict[str, np.ndarray]]) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return [sess.run(None, f)[0] for f in feeds]


@pytest.fixture(scope="module")
def lookups() -> tuple[onnx.ModelProto, list[dict[str, np.ndarray]]]:
    rng = np.random.default_rng(1)
    return _lookup_net(), [{"x": rng.normal(size=(ROWS, WIDTH)).astype(np.float32)} for _ in range(3)]


def test_shared_index_lookups_stay_computed_and_tables_fold(lookups):
    """Folded, the six Gathers stay (no [4096, 8] initializer), their small tables are folded,
    and onnxruntime gives the float model's outputs bit for bit (it folds the Gathers at load).
    Judged one at a time (the rule before foldgrow16), every lookup folds."""
    model, feeds = lookups
    folded = fold_constants(model)
    assert sum(n.op_type == "Gather" for n in folded.graph.node) == LOOKUPS
    assert not any(n.op_type == "Mul" for n in folded.graph.node)
    assert max(int(np.prod(t.dims)) for t in folded.graph.initializer) == ROWS
    for a, b in zip(_run(folded, feeds), _run(model, feeds)):
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
    with pytest.MonkeyPatch.context() as m:
        m.setattr(fc, "SHARED_GROWTH", None)
        alone = fold_constants(model)
    assert not any(n.op_type == "Gather" for n in alone.graph.node)


def test_group_growth_counts_shared_sources_once(lookups):
    """The group's sources are the index, the table and the six scales, once each; what it would
    store is six fp32 [4096, 8] addends."""
    import onnx_ir as ir

    model, _ = lookups
    shaped = fc.fold_constants_passes()[0](ir.serde.deserialize_model(model)).model  # shape inference
    graph = shaped.graph
    groups = [g for g in fc.shared_growth(graph, fc.FoldConstantsPass()._foldable) if g.growers]
    assert len(groups) == 1
    (group,) = groups
    assert group.sources == ROWS * 8 + TABLE * WIDTH * 4 + LOOKUPS * 4
    assert group.stored == LOOKUPS * ROWS * WIDTH * 4
    assert [n.op_type for n in group.growers] == ["Gather"] * LOOKUPS
    assert group.grown


@pytest.mark.parametrize("preset", ["BF16", "MXINT8"])
def test_quantized_file_holds_the_index_not_the_lookups(lookups, preset, tmp_path):
    """The delivered file is smaller than one lookup's fp32 result (the folded form holds all six,
    at 16 bits an element under BF16 and fp32 under MXINT8), and its outputs are as close to the
    float model's as the folded form's are."""
    model, feeds = lookups
    cfg = onnxptq.get_preset(preset).replace(repair=False)
    path, old = tmp_path / "q.onnx", tmp_path / "folded.onnx"
    onnxptq.quantize(model, cfg, feeds[:2], output=str(path))
    assert path.stat().st_size < ROWS * WIDTH * 4, f"{preset}: {path.stat().st_size} B"
    with pytest.MonkeyPatch.context() as m:
        m.setattr(fc, "SHARED_GROWTH", None)
        onnxptq.quantize(model, cfg, feeds[:2], output=str(old))
    assert old.stat().st_size > LOOKUPS * ROWS * WIDTH * 2  # six lookups at 16+ bits an element
    ref = _run(model, feeds)
    for new, was, r in zip(_run(onnx.load(str(path)), feeds), _run(onnx.load(str(old)), feeds), ref):
        err_new, err_old = float(np.abs(new - r).max()), float(np.abs(was - r).max())
        assert err_new <= err_old * 1.5 + 1e-6, (preset, err_new, err_old)
