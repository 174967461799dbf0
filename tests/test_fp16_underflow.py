"""FP16: a tensor float keeps positive but below fp16's normals, read where 0 is a pole, stays float (issue 27, pesto22).

PESTO's confidence head computes a spectral flatness of CQT energies, ``exp(mean(log(e))) / clip(mean(e), 1e-8)``,
with ``e = exp(dB · ln10 / 10)`` and the dB clamped at −138 (e ≥ 1.6e-14), the energies passed on through a Squeeze
under a shape test (an ``If``, as PyTorch exports ``squeeze(1)``). Plain FP16 flushed the quiet energies and the
divisor's 1e-8 to 0: ``log(0)``, ``0 / 0``, and its ``confidence`` came out NaN (bench/RESULTS.md, newmodels31 section
5). The graph here is that head in small, with a volume (a ReduceSum of the energies) that no pole reads.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from onnxptq.api import quantize
from onnxptq.config.presets import get_preset


def _flatness() -> onnx.ModelProto:
    one = numpy_helper.from_array(np.array(1, np.int64), "one")
    inits = [numpy_helper.from_array(np.array(math.log(10) / 10, np.float32), "k"), one,
             numpy_helper.from_array(np.array([1], np.int64), "axis1"), numpy_helper.from_array(np.array([-1], np.int64), "last"),
             numpy_helper.from_array(np.array(1e-8, np.float32), "eps"), numpy_helper.from_array(np.array(-138.0, np.float32), "floor_db")]
    squeeze = helper.make_graph([helper.make_node("Squeeze", ["energy0", "axis1"], ["sq"])], "then", [],
                                [helper.make_tensor_value_info("sq", TensorProto.FLOAT, None)])
    same = helper.make_graph([helper.make_node("Identity", ["energy0"], ["idn"])], "else", [],
                             [helper.make_tensor_value_info("idn", TensorProto.FLOAT, None)])
    nodes = [helper.make_node("Max", ["db", "floor_db"], ["dbc"]),
             helper.make_node("Mul", ["dbc", "k"], ["scaled"]),
             helper.make_node("Exp", ["scaled"], ["energy0"]),
             helper.make_node("Shape", ["energy0"], ["shape"]),
             helper.make_node("Gather", ["shape", "one"], ["dim1"], axis=0),
             helper.make_node("Equal", ["dim1", "one"], ["is_one"]),
             helper.make_node("If", ["is_one"], ["energy"], then_branch=squeeze, else_branch=same),
             helper.make_node("Log", ["energy"], ["logs"]),
             helper.make_node("ReduceMean", ["logs", "last"], ["mean_log"], keepdims=1),
             helper.make_node("Exp", ["mean_log"], ["geometric"]),
             helper.make_node("ReduceMean", ["energy", "last"], ["mean"], keepdims=1),
             helper.make_node("Clip", ["mean", "eps"], ["safe"]),
             helper.make_node("Div", ["geometric", "safe"], ["flatness"]),
             helper.make_node("ReduceSum", ["energy", "last"], ["volume"], keepdims=1)]
    graph = helper.make_graph(nodes, "flatness", [helper.make_tensor_value_info("db", TensorProto.FLOAT, ["T", 1, 64])],
                              [helper.make_tensor_value_info("flatness", TensorProto.FLOAT, ["T", 1]),
                               helper.make_tensor_value_info("volume", TensorProto.FLOAT, ["T", 1])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _feeds(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    """Frames of -60..0 dB bins; three in ten silent (every bin at the clamp), as between a singer's phrases."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        x = rng.uniform(-60, 0, (32, 1, 64)).astype(np.float32)
        x[rng.random(32) < 0.3] = -138.0
        out.append({"db": x})
    return out


def test_fp16_keeps_a_tiny_positive_tensor_read_at_a_pole_float_and_the_output_stays_finite(tmp_path):
    src, out = tmp_path / "flat.onnx", tmp_path / "flat.fp16.onnx"
    onnx.save(_flatness(), str(src))
    result = quantize(str(src), dataclasses.replace(get_preset("FP16"), repair=False), data=_feeds(8, 1), output=str(out))
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    reference = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    for feed in _feeds(3, 9):
        got, want = session.run(None, feed)[0], reference.run(None, feed)[0]
        assert np.isfinite(want).all() and np.isfinite(got).all()
        # a silent frame's flatness is 1.6e-14 / 1e-8 in float; fp16 flushes that numerator (no pole) to 0
        np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-5)
    reasons = {name: why for name, why in result.plan.float_tensors.items() if "fp16's smallest normal" in why}
    assert {"energy0", "safe"} <= set(reasons), result.plan.float_tensors
    assert "volume" not in reasons  # tiny too, but no pole reads it
