"""A streaming model with a state feedback loop, for the floor's streamed judgement (analysis/streams.py).

``stream_model()``: a 512-sample window ``x`` [1, 512] and a state ``h_in`` [1, 256] in; the state
``h_out = h_in · W + x · B`` and the 256-sample chunk ``y = x[256:] / 20 + h_out · C`` out (a streaming enhancer's form: a hop
out of a window of two, the state fed back by the caller). ``W`` is ``Q diag(a) Qᵀ`` with ``a`` in
[0.96, 0.99]: the state remembers ~50 calls, so an error in ``W`` that one call barely shows (a gain off by
``δ`` moves a call's output by ``δ``) grows through the loop towards ``δ / (1 − a)`` — the drift a per-call
judgement with float's state cannot see.

``stream_feeds(model, calls)``: the calls of one noisy two-tone signal in order, each with the state the
float model returned on the call before (zeros first), as a user's loop records them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

WINDOW, HOP, STATE = 512, 256, 256


def stream_model(seed: int = 0, drift: float = 0.0) -> onnx.ModelProto:
    """The model (module docstring). ``drift``: every eigenvalue of ``W`` raised by that much (a stand-in for a
    quantizer's error on the loop; 0: the float model)."""
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.normal(size=(STATE, STATE)))
    a = rng.uniform(0.96, 0.99, STATE) + drift
    w = (q * a) @ q.T
    b = rng.normal(0, 0.02, (WINDOW, STATE))
    c = q.T @ np.diag(rng.uniform(0.5, 1.5, STATE)) @ q / 4.0
    inits = [numpy_helper.from_array(v.astype(np.float32), n) for v, n in ((w, "W"), (b, "B"), (c, "C"))]
    inits += [numpy_helper.from_array(np.array([v], np.int64), n) for v, n in ((HOP, "hop"), (WINDOW, "window"), (1, "last"))]
    inits.append(numpy_helper.from_array(np.array(0.05, np.float32), "g"))
    nodes = [helper.make_node("MatMul", ["h_in", "W"], ["hw"]), helper.make_node("MatMul", ["x", "B"], ["xb"]),
             helper.make_node("Add", ["hw", "xb"], ["h_out"]), helper.make_node("MatMul", ["h_out", "C"], ["hc"]),
             helper.make_node("Slice", ["x", "hop", "window", "last"], ["new"]), helper.make_node("Mul", ["new", "g"], ["dry"]),
             helper.make_node("Add", ["dry", "hc"], ["y"])]
    graph = helper.make_graph(nodes, "stream", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, WINDOW]),
                                                helper.make_tensor_value_info("h_in", TensorProto.FLOAT, [1, STATE])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, HOP]),
                               helper.make_tensor_value_info("h_out", TensorProto.FLOAT, [1, STATE])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def run(model: onnx.ModelProto) -> Any:
    """``feed -> {name: value}`` on one CPU session of ``model``."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return lambda feed: dict(zip(names, sess.run(names, feed)))


def signal(calls: int, seed: int = 0) -> np.ndarray:
    """Two slowly moving tones and a little noise, long enough for ``calls`` hops."""
    rng = np.random.default_rng(seed)
    t = np.arange(HOP * (calls + 1)) / 16000.0
    return (0.4 * np.sin(2 * np.pi * 220 * t) + 0.2 * np.sin(2 * np.pi * 570 * t + 1.0)
            + 0.02 * rng.normal(size=t.size)).astype(np.float32)


def stream_feeds(model: onnx.ModelProto, calls: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """The float model's stream (module docstring)."""
    x, step = signal(calls, seed), run(model)
    h = np.zeros((1, STATE), np.float32)
    feeds = []
    for k in range(calls):
        feed = {"x": x[None, k * HOP:k * HOP + WINDOW].copy(), "h_in": h}
        feeds.append(feed)
        h = step(feed)["h_out"]
    return feeds
