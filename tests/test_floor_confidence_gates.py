"""A value output gated by its sibling confidence is judged where the confidence passes 0.5
(analysis/confidence_gates.py).

Why: swift-f0 outputs ``pitch`` (read around the arg-max of per-frame pitch-bin scores) and
``confidence`` (a sigmoid head, 0 where the arg-max bin is out of range); its package reads the pitch
only in voiced frames. In unvoiced frames the scores are flat and the arg-max bin jumps under any
rounding: the floor broke A8W8 on ``pitch`` cosine 0.84 while the frames the package reads agreed
0.975 with float's (bench/RESULTS.md, branch falsebreaks2). A built pitch head here: ``x [1, F, K]``
→ MatMul → bin scores ``[1, F, B]`` → ArgMax → Gather of the bins' frequencies (``pitch``), and a
Sigmoid head → Where(the bin is in range, sigmoid, 0) (``confidence``).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from onnxptq.analysis.confidence_gates import confidence_gated_outputs
from onnxptq.analysis.floor import FAMILY_FLOORS, Floor, measure, readings_of

F, K, B = 64, 8, 32


def _pitch_model(shared_argmax: bool = True) -> onnx.ModelProto:
    """``shared_argmax=False``: the confidence's Where tests a threshold of the sigmoid itself, no
    arg-max behind it (a confidence that is not about the pitch's decision: nothing gated)."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["scores"]),
             helper.make_node("ArgMax", ["scores"], ["bin"], axis=-1, keepdims=0),
             helper.make_node("Gather", ["freqs", "bin"], ["pitch"]),
             helper.make_node("MatMul", ["x", "V"], ["vlogit"]),
             helper.make_node("Squeeze", ["vlogit", "last"], ["vlogit2"]),
             helper.make_node("Sigmoid", ["vlogit2"], ["prob"])]
    if shared_argmax:
        nodes.append(helper.make_node("Gather", ["in_range", "bin"], ["valid"]))
    else:
        nodes.append(helper.make_node("Greater", ["prob", "zero"], ["valid"]))
    nodes.append(helper.make_node("Where", ["valid", "prob", "zero"], ["confidence"]))
    inits = [numpy_helper.from_array(rng.normal(0, 1, (K, B)).astype(np.float32), "W"),
             numpy_helper.from_array(rng.normal(0, 1, (K, 1)).astype(np.float32), "V"),
             numpy_helper.from_array((50.0 * 2.0 ** (np.arange(B) / 4.0)).astype(np.float32), "freqs"),
             numpy_helper.from_array(np.ones(B, bool), "in_range"),
             numpy_helper.from_array(np.array([-1], np.int64), "last"),
             numpy_helper.from_array(np.array(0.0, np.float32), "zero")]
    graph = helper.make_graph(nodes, "pitch", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, F, K])],
                              [helper.make_tensor_value_info("pitch", TensorProto.FLOAT, [1, F]),
                               helper.make_tensor_value_info("confidence", TensorProto.FLOAT, [1, F])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    return model


def _outputs(model: onnx.ModelProto, moved: str) -> tuple[list[dict], list[dict]]:
    """Float's outputs on 12 feeds, and a candidate whose pitch moved to another bin's frequency on
    ``moved`` frames ("unconfident": float's confidence < 0.5; "confident": ≥ 0.5), every other value
    float's."""
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    ref, got = [], []
    for _ in range(12):
        p, c = sess.run(None, {"x": rng.normal(0, 1, (1, F, K)).astype(np.float32)})
        where = (c < 0.5) if moved == "unconfident" else (c >= 0.5)
        g = p.copy()
        g[where] = p[where] * 2.0 ** rng.choice([-2.0, -1.0, 1.0, 2.0], int(where.sum()))  # octave jumps
        ref.append({"pitch": p, "confidence": c})
        got.append({"pitch": g, "confidence": c.copy()})
    return ref, got


def _verdict(model, ref, got):
    floor = Floor("8-bit", *FAMILY_FLOORS["8-bit"])
    return measure(ref[:4], got[:4], floor, **readings_of(model), seen=(ref[4:], got[4:]))


def test_found_by_structure_only_where_the_confidence_shares_the_arg_max() -> None:
    assert confidence_gated_outputs(_pitch_model()) == {"pitch": "confidence"}
    assert readings_of(_pitch_model())["confidence_gates"] == {"pitch": "confidence"}
    assert confidence_gated_outputs(_pitch_model(shared_argmax=False)) == {}


def test_pitch_moved_where_the_model_is_unconfident_holds() -> None:
    """Octave jumps in the frames float's confidence calls unvoiced: judged whole the pitch's cosine is
    far under the floor (main's verdict: broken); judged where the confidence passes 0.5 it is float's."""
    model = _pitch_model()
    ref, got = _outputs(model, "unconfident")
    assert any((r["confidence"] < 0.5).any() for r in ref[:4]) and any((r["confidence"] >= 0.5).any() for r in ref[:4])
    verdict = _verdict(model, ref, got)
    check = verdict.outputs["pitch"]
    assert verdict.ok and check.cosine > 0.9999, verdict.describe()
    assert "confidence" in check.note
    # the same outputs without the gate (what main judged): broken on the pitch's cosine
    ungated = measure(ref[:4], got[:4], Floor("8-bit", *FAMILY_FLOORS["8-bit"]),
                      **{**readings_of(model), "confidence_gates": {}}, seen=(ref[4:], got[4:]))
    assert not ungated.ok and ungated.outputs["pitch"].cosine < 0.98


def test_pitch_moved_where_the_model_is_confident_still_breaks() -> None:
    """The same jumps in the voiced frames: a true break, and the gate keeps it one."""
    model = _pitch_model()
    ref, got = _outputs(model, "confident")
    verdict = _verdict(model, ref, got)
    assert not verdict.ok and verdict.outputs["pitch"].cosine < 0.98, verdict.describe()


def test_no_shared_arg_max_no_gate() -> None:
    """A confidence with no arg-max behind it gates nothing: unconfident jumps still break the floor."""
    model = _pitch_model(shared_argmax=False)
    ref, got = _outputs(model, "unconfident")
    assert not _verdict(model, ref, got).ok
