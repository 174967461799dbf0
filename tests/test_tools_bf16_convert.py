"""BF16 conversion: numerics, every format, control flow, MatMul merging, the tools and the CLI."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq import cli
from onnxptq.conversion.bf16 import BF16_MAX, FLT_MIN, FORMATS, convert_float_to_bf16, round_bf16, saturate
from onnxptq.conversion.convert import convert_model
from onnxptq.conversion.fp16 import convert_float16_to_float, convert_float_to_float16
from onnxptq.tools import convert_fp16_to_bf16, convert_fp32_to_bf16


def _run(model: onnx.ModelProto | str, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
    src = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    return ort.InferenceSession(src, providers=["CPUExecutionProvider"]).run(None, feed)


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    a64, b64 = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a64 @ b64 / (np.linalg.norm(a64) * np.linalg.norm(b64)))


def _model(nodes, inputs, outputs, inits, opset: int = 13) -> onnx.ModelProto:
    m = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, inits), opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def _vi(name: str, shape, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


# ------------------------------------------------------------------------------------------
# numerics


def test_saturate_follows_reference_clipping():
    w = np.array([0.0, -0.0, 1e-39, -1e-39, 3.4e38, -3.4e38, 1.5, np.float32(3.0e38)], np.float32)
    got = saturate(w)
    expected = np.array([0.0, -0.0, FLT_MIN, -FLT_MIN, BF16_MAX, -BF16_MAX, 1.5, 3.0e38], np.float32)
    np.testing.assert_array_equal(got, expected)
    assert np.all(np.isfinite(round_bf16(got)))  # clipped weights never become inf in bf16


def test_round_bf16_is_round_to_nearest_even():
    # 1 + 2^-8 is a tie between 1 and 1 + 2^-7: even mantissa (1.0) wins; 1 + 3*2^-8 rounds up.
    x = np.array([1 + 2**-8, 1 + 3 * 2**-8, 3.4e38], np.float32)
    np.testing.assert_array_equal(round_bf16(x), np.array([1.0, 1 + 2**-6, np.inf], np.float32))
    v = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    np.testing.assert_array_equal(round_bf16(v), v.astype(ml_dtypes.bfloat16).astype(np.float32))


def _mlp(weight_scale: float = 1.0) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w1 = (rng.standard_normal((16, 32)) * weight_scale).astype(np.float32)
    w2 = rng.standard_normal((32, 8)).astype(np.float32) * 0.2
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Add", ["h", "b1"], ["hb"]),
        helper.make_node("Sigmoid", ["hb"], ["s"]),
        helper.make_node("Mul", ["hb", "s"], ["a"]),
        helper.make_node("MatMul", ["a", "w2"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(w1, "w1"),
        numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), "b1"),
        numpy_helper.from_array(w2, "w2"),
    ]
    return _model(nodes, [_vi("x", [4, 16])], [_vi("y", [4, 8])], inits)


def _mlp_reference(model: onnx.ModelProto, x: np.ndarray, activations: str) -> np.ndarray:
    """NumPy BF16 simulation of :func:`_mlp` (weights saturated + rounded, activations as asked)."""
    w = {t.name: round_bf16(saturate(numpy_helper.to_array(t))) for t in model.graph.initializer}
    r = round_bf16
    h = r(x) @ w["w1"]
    if activations == "all":
        h = r(h)
        hb = r(h + w["b1"])
        s = r(1 / (1 + np.exp(-hb)))
        a = r(hb * s)
        return r(a @ w["w2"])
    hb = h + w["b1"]
    a = hb * (1 / (1 + np.exp(-hb)))
    return r(a) @ w["w2"]


@pytest.mark.parametrize("activations", ["compute_inputs", "all"])
def test_with_cast_matches_numpy_simulation(activations):
    model = _mlp()
    x = np.random.default_rng(1).standard_normal((4, 16)).astype(np.float32)
    got = _run(convert_float_to_bf16(model, "with_cast", activations=activations), {"x": x})[0]
    np.testing.assert_allclose(got, _mlp_reference(model, x, activations), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_loads_runs_and_stays_close(fmt):
    model = _mlp()
    x = np.random.default_rng(1).standard_normal((4, 16)).astype(np.float32)
    converted = convert_model(model, fmt)
    onnx.checker.check_model(converted)
    out = _run(converted, {"x": x})[0]
    assert out.dtype == np.float32
    assert _cos(out, _run(model, {"x": x})[0]) > 0.999


def test_formats_that_round_the_same_points_agree_bit_for_bit():
    model = _mlp()
    x = np.random.default_rng(2).standard_normal((4, 16)).astype(np.float32)
    with_cast = _run(convert_float_to_bf16(model, "with_cast", activations="all"), {"x": x})[0]
    qdq = _run(convert_float_to_bf16(model, "customqdq", activations="all"), {"x": x})[0]
    real = _run(convert_float_to_bf16(model, "bf16"), {"x": x})[0]
    np.testing.assert_array_equal(with_cast, qdq)
    np.testing.assert_array_equal(with_cast, real)


def test_layouts():
    model = _mlp()
    wc = convert_float_to_bf16(model, "with_cast")
    assert all(t.data_type == TensorProto.BFLOAT16 for t in wc.graph.initializer)  # stored at half size
    sim = convert_float_to_bf16(model, "simulate_bf16")
    assert sum(n.op_type == "Cast" for n in sim.graph.node) == 2  # only the input pair
    for t in sim.graph.initializer:
        v = numpy_helper.to_array(t)
        np.testing.assert_array_equal(v, round_bf16(v))
    qdq = convert_float_to_bf16(model, "customqdq")
    assert {f.name for f in qdq.functions} == {"BF16QuantizeLinear", "BF16DequantizeLinear"}
    assert any(n.op_type == "BF16QuantizeLinear" and n.input[0].startswith("w1") for n in qdq.graph.node)
    real = convert_float_to_bf16(model, "bf16")
    assert all(t.data_type == TensorProto.BFLOAT16 for t in real.graph.initializer)
    assert real.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT


def test_weight_overflow_is_saturated_not_inf():
    model = _mlp()
    w1 = numpy_helper.to_array(model.graph.initializer[0]).copy()
    w1[0, 0] = 3.4e38  # rounds to inf in bf16 unless clipped
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(w1, "w1"))
    converted = convert_float_to_bf16(model, "with_cast", optimize=False)
    stored = {t.name: numpy_helper.to_array(t).astype(np.float32) for t in converted.graph.initializer}
    w = next(v for k, v in stored.items() if k.startswith("w1"))
    assert np.isfinite(w).all() and w[0, 0] == BF16_MAX


def test_shape_derived_floats_are_not_rounded():
    # y = Resize(x, scales=[1, 1, 1/3*3.0...]) with a scale that bf16 would change
    scales = np.array([1.0, 1.0, 1.0, 1.0 / 3.0 * 3.0001], np.float32)
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Resize", ["r", "", "scales"], ["y"], mode="nearest"),
    ]
    model = _model(nodes, [_vi("x", [1, 1, 2, 300])], [_vi("y", [1, 1, 2, 300])], [numpy_helper.from_array(scales, "scales")])
    converted = convert_float_to_bf16(model, "with_cast", optimize=False)
    assert numpy_helper.to_array(next(t for t in converted.graph.initializer if t.name == "scales")).dtype == np.float32
    x = np.ones((1, 1, 2, 300), np.float32)
    assert _run(converted, {"x": x})[0].shape == _run(model, {"x": x})[0].shape


# ------------------------------------------------------------------------------------------
# control flow and MatMul merging


def _control_flow_model() -> onnx.ModelProto:
    """If (MatMul with a branch-local weight vs outer weight) feeding a Loop that iterates x@W+b."""
    rng = np.random.default_rng(3)
    w_then = numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32) * 0.3, "w_then")
    then_g = helper.make_graph([helper.make_node("MatMul", ["x", "w_then"], ["t_out"])], "then", [], [_vi("t_out", [2, 8])], [w_then])
    else_g = helper.make_graph([helper.make_node("MatMul", ["x", "w_outer"], ["e_out"])], "else", [], [_vi("e_out", [2, 8])])
    body = helper.make_graph(
        [
            helper.make_node("MatMul", ["h_in", "w_loop"], ["mm"]),
            helper.make_node("Add", ["mm", "b_loop"], ["pre"]),
            helper.make_node("Tanh", ["pre"], ["h_out"]),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "body",
        [_vi("iter", [], TensorProto.INT64), _vi("cond_in", [], TensorProto.BOOL), _vi("h_in", [2, 8])],
        [_vi("cond_out", [], TensorProto.BOOL), _vi("h_out", [2, 8])],
        [numpy_helper.from_array(rng.standard_normal(8).astype(np.float32) * 0.1, "b_loop")],
    )
    nodes = [
        helper.make_node("If", ["flag"], ["branch"], then_branch=then_g, else_branch=else_g),
        helper.make_node("Loop", ["trips", "", "branch"], ["y"], body=body),
    ]
    inits = [
        numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32) * 0.3, "w_outer"),
        numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32) * 0.3, "w_loop"),
        numpy_helper.from_array(np.array(3, np.int64), "trips"),
    ]
    return _model(nodes, [_vi("x", [2, 8]), _vi("flag", [], TensorProto.BOOL)], [_vi("y", [2, 8])], inits)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("flag", [True, False])
def test_if_and_loop_subgraphs_convert(fmt, flag):
    model = _control_flow_model()
    x = np.random.default_rng(4).standard_normal((2, 8)).astype(np.float32)
    feed = {"x": x, "flag": np.array(flag)}
    converted = convert_model(model, fmt)
    got = _run(converted, feed)[0]
    ref = _run(model, feed)[0]
    assert _cos(got, ref) > 0.999
    if fmt != "simulate_bf16":
        assert not np.array_equal(got, ref)  # the subgraphs really were rounded
    # numpy simulation of the with_cast default: every MatMul reads bf16 operands
    if fmt == "with_cast":
        inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
        then_g = next(a.g for a in model.graph.node[0].attribute if a.name == "then_branch")
        then_w = numpy_helper.to_array(then_g.initializer[0])
        b = numpy_helper.to_array(model.graph.node[1].attribute[0].g.initializer[0])
        h = round_bf16(x) @ round_bf16(then_w if flag else inits["w_outer"])
        for _ in range(3):
            h = np.tanh(round_bf16(h) @ round_bf16(inits["w_loop"]) + round_bf16(b))
        np.testing.assert_allclose(got, h, rtol=1e-5, atol=1e-5)


def _three_matmuls() -> onnx.ModelProto:
    rng = np.random.default_rng(5)
    nodes, inits = [], []
    for k in range(3):
        inits.append(numpy_helper.from_array(rng.standard_normal((32, 16)).astype(np.float32) * 0.2, f"w{k}"))
        nodes.append(helper.make_node("MatMul", ["x", f"w{k}"], [f"m{k}"]))
    nodes += [helper.make_node("Mul", ["m0", "m1"], ["p"]), helper.make_node("Add", ["p", "m2"], ["y"])]
    return _model(nodes, [_vi("x", [4, 32])], [_vi("y", [4, 16])], inits)


@pytest.mark.parametrize("fmt", FORMATS)
def test_three_matmuls_sharing_an_input_are_merged(fmt):
    model = _three_matmuls()
    x = np.random.default_rng(6).standard_normal((4, 32)).astype(np.float32)
    merged = convert_model(model, fmt)
    ops = [n.op_type for n in merged.graph.node]
    assert ops.count("MatMul") == 1 and "Split" in ops
    separate = convert_model(model, fmt, merge_matmuls=False)
    assert [n.op_type for n in separate.graph.node].count("MatMul") == 3
    got, ref = _run(merged, {"x": x})[0], _run(separate, {"x": x})[0]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    assert _cos(got, _run(model, {"x": x})[0]) > 0.999


# ------------------------------------------------------------------------------------------
# fp16 models


def test_fp16_model_keeps_its_declared_io_types():
    half = convert_float_to_float16(_mlp())
    assert half.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT16
    x = np.random.default_rng(1).standard_normal((4, 16)).astype(np.float16)
    ref = _run(half, {"x": x})[0]
    for fmt in FORMATS:
        converted = convert_model(half, fmt, source="fp16")
        assert converted.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT16
        assert converted.graph.output[0].type.tensor_type.elem_type == TensorProto.FLOAT16
        out = _run(converted, {"x": x})[0]
        assert out.dtype == np.float16 and _cos(out, ref) > 0.999
    wide = convert_model(half, "with_cast", source="fp16", keep_io_types=False)
    assert _run(wide, {"x": x.astype(np.float32)})[0].dtype == np.float32


def test_fp16_to_fp32_widening_is_exact():
    half = convert_float_to_float16(_mlp())
    wide = convert_float16_to_float(half)
    x = np.random.default_rng(1).standard_normal((4, 16)).astype(np.float16)
    assert not any(t.data_type == TensorProto.FLOAT16 for t in wide.graph.initializer)
    np.testing.assert_allclose(
        _run(wide, {"x": x.astype(np.float32)})[0], _run(half, {"x": x})[0].astype(np.float32), rtol=5e-3, atol=5e-3
    )


# ------------------------------------------------------------------------------------------
# tools and CLI


@pytest.fixture
def mlp_path(tmp_path):
    path = tmp_path / "mlp.onnx"
    onnx.save(_mlp(), path)
    return path


@pytest.mark.parametrize("fmt", FORMATS)
def test_fp32_tool_every_format(tmp_path, mlp_path, fmt, capsys):
    out = tmp_path / f"mlp_{fmt}.onnx"
    assert convert_fp32_to_bf16.main(["--input", str(mlp_path), "--output", str(out), "--format", fmt]) == 0
    x = np.ones((4, 16), np.float32)
    assert np.isfinite(_run(str(out), {"x": x})[0]).all()


def test_fp32_tool_flags_and_errors(tmp_path, mlp_path, capsys):
    out = tmp_path / "ext.onnx"
    rc = convert_fp32_to_bf16.main(
        ["--input", str(mlp_path), "--output", str(out), "--save_as_external_data", "--activations", "all", "--bogus"]
    )
    assert rc == 0 and (tmp_path / "ext.onnx.data").exists()
    assert "ignoring unknown arguments: --bogus" in capsys.readouterr().err
    before = mlp_path.read_bytes()
    assert convert_fp32_to_bf16.main(["--input", str(mlp_path), "--output", str(mlp_path)]) == 2
    assert "refusing to overwrite the input" in capsys.readouterr().err
    assert mlp_path.read_bytes() == before
    assert convert_fp32_to_bf16.main(["--input", str(mlp_path), "--output", str(out), "--format", "bf8"]) == 2
    assert "bf8" in capsys.readouterr().err
    assert convert_fp32_to_bf16.main(["--input", str(tmp_path / "none.onnx"), "--output", str(out)]) == 2


def test_fp16_tool_and_cli(tmp_path, capsys):
    half_path = tmp_path / "half.onnx"
    onnx.save(convert_float_to_float16(_mlp()), half_path)
    out = tmp_path / "bf16.onnx"
    assert convert_fp16_to_bf16.main(["--input", str(half_path), "--output", str(out), "--format", "bf16"]) == 0
    assert onnx.load(out).graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT16
    out2 = tmp_path / "bf16_float_io.onnx"
    assert convert_fp16_to_bf16.main(["--input", str(half_path), "--output", str(out2), "--float_io"]) == 0
    assert onnx.load(out2).graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT
    out3 = tmp_path / "cli.onnx"
    assert cli.main(["convert", str(half_path), "-o", str(out3), "--format", "customqdq"]) == 0
    assert "(fp16)" in capsys.readouterr().out  # --from auto detected the fp16 model
    assert onnx.load(out3).graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT16
    assert cli.main(["convert", str(half_path), "-o", str(half_path)]) == 2
