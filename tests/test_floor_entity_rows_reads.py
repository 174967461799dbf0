"""A per-entity regression (rows as long as the input's, not a batch) judged per row whatever its length.

caustic-nmr's ``pred_mean [num_residues, 6]`` is read per residue (analysis/scores.py, "Rows that are
entities"); a protein of more than ``scores.MAX_ROWS`` residues fell out of that reading and was
judged by its cosine alone, which BF16 keeps at 0.99999 while 0.13 of its shifts move past 0.3 ppm.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq.analysis.floor import Floor, measure, readings_of
from onnxptq.analysis.scores import MAX_ROWS, TOLERANCE, spread_of
from onnxptq.sessions import open_session

SIXTEEN = Floor("16-bit", 0.99, 0.97)
OFFSETS = np.array([120.0, 55.0, 175.0])  # a shift per column on its own scale (N, CA, C in ppm)


def shifts_model(tilt: float = 0.0) -> onnx.ModelProto:
    """``features [residues, 4] → MatMul → Add → Relu → MatMul → Add → shifts [residues, 3]``: three
    shifts per residue; ``tilt``: the last column's weights scaled by ``1 + tilt`` (a quantized model's error)."""
    rng = np.random.default_rng(7)
    w1, w2 = rng.standard_normal((4, 16)), rng.standard_normal((16, 3)) * np.array([1.5, 1.0, 0.4])
    w2[:, 2] *= 1.0 + tilt
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for a, n in
             ((w1, "w1"), (np.zeros(16), "b1"), (w2, "w2"), (OFFSETS, "b2"))]
    nodes = [helper.make_node("MatMul", ["features", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]), helper.make_node("MatMul", ["r", "w2"], ["o"]),
             helper.make_node("Add", ["o", "b2"], ["shifts"])]
    graph = helper.make_graph(nodes, "shifts", [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["residues", 4])],
                              [helper.make_tensor_value_info("shifts", TensorProto.FLOAT, ["residues", 3])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _outputs(model: onnx.ModelProto, lengths: list[int]) -> list[dict[str, np.ndarray]]:
    session, rng = open_session(model), np.random.default_rng(1)
    return [{"shifts": session.run(["shifts"], {"features": rng.standard_normal((n, 4)).astype(np.float32)})[0]}
            for n in lengths]


@pytest.fixture(scope="module")
def reader() -> tuple[onnx.ModelProto, dict]:
    model = shifts_model()
    return model, readings_of(model)


PROTEINS = [70, 84, 91, 77, 102, 66, 88, 95]  # residues: more than MAX_ROWS, a different count each


def test_rows_of_varying_count_are_judged_per_row_beyond_the_row_cap(reader):
    model, readings = reader
    assert min(PROTEINS) > MAX_ROWS
    ref = _outputs(model, PROTEINS)
    got = _outputs(shifts_model(tilt=0.3), PROTEINS)
    r, g = np.concatenate([f["shifts"] for f in ref]), np.concatenate([f["shifts"] for f in got])
    within = float(np.mean((np.abs(g - r) / spread_of(r.astype(np.float64)) <= TOLERANCE).all(1)))
    assert within < 0.9  # the C column moved by more than 5 % of its spread on many residues
    verdict = measure(ref, got, SIXTEEN, **readings)
    check = verdict.outputs["shifts"]
    assert check.cosine > 0.9999  # the cosine alone holds: the offsets carry it
    assert check.scores is not None and check.rows == sum(PROTEINS) and check.top1 == pytest.approx(within)
    assert not verdict.ok and "judged per sample" in verdict.describe()

    close = _outputs(shifts_model(tilt=1e-4), PROTEINS)
    verdict = measure(ref, close, SIXTEEN, **readings)
    assert verdict.ok and verdict.outputs["shifts"].scores is not None and verdict.outputs["shifts"].top1 == 1.0


def test_as_many_rows_on_every_feed_stay_out_of_the_per_row_reading(reader):
    """96 rows on every feed (anchors, a fixed grid) are no entities of the input: the row cap stays."""
    model, readings = reader
    ref = _outputs(model, [96] * 8)
    got = _outputs(shifts_model(tilt=0.3), [96] * 8)
    check = measure(ref, got, SIXTEEN, **readings).outputs["shifts"]
    assert check.scores is None
