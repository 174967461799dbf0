"""Delivered block files under short tensor names (issue 26 item 2, branch blockfile12): the real
PP-OCR cls model (585 KB of fp32 weights under Paddle's names) is within the issue's ≤ 0.30x of its
fp32 file for BFP16 and MXINT8 only with the model's own tensors written short
(pipeline/lean_file.short_value_names); the file computes the in-memory model's outputs bit for bit,
keeps the graph's input and output names and the model's node names, gives the same bytes when
written again, and ``onnxptq report`` pairs its tensors with the float model's as it pairs the
in-memory model's: by node name, or by structure where a tool stripped the names."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import onnxptq
from onnxptq.analysis.report import compute_report, match_tensors
from onnxptq.graph.naming import node_names
from onnxptq.pipeline import lean_file
from onnxptq.pipeline.prepare import prepare_for_quantization

PRESETS = ("BFP16", "MXINT8")


@pytest.fixture(scope="module")
def cls_files(tmp_path_factory):
    """cls quantized under each preset (defaults, repair off): (float path, feeds, {preset: (memory, file path)})."""
    from testkit.models import model_path
    from testkit.ocr import render_cls

    images, _ = render_cls(3, seed=4)
    feeds = [{"x": images[i: i + 1]} for i in range(3)]
    folder = tmp_path_factory.mktemp("names")
    out = {}
    for preset in PRESETS:
        path = folder / f"cls.{preset}.onnx"
        result = onnxptq.quantize(str(model_path("cls")), onnxptq.get_preset(preset).replace(repair=False), feeds[:2],
                                  output=str(path))
        out[preset] = (result.model, path)
    return str(model_path("cls")), feeds, out


def _written(model: onnx.ModelProto) -> int:
    """Bytes of ``model`` as the lean write gives it (the undo restores the model after)."""
    with lean_file.lean(model):
        return len(model.SerializeToString())


def _run(data: bytes, feeds: list[dict]) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    return [o for f in feeds for o in sess.run(None, f)]


@pytest.mark.parametrize("preset", PRESETS)
def test_cls_block_file_within_the_issue_target(cls_files, preset, monkeypatch):
    """≤ 0.30x with short names (0.293 BFP16, 0.295 MXINT8 when written); over it with the model's
    own names (0.316, 0.319: what blockfile11 delivered) and the convolutions' implied attributes
    written as before (packed18's step takes 0.0067 more off)."""
    source, _, out = cls_files
    memory, path = out[preset]
    fp32 = len(open(source, "rb").read())
    assert path.stat().st_size / fp32 <= 0.30, (preset, path.stat().st_size / fp32)
    monkeypatch.setattr(lean_file, "LEAN_NAMES", False)
    monkeypatch.setattr(lean_file, "LEAN_CONV_ATTRIBUTES", False)
    assert _written(memory) / fp32 > 0.30, preset


@pytest.mark.parametrize("preset", PRESETS)
def test_short_names_same_outputs_and_the_model_restored(cls_files, preset):
    """Same output bits as the in-memory model (long names); the graph's inputs and outputs keep
    their names and the model's nodes theirs, every other tensor name is at most 3 characters; the
    file written again is the same bytes; the in-memory model keeps its names after the write."""
    _, feeds, out = cls_files
    memory, path = out[preset]
    file = onnx.load(str(path))
    onnx.checker.check_model(file)
    for a, b in zip(_run(memory.SerializeToString(), feeds), _run(path.read_bytes(), feeds)):
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), preset
    g = file.graph
    io_names = {v.name for v in list(g.input) + list(g.output)}
    assert io_names == {v.name for v in list(memory.graph.input) + list(memory.graph.output)}
    convs = [n.name for n in memory.graph.node if n.op_type == "Conv"]
    assert len(convs) > 20 and sorted(convs) == sorted(n.name for n in g.node if n.op_type == "Conv")  # the model's node names, as nodes_to_exclude and tools name them
    inner = {o for n in g.node for o in n.output} | {t.name for t in g.initializer}
    assert len(inner) > 300 and all(len(name) <= 3 for name in inner - io_names), sorted(inner - io_names, key=len)[-3:]
    assert any(len(t.name) > 12 for t in memory.graph.initializer)  # the in-memory names stay
    again = onnx.ModelProto()
    again.CopyFrom(file)
    with lean_file.lean(again):
        assert again.SerializeToString() == file.SerializeToString()
    assert again == file


@pytest.mark.parametrize("preset", PRESETS)
def test_report_pairs_the_short_named_file_as_the_in_memory_model(cls_files, preset, monkeypatch):
    """``match_tensors`` on the delivered file (short tensor names) finds the same float tensors as
    on the in-memory model, each with the same quantizer input (``pre``) up to the renaming, also
    with every node name stripped (a tool's rewrite): then the nodes are paired by structure.
    Without that pairing (by name and shared output only) it finds fewer than half of them."""
    source, feeds, out = cls_files
    memory, path = out[preset]
    float_model = prepare_for_quantization(onnx.load(source))
    node_names(float_model)
    named = onnx.load(str(path))
    assert match_tensors(float_model, named).keys() == match_tensors(float_model, memory).keys()
    file = onnx.load(str(path))
    for n in file.graph.node:
        n.name = ""
    by_name, by_structure = match_tensors(float_model, memory), match_tensors(float_model, file)
    assert len(by_name) >= 100 and by_structure.keys() == by_name.keys(), sorted(set(by_name) ^ set(by_structure))[:5]
    assert all((a.pre is None) == (b.pre is None) for a, b in ((by_name[k], by_structure[k]) for k in by_name))
    # the same values: each matched pair read on one feed, in the in-memory model and in the file
    wanted = list(by_name)[:: max(1, len(by_name) // 12)]
    values = {}
    for label, model, names in (("memory", memory, [by_name[k].quantized for k in wanted]),
                                ("file", file, [by_structure[k].quantized for k in wanted])):
        m = onnx.ModelProto()
        m.CopyFrom(model)
        known = {t.name for t in m.graph.initializer}
        fetch = [n for n in names if n not in known]
        m.graph.output.extend(onnx.ValueInfoProto(name=n) for n in fetch)
        got = dict(zip(fetch, ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(fetch, feeds[0])))
        inits = {t.name: onnx.numpy_helper.to_array(t) for t in m.graph.initializer}
        values[label] = [got[n] if n in got else inits[n] for n in names]
    for k, a, b in zip(wanted, values["memory"], values["file"]):
        assert np.array_equal(a, b), k
    from onnxptq.analysis import report

    monkeypatch.setattr(report, "_pair_by_structure", lambda f, q, pairs: pairs)
    assert len(match_tensors(float_model, file)) < len(by_name) // 2


def test_report_figures_of_a_short_named_file(tmp_path):
    """The whole report (figures) on a small CNN's delivered MXINT8 file, its node names stripped,
    equals the report on its in-memory model, row for row."""
    from conftest import make_small_cnn, small_cnn_feeds

    model = make_small_cnn()
    path = tmp_path / "q.onnx"
    result = onnxptq.quantize(model, onnxptq.get_preset("MXINT8").replace(repair=False), small_cnn_feeds(3), output=str(path))
    float_model = prepare_for_quantization(model)
    node_names(float_model)
    file = onnx.load(str(path))
    for n in file.graph.node:  # paired by structure (a tool stripped the names)
        n.name = ""
    memory_rows = {t.name: t for t in compute_report(float_model, result.model, small_cnn_feeds(3, seed=7)).tensors}
    file_rows = {t.name: t for t in compute_report(float_model, file, small_cnn_feeds(3, seed=7)).tensors}
    assert memory_rows.keys() == file_rows.keys() and len(memory_rows) >= 6
    for name, a in memory_rows.items():
        b = file_rows[name]
        assert (a.sqnr_db, a.local_sqnr_db, a.elements, a.role, a.op_type) == (b.sqnr_db, b.local_sqnr_db, b.elements, b.role, b.op_type), name


def _cast_pair_cnn() -> onnx.ModelProto:
    """Two Convs with an exact float16 Cast pair between them (quantization removes it) and
    one-letter tensor names, as hand-made and test models have: the delivered file's short names
    reuse those the quantized model no longer holds (the weights ``a``-``d``, the pair's ``k``)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, s, shape).astype(np.float32), name)
             for name, s, shape in (("a", 0.3, (8, 3, 3, 3)), ("b", 0.1, (8,)), ("c", 0.2, (8, 8, 3, 3)), ("d", 0.1, (8,)))]
    nodes = [helper.make_node("Conv", ["x", "a", "b"], ["e"], name="conv1", pads=[1] * 4),
             helper.make_node("Relu", ["e"], ["f"], name="relu1"),
             helper.make_node("Cast", ["f"], ["k"], name="c16", to=TensorProto.FLOAT16),
             helper.make_node("Cast", ["k"], ["m"], name="c32", to=TensorProto.FLOAT),
             helper.make_node("Conv", ["m", "c", "d"], ["g"], name="conv2", pads=[1] * 4),
             helper.make_node("Add", ["g", "f"], ["h"], name="add1"),
             helper.make_node("GlobalAveragePool", ["h"], ["y"], name="gap")]
    graph = helper.make_graph(nodes, "cast_pair", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8, 1, 1])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def test_report_leaves_a_removed_cast_pair_unpaired_in_memory_and_in_the_file(tmp_path):
    """The Cast pair quantization removed stays unpaired (as before blockfile12): not paired by
    structure with a Cast of a weight's decode chain (a float node whose input no pair explains
    has no counterpart to find), nor by its output's name with the file's decode Cast that the
    short names wrote under that name. Its tensor ``k`` is no row, ``m`` (read as ``f``'s
    quantized form) has no quantizer input in the model, and the file's rows are the in-memory
    model's."""
    model = _cast_pair_cnn()
    rng = np.random.default_rng(1)
    feeds = [{"x": rng.normal(0, 1, (1, 3, 16, 16)).astype(np.float32)} for _ in range(3)]
    path = tmp_path / "q.onnx"
    result = onnxptq.quantize(model, onnxptq.get_preset("MXINT8").replace(repair=False), feeds, output=str(path))
    float_model = prepare_for_quantization(model)
    node_names(float_model)
    assert [n.op_type for n in float_model.graph.node].count("Cast") == 2
    assert not any(n.op_type == "Cast" and n.input[0] == "f" for n in result.model.graph.node)  # the pair was removed
    memory, file = match_tensors(float_model, result.model), match_tensors(float_model, onnx.load(str(path)))
    assert sorted(memory) == ["a", "b", "c", "d", "m", "x"], sorted(memory)
    assert memory["m"].quantized == "f_DequantizeLinear_Output" and memory["m"].pre is None, memory["m"]
    assert file.keys() == memory.keys(), sorted(set(file) ^ set(memory))
    assert all((file[k].pre is None) == (memory[k].pre is None) for k in memory)


def test_short_names_never_take_a_float_tensors_name(tmp_path):
    """The short names avoid every tensor name of the float model: on a model of one-letter names
    whose Cast pair (``k``) quantization removes, no name the file made up is one of the float
    model's, so a tool pairing the file with the float model by name meets a float name only on
    that tensor. Without ``avoid`` the made-up names start at ``a``, the float model's own."""
    model = _cast_pair_cnn()
    rng = np.random.default_rng(1)
    feeds = [{"x": rng.normal(0, 1, (1, 3, 16, 16)).astype(np.float32)} for _ in range(3)]
    path = tmp_path / "q.onnx"
    result = onnxptq.quantize(model, onnxptq.get_preset("MXINT8").replace(repair=False), feeds, output=str(path))
    from onnxptq.graph.walk import tensor_names

    float_names = tensor_names(model)
    made_up = tensor_names(onnx.load(str(path))) - tensor_names(result.model)
    assert made_up, "the file has short names"
    assert not made_up & float_names, sorted(made_up & float_names)
