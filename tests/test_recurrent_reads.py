"""The floor reads a recurrent layer's output step by step (analysis/recurrent_reads.py).

The state is multiplied by R (and the input by W) at every step and carries each product into all later steps, so
a rounding's error can pile up late in a long sequence while the pooled cosine stays high (DeepFilterNet3's
encoder: every 8-bit row lost its GRU output over ~300 frames). A plan rule that gave such layers 16-bit W and R
under A16W8 was measured and not taken: it grew three other models' files 1.6-1.8x for no accuracy
(bench/RESULTS.md, rnnweights and the lead's section of 2026-11-28).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper


LIN, LH = 16, 64


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
