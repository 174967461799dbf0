"""onnxruntime 1.32 segfaults opening a float16 batch ``Transpose -> MatMul`` with a constant operand
(bench/ort_fp16_crash.py): the graph check finds it, and quantizing such a model survives.

The quantizations run in a subprocess: a crash there is a failed test, not a dead test worker."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq.graph.ort_crash import CRASH_FUSION, batch_transpose, crash_trigger, crash_warning, may_hold_trigger

PRESETS = ("A8W8", "A16W8", "BF16", "FP16", "BFP16", "MX9", "MXINT8", "MXFP8_E4M3", "MXFP4")


def _model(perm=(1, 0, 2), dtype=TensorProto.FLOAT16, const=True, between=(), transpose_is_output=False) -> onnx.ModelProto:
    """x -> Transpose(perm) -> [Casts ``between``] -> MatMul(., w): the minimal crash (exportfuzz)."""
    np_dtype = np.float16 if dtype == TensorProto.FLOAT16 else np.float32
    shape = [8] * len(perm) if perm != (1, 0, 2) else ["batch", 4, 16]
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((16 if perm == (1, 0, 2) else 8, 8)).astype(np_dtype), "w")
    nodes = [helper.make_node("Transpose", ["x"], ["t0"], perm=list(perm), name="transpose")]
    for i, to in enumerate(between):
        nodes.append(helper.make_node("Cast", [f"t{i}"], [f"t{i + 1}"], to=to, name=f"cast{i}"))
    nodes.append(helper.make_node("MatMul", [f"t{len(between)}", "w"], ["y"], name="matmul"))
    inputs = [helper.make_tensor_value_info("x", dtype, shape)]
    if not const:
        inputs.append(helper.make_tensor_value_info("w", dtype, list(w.dims)))
    out_shape = [4, "batch", 8] if perm == (1, 0, 2) else [8] * len(perm)
    outputs = [helper.make_tensor_value_info("y", dtype, out_shape)]
    if transpose_is_output:
        outputs.append(helper.make_tensor_value_info("t0", dtype, out_shape[:-1] + [16 if perm == (1, 0, 2) else 8]))
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=[w] if const else [])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_batch_transposes_are_the_fused_forms():
    assert batch_transpose([1, 0, 2]) and batch_transpose([1, 2, 0]) and batch_transpose([1, 2, 0, 3]) and batch_transpose([1, 2, 3, 0])
    for perm in ([1, 0], [0, 2, 1], [2, 0, 1], [2, 1, 0], [1, 0, 2, 3], [0, 2, 1, 3], [2, 0, 1, 3]):
        assert not batch_transpose(perm), perm


def test_the_check_names_exactly_the_crashing_graphs():
    """The grid's crashing points (bench/ort_fp16_crash.py) and their near misses that open."""
    assert crash_trigger(_model()) == ["matmul"]
    assert crash_trigger(_model((1, 2, 0, 3))) == ["matmul"]
    # float16 -> float -> float16 round trips are dropped by onnxruntime first (the FP16 preset's Cast quantizers)
    assert crash_trigger(_model(between=(TensorProto.FLOAT, TensorProto.FLOAT16))) == ["matmul"]
    assert crash_trigger(_model(dtype=TensorProto.FLOAT)) == []
    assert crash_trigger(_model(const=False)) == []
    assert crash_trigger(_model(transpose_is_output=True)) == []
    assert crash_trigger(_model((2, 0, 1))) == []
    assert crash_trigger(_model(between=(TensorProto.BFLOAT16, TensorProto.FLOAT16))) == []
    assert CRASH_FUSION in crash_warning(_model(), "m.onnx") and crash_warning(_model(dtype=TensorProto.FLOAT), "m.onnx") is None


def test_functions_count_and_nested_graphs_do_not():
    """A model-local function is inlined before the fusion (crashes); an If branch opens (both measured)."""
    model = _model()
    function = helper.make_function("local", "F", ["x"], ["y"], [*model.graph.node], [helper.make_opsetid("", 17)])
    call = helper.make_graph([helper.make_node("F", ["x"], ["y"], domain="local")], "g", [*model.graph.input],
                             [*model.graph.output], initializer=[*model.graph.initializer])
    with_function = helper.make_model(call, functions=[function], opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])
    with_function.functions[0].node.insert(0, helper.make_node("Constant", [], ["w"], value=model.graph.initializer[0]))
    assert crash_trigger(with_function) == ["F/matmul"]
    with_function.functions[0].node[0].attribute[0].t.data_type = TensorProto.FLOAT  # (values aside) a float body
    assert crash_trigger(with_function) == []
    branch = helper.make_graph([*model.graph.node], "then", [], [*model.graph.output], initializer=[*model.graph.initializer])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "else", [], [*model.graph.output])
    outer = helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=other)], "g",
                              [*model.graph.input, helper.make_tensor_value_info("c", TensorProto.BOOL, [])], [*model.graph.output])
    assert crash_trigger(helper.make_model(outer)) == []


def test_the_byte_prefilter_never_hides_a_trigger():
    """Sessions opened from bytes parse them only where this says so: it must say so wherever the
    check would find one (both ints encodings), and it spares the bytes without a batch perm."""
    for perm in ((1, 0, 2), (1, 2, 0), (1, 2, 0, 3), (1, 2, 3, 0)):
        model = _model(perm)
        assert crash_trigger(model) and may_hold_trigger(model.SerializeToString()), perm
        # the same ints packed (field 8, wire type 2), as other writers may spell them
        assert may_hold_trigger(b"MatMul" + b"\x0a\x04perm\x42" + bytes([len(perm)]) + bytes(perm)), perm
    assert not may_hold_trigger(_model((2, 0, 1)).SerializeToString())
    assert not may_hold_trigger(_model((0, 2, 1)).SerializeToString())
    assert not may_hold_trigger(b"MatMul" + b"\x0a\x04perm\x42\x03\x00\x02\x01")


SCRIPT = textwrap.dedent("""
    import logging, sys, numpy as np, onnx, onnxptq, onnxruntime as ort
    model = onnx.load(sys.argv[1])
    rng = np.random.default_rng(0)
    data = [{"x": rng.standard_normal((2, 4, 16)).astype(np.float16)} for _ in range(4)]
    records = []
    handler = logging.Handler(); handler.emit = records.append
    logging.getLogger("onnxptq").addHandler(handler)
    for preset in sys.argv[2:]:
        records.clear()
        result = onnxptq.quantize(model, preset, data=data)
        warned = any("disabled_optimizers" in r.getMessage() for r in records if r.levelno == logging.WARNING)
        options = ort.SessionOptions()
        session = ort.InferenceSession(result.model.SerializeToString(), options, disabled_optimizers=["MatmulTransposeFusion"])
        y = session.run(None, data[0])[0]
        print(preset, int(warned), int(np.isfinite(y).all()), flush=True)
""")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    path = tmp_path_factory.mktemp("fp16crash") / "min.onnx"
    onnx.save(_model(), path)
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(path), *PRESETS], capture_output=True, text=True, timeout=120)
    return path, done


def test_every_preset_quantizes_the_crashing_model_in_a_live_process(runs):
    _, done = runs
    assert done.returncode == 0, f"exit {done.returncode} (-11: onnxruntime's segfault)\n{done.stderr[-2000:]}"
    rows = {line.split()[0]: line.split()[1:] for line in done.stdout.splitlines()}
    assert set(rows) == set(PRESETS)
    assert all(finite == "1" for _, finite in rows.values())
    # FP16 keeps the float16 Transpose -> (exact Casts) -> MatMul: the user is told; the others hold no trigger
    assert rows["FP16"][0] == "1" and all(rows[p][0] == "0" for p in PRESETS if p != "FP16")


STREAMED = textwrap.dedent("""
    import logging, sys
    import numpy as np
    import onnxptq
    from onnxptq.graph import external
    external.STREAM_THRESHOLD = 1  # this small model's external weights take the streaming path
    logging.basicConfig(level=logging.INFO)
    data = [{"x": np.random.default_rng(i).standard_normal((2, 4, 16)).astype(np.float16)} for i in range(4)]
    onnxptq.quantize(sys.argv[1], "FP16", data=data, output=sys.argv[2])
""")


def test_the_streaming_path_warns_too(tmp_path):
    """A model whose external weights take the streaming path (they never enter a message): its delivered model is
    checked and the user told, as on the in-memory path."""
    path = tmp_path / "min.onnx"
    onnx.save(_model(), path, save_as_external_data=True, all_tensors_to_one_file=True, location="min.data",
              size_threshold=0)
    done = subprocess.run([sys.executable, "-c", STREAMED, str(path), str(tmp_path / "out.onnx")], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stderr[-2000:]}"
    assert "streamed" in done.stderr, done.stderr[-2000:]  # the streaming path's own log line
    assert "disabled_optimizers" in done.stderr and (tmp_path / "out.onnx").exists(), done.stderr[-2000:]
