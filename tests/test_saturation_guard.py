"""int8 weights are stored as uint8 where onnxruntime's U8S8 integer GEMM saturates (QuantConfig.saturation_guard).

Why: on x86 without VNNI (AVX2; AVX-512 without VNNI) onnxruntime's QLinearConv / QGemm /
MatMulIntegerToFloat add each pair of uint8×int8 products in int16 and saturate past 32767, so a
full-range int8 weight gives wrong sums; a small attention block went from 0.02 to 0.17 relative
error (tests/test_sentinels.py). The probe's verdict is checked against what the fused kernels do
on a real model here, so the test means the same on either kind of machine.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq import get_preset, quantize
from onnxptq.config.schema import ConfigError
from onnxptq.pipeline import runtime
from onnxptq.pipeline.plan.assign import make_plan


def _model() -> onnx.ModelProto:
    """A dense Conv, a depthwise Conv, a MatMul and a Gemm, with weights that put same-sign full-range
    values next to each other (the pairs the saturating kernel adds in int16)."""
    rng = np.random.default_rng(0)
    dense = np.abs(rng.standard_normal((8, 4, 3, 3))).astype(np.float32) + 0.5
    depth = rng.standard_normal((8, 1, 3, 3)).astype(np.float32)
    gemm = np.abs(rng.standard_normal((8, 16))).astype(np.float32) + 0.5
    mat = np.abs(rng.standard_normal((16, 6))).astype(np.float32) + 0.5
    inits = [numpy_helper.from_array(a, n) for a, n in ((dense, "dense_w"), (depth, "depth_w"), (mat, "mat_w"), (gemm, "gemm_w"))]
    inits.append(numpy_helper.from_array(np.array([1, 8], np.int64), "flat_shape"))
    nodes = [helper.make_node("Conv", ["x", "dense_w"], ["c1"], name="dense", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "depth_w"], ["c2"], name="depthwise", pads=[1, 1, 1, 1], group=8),
             helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             helper.make_node("GlobalAveragePool", ["r2"], ["p"], name="pool"),
             helper.make_node("Reshape", ["p", "flat_shape"], ["f"], name="flat"),
             helper.make_node("Gemm", ["f", "gemm_w"], ["m"], name="gemm"),
             helper.make_node("Relu", ["m"], ["r3"], name="relu3"),
             helper.make_node("MatMul", ["r3", "mat_w"], ["y"], name="matmul")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6])], inits)
    return onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def _feeds(n: int = 16) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(1)
    return [{"x": np.abs(rng.standard_normal((1, 4, 8, 8))).astype(np.float32) * 3} for _ in range(n)]


def _run(model: onnx.ModelProto, feeds: list[dict[str, np.ndarray]], level: ort.GraphOptimizationLevel) -> np.ndarray:
    options = ort.SessionOptions()
    options.graph_optimization_level = level
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return np.concatenate([session.run(None, f)[0] for f in feeds])


def _quantize(guard: str) -> onnx.ModelProto:
    cfg = dataclasses.replace(get_preset("A8W8"), saturation_guard=guard, repair=False)
    return quantize(_model(), cfg, _feeds()).model


def _fused_vs_reference(model: onnx.ModelProto) -> float:
    """How far onnxruntime's fused integer kernels land from the same Q/DQ model run in float."""
    feeds = _feeds(4)
    fused = _run(model, feeds, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    reference = _run(model, feeds, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    return float(np.abs(fused - reference).max() / np.abs(reference).max())


def test_guarded_weights_are_stored_uint8_value_for_value_except_depthwise():
    """The plan keeps int8; the file stores each fused weight's codes + 128 with zero point + 128, which
    DequantizeLinear reads as the same values; the depthwise Conv (int32 sums) keeps int8."""
    off, on = _quantize("off"), _quantize("on")
    assert on.graph.node and {t.quant.format for t in make_plan(_model(), dataclasses.replace(
        get_preset("A8W8"), saturation_guard="on")).tensors.values() if t.role == "weight"} == {"int8"}

    def weights(model: onnx.ModelProto) -> dict[str, tuple[int, np.ndarray]]:
        inits = {i.name: i for i in model.graph.initializer}
        found = {}
        for node in model.graph.node:
            if node.op_type == "DequantizeLinear" and node.input[0] in inits and inits[node.input[0]].dims:
                data = inits[node.input[0]]
                codes = numpy_helper.to_array(data).astype(np.int32)
                zero = numpy_helper.to_array(inits[node.input[2]]).astype(np.int32) if len(node.input) > 2 else 0
                scale = numpy_helper.to_array(inits[node.input[1]])
                axis = next((a.i for a in node.attribute if a.name == "axis"), 1)
                shape = [1] * codes.ndim
                if scale.ndim:
                    shape[axis] = -1
                found[node.output[0]] = (data.data_type, (codes - np.reshape(zero, shape)) * np.reshape(scale, shape))
        return found

    a, b = weights(off), weights(on)
    assert a.keys() == b.keys()
    unsigned = {name.split("_DequantizeLinear")[0] for name, (kind, _) in b.items() if kind == TensorProto.UINT8}
    # the dense Conv and the MatMul read 8-bit Q/DQ activations: fused; the depthwise Conv sums in int32, and the
    # Gemm reads the pooled vector in float in the delivered model (no Q/DQ on it): not fused
    assert unsigned == {"dense_w", "mat_w"}, unsigned
    assert all(a[n][0] == TensorProto.INT8 for n in a) and len(a) == 4
    for name in a:
        np.testing.assert_array_equal(a[name][1], b[name][1], err_msg=name)


def test_guarded_model_runs_its_fused_kernels_exactly_and_the_probe_predicts_the_unguarded_one():
    """With the guard the fused kernels match the float Q/DQ reference on any CPU; without it they miss
    it exactly where the probe says this machine saturates (a real model, not the probe's own graph)."""
    assert _fused_vs_reference(_quantize("on")) < 1e-3
    unguarded = _fused_vs_reference(_quantize("off"))
    assert (unguarded > 1e-2) == runtime.integer_gemm_saturates(), unguarded


def test_auto_follows_the_probe(monkeypatch):
    for saturates in (True, False):
        monkeypatch.setattr(runtime, "integer_gemm_saturates", lambda s=saturates: s)
        assert runtime.guard_saturation(get_preset("A8W8")) is saturates
    assert runtime.guard_saturation(dataclasses.replace(get_preset("A8W8"), saturation_guard="on"))
    assert not runtime.guard_saturation(dataclasses.replace(get_preset("A8W8"), saturation_guard="off"))
    assert not runtime.guard_saturation(dataclasses.replace(get_preset("A8W8"), runtime="npu", saturation_guard="on"))


def test_a_bad_value_is_refused_naming_the_option():
    with pytest.raises(ConfigError, match="saturation_guard must be 'auto', 'on' or 'off', not 'yes'"):
        dataclasses.replace(get_preset("A8W8"), saturation_guard="yes")


def test_the_cli_takes_the_guard(tmp_path):
    """``--saturation-guard on`` stores the fused weights as uint8 on any machine; ``off`` keeps int8."""
    from onnxptq.cli import main

    source = tmp_path / "m.onnx"
    onnx.save(_model(), source)
    np.savez(tmp_path / "data.npz", x=np.concatenate([f["x"] for f in _feeds()]))
    kinds = {}
    for guard in ("on", "off"):
        out = tmp_path / f"q_{guard}.onnx"
        assert main(["quantize", str(source), "-o", str(out), "--preset", "A8W8", "--data", str(tmp_path / "data.npz"),
                     "--no-repair", "--no-progress", "--saturation-guard", guard]) == 0
        kinds[guard] = {i.data_type for i in onnx.load(out).graph.initializer if len(i.dims) == 4}
    assert TensorProto.UINT8 in kinds["on"] and TensorProto.UINT8 not in kinds["off"], kinds


def _npu_build() -> onnx.ModelProto:
    cfg = dataclasses.replace(get_preset("A8W8"), runtime="npu", repair=False)
    return quantize(_model(), cfg, _feeds()).model


def test_an_npu_build_is_judged_on_exact_sums_and_delivered_int8():
    """A build for another runtime keeps int8 weights (its target adds in int32); finish's session, which the
    floor and repair judge on, runs a copy with them stored as uint8, so it gives the Q/DQ model's exact sums
    on any CPU, while the model it returns, the one delivered, keeps int8. Without it the session's outputs
    miss the exact ones exactly where this machine's kernels saturate (bench/RESULTS.md, a8avx2)."""
    from onnxptq.pipeline.finish import finish

    model = _npu_build()
    assert TensorProto.INT8 in {i.data_type for i in model.graph.initializer if len(i.dims) == 4}
    feeds = _feeds(4)
    exact = _run(model, feeds, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)

    def judged(exact_sums: bool) -> float:
        delivered, session = finish(model, "npu build", exact_sums=exact_sums)
        assert delivered is model and {i.data_type for i in model.graph.initializer if len(i.dims) == 4} == {TensorProto.INT8}
        got = np.concatenate([session.run(["y"], f)[0] for f in feeds])
        return float(np.abs(got - exact).max() / np.abs(exact).max())

    assert judged(True) < 1e-3
    assert (judged(False) > 1e-2) == runtime.integer_gemm_saturates()


def test_exact_sums_are_asked_for_builds_for_other_runtimes_where_this_machine_saturates(monkeypatch):
    for saturates in (False, True):
        monkeypatch.setattr(runtime, "integer_gemm_saturates", lambda s=saturates: s)
        assert runtime.judge_exact_sums(dataclasses.replace(get_preset("A8W8"), runtime="npu")) is saturates
        assert not runtime.judge_exact_sums(get_preset("A8W8"))  # cpu: the delivered file itself is guarded
        assert not runtime.judge_exact_sums(dataclasses.replace(get_preset("A8W8"), runtime="npu", saturation_guard="off"))
    import onnxptq.pipeline.complete as complete

    asked = []
    real = complete.finish
    monkeypatch.setattr(complete, "finish", lambda *a, **k: asked.append(k.get("exact_sums")) or real(*a, **k))
    quantize(_model(), dataclasses.replace(get_preset("A8W8"), runtime="npu", repair=False), _feeds())
    assert asked == [True], asked  # the probe says True (patched above, last): quantize asks finish for exact sums
