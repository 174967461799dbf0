"""A recurrent layer reads its input sequence float under FP-element MX formats
(pipeline/plan/recurrent_inputs.py).

A GRU's state carries each step's input rounding into every later step; frames that repeat repeat
their rounding, which the state integrates (AECMOS MXFP8_E4M3, repair off, 96 calls: 0.917 → 0.969
with the first GRU's input float; NSNet2 48 kHz 0.848 → 0.895). The built graph: a feature layer
(MatMul → Relu) over a sequence that holds steady for stretches, a GRU that remembers (update gate
biased towards 1), its last state read by a MatMul. The GRU's input must stay float under MXFP8 and
the output track float closer than with it quantized (main's plan, forced back with
``tensor_overrides``); a tensor a MatMul reads too stays quantized for the MatMul only. Must-nots:
MXINT8, and the GRU's weights stay in the format.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import onnxptq
from onnxptq.config.presets import resolve_config
from onnxptq.pipeline.plan import make_plan
from onnxptq.pipeline.prepare import prepare_for_quantization

IN, FEAT, H, OUT = 24, 64, 32, 4


def _model(side_reader: bool = False) -> onnx.ModelProto:
    """x [T, 1, 24] → MatMul → Relu → f → GRU (hidden 32, z biased to remember) → Y → Squeeze → MatMul → y;
    with ``side_reader`` a MatMul reads ``f`` too (→ side)."""
    rng = np.random.default_rng(0)
    b = np.zeros((1, 6 * H), np.float32)
    b[0, :H] = 3.0  # update gate near 1: a long memory
    inits = {"w0": (rng.standard_normal((IN, FEAT)) / 3).astype(np.float32),
             "W": (rng.standard_normal((1, 3 * H, FEAT)) / 4).astype(np.float32),
             "R": (rng.standard_normal((1, 3 * H, H)) / 6).astype(np.float32), "B": b,
             "ax": np.array([1], np.int64), "w2": (rng.standard_normal((H, OUT)) / 3).astype(np.float32)}
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["m0"]), helper.make_node("Relu", ["m0"], ["f"]),
             helper.make_node("GRU", ["f", "W", "R", "B"], ["Y"], hidden_size=H, name="gru"),
             helper.make_node("Squeeze", ["Y", "ax"], ["s"]), helper.make_node("MatMul", ["s", "w2"], ["y"])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["t", 1, OUT])]
    if side_reader:
        inits["w3"] = (rng.standard_normal((FEAT, OUT)) / 3).astype(np.float32)
        nodes.append(helper.make_node("MatMul", ["f", "w3"], ["side"], name="side_mm"))
        outputs.append(helper.make_tensor_value_info("side", TensorProto.FLOAT, ["t", 1, OUT]))
    graph = helper.make_graph(nodes, "gru_seq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["t", 1, IN])],
                              outputs, [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _feeds(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    """Sequences of 80 steps that hold one frame for 8 steps at a time (a stationary stretch)."""
    rng = np.random.default_rng(seed)
    return [{"x": np.repeat(rng.standard_normal((10, 1, IN)), 8, axis=0).astype(np.float32)} for _ in range(n)]


def _plan(model: onnx.ModelProto, preset: str):
    config = onnxptq.get_preset(preset)
    return make_plan(prepare_for_quantization(model, config), config)


def test_the_input_sequence_stays_float_under_mxfp8():
    plan = _plan(_model(), "MXFP8_E4M3")
    assert "f" not in plan.tensors and "recurrent_inputs.py" in plan.float_tensors["f"], plan.float_tensors.get("f")
    assert "W" in plan.tensors and "R" in plan.tensors  # the layer's weights stay in the format
    side = _plan(_model(side_reader=True), "MXFP8_E4M3")
    assert side.tensors["f"].consumers == ["side_mm"] and side.tensors["f"].exclusive
    assert "f" in _plan(_model(), "MXINT8").tensors


def test_it_tracks_float_closer_than_the_quantized_input():
    """Against the same model with the GRU's input forced back to MXFP8 (main's plan), weights float
    so that the activations' quantizers alone are compared. Measured: relative squared error 2.0e-3
    vs 6.0e-3."""
    model, calib, held = _model(), _feeds(4, 1), _feeds(8, 2)
    cfg = resolve_config("MXFP8_E4M3").replace(repair=False, bias_correction=False, weight=None)
    sess = lambda m: ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])  # noqa: E731
    ref = np.concatenate([sess(model).run(["y"], f)[0] for f in held])

    def err(config) -> float:
        s = sess(onnxptq.quantize(model, config, calib, eval_samples=0).model)
        y = np.concatenate([s.run(["y"], f)[0] for f in held])
        return float(((y - ref) ** 2).mean() / (ref ** 2).mean())

    new, old = err(cfg), err(cfg.replace(tensor_overrides={"f": cfg.activation}))
    assert new < 0.5 * old, (new, old)
