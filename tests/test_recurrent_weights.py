"""A long recurrent layer's W and R get 16 bits under A16W8 (pipeline/plan/recurrent_weights.py), and the floor
reads a recurrent output step by step (analysis/recurrent_reads.py).

The state is multiplied by R (and the input by W) at every step and carries each product into all later steps, so
the weights' rounding compounds over the sequence (DeepFilterNet3's encoder: every 8-bit row lost its GRU output
over ~300 frames). The built graph (tests/test_recurrent_inputs.py's): a feature layer, a GRU that
remembers (update gate biased towards 1) over 80 steps, a MatMul on its states. Checked: W and R
at 16 bits under A16W8 for a symbolic and a long static length, both left int8 for a one-step
layer and under A8W8; and the output tracks float closer than with W and R forced back to int8
(on a 200-step GRU), and the floor's frame reading.
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
from tests.test_recurrent_inputs import _model

LIN, LH = 16, 64


def _fixed(steps: int) -> onnx.ModelProto:
    """The model with its sequence axis fixed to ``steps``."""
    m = _model()
    for vi in list(m.graph.input) + list(m.graph.output):
        vi.type.tensor_type.shape.dim[0].dim_value = steps
    return m


def _plan(model: onnx.ModelProto, preset: str):
    config = onnxptq.get_preset(preset)
    return make_plan(prepare_for_quantization(model, config), config)


def test_long_layers_get_finer_weights_under_a16w8_only():
    for model in (_model(), _fixed(80)):
        plan = _plan(model, "A16W8")
        for name in ("W", "R"):
            assert plan.tensors[name].quant.format == "int16" and plan.tensors[name].axis is not None, name
        assert plan.tensors["w0"].quant.format == "int8"  # a feed-forward weight keeps the preset's
    short = _plan(_fixed(1), "A16W8")  # one step per call: the weights round once, as a feed-forward weight's
    assert short.tensors["R"].quant.format == "int8" and short.tensors["W"].quant.format == "int8"
    eight = _plan(_model(), "A8W8")  # the 8-bit sequence is the coarsest rounding: measured no gain
    assert eight.tensors["R"].quant.format == "int8" and eight.tensors["W"].quant.format == "int8"


def _long_gru() -> onnx.ModelProto:
    """x [T, 1, 16] → GRU (hidden 64, R of gain 2: a state that keeps what it is given) → Squeeze → MatMul → y."""
    rng = np.random.default_rng(0)
    inits = {"W": (rng.standard_normal((1, 3 * LH, LIN)) / 4).astype(np.float32),
             "R": (rng.standard_normal((1, 3 * LH, LH)) * 2.0 / np.sqrt(LH)).astype(np.float32),
             "B": np.zeros((1, 6 * LH), np.float32), "ax": np.array([1], np.int64),
             "w2": (rng.standard_normal((LH, 4)) / 3).astype(np.float32)}
    nodes = [helper.make_node("GRU", ["x", "W", "R", "B"], ["Y"], hidden_size=LH, name="gru"),
             helper.make_node("Squeeze", ["Y", "ax"], ["s"]), helper.make_node("MatMul", ["s", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "long_gru", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["t", 1, LIN])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["t", 1, 4])],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _long_feeds(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": (rng.standard_normal((200, 1, LIN)) * 0.5).astype(np.float32)} for _ in range(n)]


def test_it_tracks_float_closer_than_int8_weights():
    """A16W8 against the same model with W and R forced back to int8 per channel (main's plan), per step over
    200 steps. Measured: relative squared error 3.4e-5 vs 9.8e-5;
    with int8 weights the last 20 steps' error is 1.3x the first 20's (it piles up), with the rule it is flat."""
    model, calib, held = _long_gru(), _long_feeds(2, 1), _long_feeds(4, 2)
    cfg = resolve_config("A16W8").replace(repair=False, bias_correction=False)
    sess = lambda m: ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])  # noqa: E731
    ref = np.stack([sess(model).run(["y"], f)[0] for f in held])

    def err(config) -> np.ndarray:
        """Relative squared error per step."""
        s = sess(onnxptq.quantize(model, config, calib, eval_samples=0).model)
        y = np.stack([s.run(["y"], f)[0] for f in held])
        return ((y - ref) ** 2).mean(axis=(0, 2, 3)) / (ref ** 2).mean(axis=(0, 2, 3))

    new, old = err(cfg), err(cfg.replace(tensor_overrides={"R": cfg.weight, "W": cfg.weight}))
    assert new.mean() < 0.5 * old.mean(), (new.mean(), old.mean())
    assert old[-20:].mean() > 1.2 * old[:20].mean() and new[-20:].mean() < old[-20:].mean() / 2, (old[:20].mean(), old[-20:].mean())


def test_the_floor_reads_a_recurrent_output_step_by_step():
    """analysis/recurrent_reads.py: the GRU's sequence (``s``, and ``y`` through MatMul) is read frame by frame, its last
    state ``Y_h`` is not. A candidate whose last 25 of 200 steps drifted by 30% keeps a pooled cosine above the 16-bit
    floor's and fails on its frames; one whose steps all drifted by 10% keeps about the same cosine and holds."""
    from onnxptq.analysis.floor import Floor, measure, readings_of
    from onnxptq.analysis.recurrent_reads import recurrent_outputs

    model = _long_gru()
    model.graph.node[0].output.append("Y_h")
    model.graph.output.extend([helper.make_tensor_value_info("Y_h", TensorProto.FLOAT, [1, 1, LH]),
                               helper.make_tensor_value_info("s", TensorProto.FLOAT, ["t", 1, LH])])
    assert recurrent_outputs(model) == {"y", "s"}
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = [{"s": sess.run(["s"], f)[0]} for f in _long_feeds(4, 3)]
    rng = np.random.default_rng(0)
    late, even = [], []
    for r in ref:
        s = r["s"]
        drift = np.ones_like(s)
        drift[-25:] += 0.3 * rng.standard_normal(s[-25:].shape)
        late.append({"s": s * drift})
        even.append({"s": s * (1 + 0.1 * rng.standard_normal(s.shape))})
    floor, readings = Floor("16-bit", 0.99, 0.97), readings_of(model)
    bad = measure(ref, late, floor, **readings).outputs["s"]
    assert bad.cosine >= 0.99 and not bad.ok and "recurrent_reads.py" in bad.note, (bad.cosine, bad.note)
    good = measure(ref, even, floor, **readings).outputs["s"]
    assert good.ok and abs(good.cosine - bad.cosine) < 0.005, (good.cosine, bad.cosine, good.note)
