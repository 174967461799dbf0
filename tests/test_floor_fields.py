"""The floor judges a detector's row fields one by one (analysis/fields.py).

ddddocr's detector output ``[1, 3549, 6]`` holds box offsets beside objectness and class
probabilities; its MXFP8_E4M3 model kept the pooled cosine at 0.983 (floor 0.98) while one field
fell to 0.94 and the detections' F1 to 0.948. Rows are built here the same way: four box fields of
a few units and two probability fields, with noise on the probabilities only.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from onnxptq.analysis.fields import MIN_VALUES, declared_field_axes, field_axis
from onnxptq.analysis.floor import Floor, measure

FLOOR = Floor("8-bit", 0.98, 0.95)
AXES = {"rows": 2}


def _rows(seed: int, n: int = 2000) -> np.ndarray:
    rng = np.random.default_rng(seed)
    boxes = rng.uniform(0.0, 8.0, (1, n, 4))
    probs = rng.beta(0.5, 4.0, (1, n, 2))  # mostly low scores, a few high ones
    return np.concatenate([boxes, probs], axis=-1).astype(np.float32)


def _noisy(rows: np.ndarray, seed: int, scale: float) -> np.ndarray:
    out = rows.copy()
    out[..., 4:] += np.random.default_rng(seed).normal(0, scale, out[..., 4:].shape).astype(np.float32)
    return out


def test_a_field_below_the_floor_breaks_it_where_the_pooled_cosine_holds():
    refs = [{"rows": _rows(s)} for s in range(4)]
    gots = [{"rows": _noisy(r["rows"], 10 + i, 0.08)} for i, r in enumerate(refs)]
    verdict = measure(refs, gots, FLOOR, field_axes=AXES)
    check = verdict.outputs["rows"]
    assert check.cosine >= FLOOR.cosine  # the boxes carry the pooled figure
    assert check.worst_field is not None and check.worst_field[:2] in ((2, 4), (2, 5))
    assert check.worst_field[2] < FLOOR.cosine and not verdict.ok
    assert "worst field" in verdict.describe()


def test_small_noise_on_every_field_holds():
    refs = [{"rows": _rows(s)} for s in range(4)]
    gots = [{"rows": _noisy(r["rows"], 10 + i, 0.002)} for i, r in enumerate(refs)]
    verdict = measure(refs, gots, FLOOR, field_axes=AXES)
    assert verdict.ok and verdict.outputs["rows"].worst_field[2] >= FLOOR.cosine


def test_outputs_without_a_field_axis_or_too_few_values_are_judged_whole():
    assert field_axis((1, 1, 224, 224)) is None  # a heatmap
    assert field_axis((8, 1000)) is None  # class-score rows
    assert field_axis((2, 1, 128)) is None  # a recurrent state
    assert field_axis((1, 3549, 6)) == 2 and field_axis((1, 3, 64, 64)) == 1
    assert field_axis((8, None, 256)) is None  # a sequence axis that happened to be 11 long

    def output(name, dims):
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)
    graph = helper.make_graph([helper.make_node("Identity", ["x"], [n]) for n in ("rows", "memory", "state")], "g",
                              [output("x", [1, 3549, 6])],
                              [output("rows", ["N", 3549, 6]), output("memory", ["B", "T", 256]), output("state", [2, 1, 128])])
    assert declared_field_axes(helper.make_model(graph)) == {"rows": 2}
    small = [{"rows": _rows(s, n=MIN_VALUES // 8)} for s in range(4)]  # 512 values per field in all
    noisy = [{"rows": _noisy(r["rows"], 20 + i, 0.08)} for i, r in enumerate(small)]
    check = measure(small, noisy, FLOOR, field_axes=AXES).outputs["rows"]
    assert check.worst_field is None and check.ok == (check.cosine >= FLOOR.cosine)
    refs = [{"rows": _rows(s)} for s in range(4)]  # a declared output without fields: judged whole
    check = measure(refs, [{"rows": _noisy(r["rows"], 30 + i, 0.08)} for i, r in enumerate(refs)], FLOOR).outputs["rows"]
    assert check.worst_field is None and check.ok
