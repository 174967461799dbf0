"""A float16 source is computed in fp32 inside the quantized model, its float16 interface kept
(``QuantConfig.widen_fp16``, pipeline/prepare.fp16_entry), and judged against the source as it is.

Why: quantized in fp16, int8 weights reached Conv/MatMul through ``DequantizeLinear -> Cast(FLOAT16)``
and every activation quantizer had a Cast each side; onnxruntime fused no integer kernel and A8W8
of round 20's fp16 exports ran 0.8-4.9x their source's CPU time, widened 0.3-0.7x (bench/RESULTS.md,
"fp16widen"). Built small here: Conv/BatchNorm/Relu/Conv/Relu/pool/MatMul in float16 (the project's
own fp32 -> fp16 conversion: fp16 input, weights, arithmetic and output).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxptq
from onnxptq.config.presets import get_preset
from onnxptq.conversion import convert_float_to_float16
from onnxptq.graph.passes.widen_fp16 import computes_in_half, widen_inside
from onnxptq.pipeline.calibrate import calibrate_once
from onnxptq.pipeline.prepare import fp16_entry


def _float_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)

    def init(name: str, values: np.ndarray) -> onnx.TensorProto:
        return numpy_helper.from_array(values.astype(np.float32), name)

    inits = [init("w1", rng.normal(0, 0.3, (16, 3, 3, 3))), init("b1", rng.normal(0, 0.1, 16)),
             init("bn_s", rng.uniform(0.5, 1.5, 16)), init("bn_b", rng.normal(0, 0.1, 16)),
             init("bn_m", rng.normal(0, 0.1, 16)), init("bn_v", rng.uniform(0.5, 1.5, 16)),
             init("w2", rng.normal(0, 0.15, (32, 16, 3, 3))), init("b2", rng.normal(0, 0.1, 32)),
             init("w3", rng.normal(0, 0.2, (32, 10))), init("b3", rng.normal(0, 0.1, 10))]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1] * 4, name="conv1"),
             helper.make_node("BatchNormalization", ["c1", "bn_s", "bn_b", "bn_m", "bn_v"], ["n1"], name="bn1"),
             helper.make_node("Relu", ["n1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1] * 4, name="conv2"),
             helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             helper.make_node("GlobalAveragePool", ["r2"], ["p"], name="pool"),
             helper.make_node("Flatten", ["p"], ["f"], name="flat"),
             helper.make_node("MatMul", ["f", "w3"], ["m"], name="head"),
             helper.make_node("Add", ["m", "b3"], ["y"], name="head_bias")]
    graph = helper.make_graph(nodes, "half_net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


HALF = convert_float_to_float16(_float_model())


def _feeds(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.normal(0, 1, (1, 3, 16, 16)).astype(np.float16)} for _ in range(n)]


def _run(model: onnx.ModelProto, feeds: list[dict[str, np.ndarray]]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return [session.run(None, f)[0] for f in feeds]


def _weight_readers(model: onnx.ModelProto) -> dict[str, str]:
    """Conv/MatMul node -> the op type that produces its weight input (B)."""
    producer = {o: n for n in model.graph.node for o in n.output}
    return {n.name: producer[n.input[1]].op_type if n.input[1] in producer else "initializer"
            for n in model.graph.node if n.op_type in ("Conv", "MatMul")}


@pytest.fixture(scope="module")
def quantized() -> dict[str, onnxptq.QuantizationResult]:
    data = _feeds(24, 1)
    return {mode: onnxptq.quantize(HALF, dataclasses.replace(get_preset("A8W8"), widen_fp16=widen), data=data)
            for mode, widen in (("default", None), ("fp16", False))}


def test_source_is_a_float16_model():
    assert computes_in_half(HALF) and not computes_in_half(_float_model())
    assert HALF.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT16
    assert any(i.data_type == TensorProto.FLOAT16 for i in HALF.graph.initializer)


def test_a8w8_default_keeps_the_fp16_interface_and_int8_weights_reach_the_ops(quantized):
    model = quantized["default"].model
    assert [i.type.tensor_type.elem_type for i in model.graph.input] == [TensorProto.FLOAT16]
    assert [o.type.tensor_type.elem_type for o in model.graph.output] == [TensorProto.FLOAT16]
    readers = _weight_readers(model)
    assert readers == {"conv1": "DequantizeLinear", "conv2": "DequantizeLinear", "head": "DequantizeLinear"}, readers
    # inside, the model computes in float32: no float16 left but the two interface Casts' ends
    half_values = [v.name for v in model.graph.value_info if v.type.tensor_type.elem_type == TensorProto.FLOAT16]
    assert len(half_values) <= 2, half_values
    # the user's float16 feeds fit, and the outputs stay close to the source's
    held = _feeds(6, 7)
    for q, s in zip(_run(model, held), _run(HALF, held)):
        assert q.dtype == np.float16
        q32, s32 = q.astype(np.float32).ravel(), s.astype(np.float32).ravel()
        assert float(q32 @ s32 / (np.linalg.norm(q32) * np.linalg.norm(s32))) > 0.999
        assert float(np.abs(q32 - s32).max()) < 0.05 * float(np.abs(s32).max())
    assert quantized["default"].floor is not None and quantized["default"].floor.ok


def test_widen_fp16_false_keeps_todays_fp16_form(quantized):
    """The option that keeps the form before widening: int8 weights read through a Cast to float16."""
    readers = _weight_readers(quantized["fp16"].model)
    assert set(readers.values()) == {"Cast"}, readers
    assert quantized["fp16"].model.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT16


def test_folded_weight_kept_float_is_stored_float16():
    """conv1 excluded: its BatchNorm-folded weight, fp32-folded and not float16-exact, goes back to
    the source's float16 storage (graph/passes/half_storage.py, ``rounded``)."""
    cfg = dataclasses.replace(get_preset("A8W8"), nodes_to_exclude=("conv1",), repair=False)
    model = onnxptq.quantize(HALF, cfg, data=_feeds(12, 1)).model
    conv = next(n for n in model.graph.node if n.name == "conv1")
    cast = next(n for n in model.graph.node if n.output[0] == conv.input[1])
    stored = next(i for i in model.graph.initializer if i.name == cast.input[0])
    assert cast.op_type == "Cast" and stored.data_type == TensorProto.FLOAT16
    # what stays float32 is the quantizer's own (scales), none of the source's weights
    wide = [i.name for i in model.graph.initializer if i.data_type == TensorProto.FLOAT and np.prod(i.dims) >= 16]
    assert all(n.endswith("_scale") for n in wide), wide


def _norm_model() -> onnx.ModelProto:
    """float16 MatMul -> LayerNormalization (the output): onnxruntime's CPU provider runs this
    LayerNormalization with its float16 kernel, so the source's outputs and the widened copy's
    differ. (Most ops it runs through float32 and back, fusing the round trips away: there the
    widened copy matches the source bit for bit, as it does on this file's other model.)"""
    rng = np.random.default_rng(2)
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, (16, 32)).astype(np.float16), "wa"),
             numpy_helper.from_array(np.ones(32, np.float16), "g"), numpy_helper.from_array(np.zeros(32, np.float16), "beta")]
    nodes = [helper.make_node("MatMul", ["x", "wa"], ["h"], name="mm_a"),
             helper.make_node("LayerNormalization", ["h", "g", "beta"], ["y"], axis=-1, name="norm")]
    graph = helper.make_graph(nodes, "norm_half", [helper.make_tensor_value_info("x", TensorProto.FLOAT16, ["N", 6, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, ["N", 6, 32])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("which", ["norm", "conv"])
def test_floor_reference_is_the_source_as_the_user_runs_it(which):
    """The judged float outputs are the fp16 source's own: where its fp16 LayerNormalization makes them
    differ from the widened copy's (run again), and where they are the same bits (the copy's kept).
    Decided once: where the source gave the copy's bits, later float runs (the second look's reserve)
    run the prepared copy, not the source loaded again, and still give the source's outputs."""
    model = _norm_model() if which == "norm" else HALF
    rng = np.random.default_rng(5)
    shape = (1, 6, 16) if which == "norm" else (1, 3, 16, 16)
    data = [{"x": rng.normal(0, 1, shape).astype(np.float16)} for _ in range(48)]  # 24 + a reserve of 8
    calibrated = calibrate_once(model, get_preset("A8W8"), data, holdout=8)
    assert calibrated.reference is not None and calibrated.float_outputs and calibrated.holdout_outputs
    assert calibrated.reference_same_bits is (which == "conv")
    assert (calibrated.reference_model() is calibrated.prepared) is (which == "conv")
    assert len(calibrated.reserve) == 8
    calibrated.look_again()  # the reserve's float outputs by reference_model()
    feeds = calibrated.judged_calibration_feeds(len(calibrated.float_outputs))  # float_outputs[i] is feed i's
    source = _run(model, feeds + calibrated.holdout)
    judged = [o["y"] for o in calibrated.float_outputs[:len(feeds)]] + [o["y"] for o in calibrated.holdout_outputs]
    assert len(judged) == len(source) >= 16
    for got, want in zip(judged, source):
        np.testing.assert_array_equal(got, want)
    # and where it is a choice: the widened copy's outputs differ from the source's in the last fp16 bits
    wide = _run(widen_inside(model), feeds + calibrated.holdout)
    differ = sum(not np.array_equal(w, s) for w, s in zip(wide, source))
    assert differ >= len(source) // 2 if which == "norm" else differ == 0


def test_entry_rules():
    """FP16 formats alone keep the model in fp16; ConvertFP16ToFP32 widens the interface too; a float model is untouched."""
    assert fp16_entry(HALF, get_preset("FP16"), "m")[1] is False
    assert fp16_entry(HALF, get_preset("BF16"), "m")[1] is True
    fp16 = get_preset("FP16")
    int8_tensor = dataclasses.replace(get_preset("A8W8").activation)  # an int8 tensor in an FP16 config widens
    assert fp16.replace(tensor_overrides={"t": int8_tensor}).widen_fp16_active()
    assert not fp16.replace(tensor_overrides={"t": fp16.activation}).widen_fp16_active()
    wide, inside = fp16_entry(HALF, get_preset("A8W8").replace(convert_fp16_to_fp32=True), "m")
    assert not inside and wide.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT
    plain = _float_model()
    assert fp16_entry(plain, get_preset("A8W8"), "m") == (plain, False)


def test_compat_key_widen_fp16():
    """extra_options ``WidenFP16``: absent -> automatic (None), False keeps the fp16 form; not a bool -> named error."""
    from onnxptq.compat import QuantizationConfig, to_quant_config
    from onnxptq.errors import ConfigError

    assert to_quant_config(QuantizationConfig()).widen_fp16 is None
    assert to_quant_config(QuantizationConfig(extra_options={"WidenFP16": False})).widen_fp16 is False
    with pytest.raises(ConfigError, match="WidenFP16"):
        to_quant_config(QuantizationConfig(extra_options={"WidenFP16": "no"}))


@pytest.mark.parametrize("flags, reader", [([], "DequantizeLinear"), (["--no-widen-fp16"], "Cast")])
def test_cli_flags(tmp_path, flags, reader):
    """``onnxptq quantize --no-widen-fp16`` keeps the fp16 form; without it the int8 weights reach the ops."""
    from onnxptq.cli import main as cli_main

    src, out, data = tmp_path / "m.onnx", tmp_path / "q.onnx", tmp_path / "d.npz"
    onnx.save(HALF, src)
    np.savez(data, x=np.concatenate([f["x"] for f in _feeds(6, 1)]))
    assert cli_main(["quantize", str(src), "-o", str(out), "--data", str(data), "--no-progress", "--preset", "A8W8", *flags]) == 0
    model = onnx.load(out)
    assert model.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT16
    assert _weight_readers(model)["conv2"] == reader


@pytest.mark.parametrize("preset", ["A8W8", "FP16"])
def test_prepare_for_quantization_plans_what_quantize_plans(preset):
    """``prepare_for_quantization`` (the public entry ``onnxptq inspect`` and users plan from) enters a
    float16 source as quantize does: widened inside under A8W8, the fp16 form under FP16 alone; the
    plan made from it is the one calibration made (same tensors, same formats)."""
    from onnxptq.pipeline.plan import make_plan
    from onnxptq.pipeline.prepare import prepare_for_quantization

    config = get_preset(preset)
    prepared = prepare_for_quantization(HALF, config)
    calibrated = calibrate_once(HALF, config, _feeds(4, 3))
    assert [(n.op_type, list(n.input)) for n in prepared.graph.node] == \
        [(n.op_type, list(n.input)) for n in calibrated.prepared.graph.node]
    plan = make_plan(prepared, config)
    assert {k: t.quant.describe() for k, t in plan.tensors.items()} == \
        {k: t.quant.describe() for k, t in calibrated.plan.tensors.items()}
    weights = [i for i in prepared.graph.initializer if i.name in ("w1", "w2", "w3")]
    assert len(weights) == 3
    assert all(i.data_type == (TensorProto.FLOAT if preset == "A8W8" else TensorProto.FLOAT16) for i in weights)


@pytest.mark.parametrize("flags, widened", [([], True), (["--no-widen-fp16"], False)])
def test_inspect_shows_the_widened_plan(tmp_path, capsys, flags, widened):
    """``onnxptq inspect`` on a float16 model says it is computed in fp32 inside and plans the widened
    graph (its first activation is the input's Cast to float32), as ``quantize`` would; with
    ``--no-widen-fp16`` the fp16 form's plan (the input itself), as ``quantize --no-widen-fp16``."""
    from onnxptq.cli import main as cli_main

    src = tmp_path / "half.onnx"
    onnx.save(HALF, src)
    assert cli_main(["inspect", str(src), "--preset", "A8W8", "--tensors", *flags]) == 0
    out = capsys.readouterr().out
    assert ("computed in float32 inside" in out) is widened
    first = next(line.split()[-1] for line in out.splitlines() if line.strip().startswith("activation"))
    assert (first != "x") is widened, first


def test_bf16_kept_in_fp16_is_told_that_onnxruntime_drops_its_roundings(tmp_path, caplog):
    """BF16 with ``widen_fp16=False`` on a float16 model: onnxruntime (ORT_ENABLE_ALL) removes bfloat16 Cast pairs
    between float16 values, so the file does not round where it runs; the quantizer says so. The second half checks
    the fact the warning states on this very file (a runtime that kept them would make the warning stale)."""
    import logging

    out = tmp_path / "bf16_fp16.onnx"
    config = get_preset("BF16").replace(widen_fp16=False, repair=False)
    with caplog.at_level(logging.WARNING, logger="onnxptq.pipeline.prepare"):
        onnxptq.quantize(HALF, config, data=_feeds(4, 2), output=str(out))
    assert any("does not round to bfloat16" in r.getMessage() for r in caplog.records)
    in_file = sum(n.op_type == "Cast" and n.attribute[0].i == TensorProto.BFLOAT16 for n in onnx.load(out).graph.node)
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    ort.InferenceSession(str(out), so, providers=["CPUExecutionProvider"])
    kept = sum(n.op_type == "Cast" and any(a.name == "to" and a.i == TensorProto.BFLOAT16 for a in n.attribute)
               for n in onnx.load(tmp_path / "opt.onnx").graph.node)
    assert in_file >= 3 and kept < in_file, (in_file, kept)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="onnxptq.pipeline.prepare"):  # widened (the default): no such word
        onnxptq.quantize(HALF, get_preset("BF16").replace(repair=False), data=_feeds(4, 2), output=str(tmp_path / "w.onnx"))
    assert not any("does not round to bfloat16" in r.getMessage() for r in caplog.records)
