"""A regression head gated by a sibling two-class head is judged on the rows it gives the object.

MTCNN's O-Net: three linear heads on one feature per candidate row, ``Softmax`` (background, face),
box offsets ``[N, 4]`` and landmarks ``[N, 10]``. Its package reads the offsets only of the rows
whose face probability passes 0.7. The floor judged the offsets over every row and broke A8W8 on
errors that sat on the background rows (up to 8 px of the 48-px crop; every face row within 1 px:
bench/RESULTS.md, branch refpreset), and repair kept nodes float for them. The graph here is
O-Net's tail (``MatMul → PRelu`` feature, the three ``MatMul → Add`` heads, ``Softmax`` on one), run
on random crop features; the quantized outputs are float's with errors placed on chosen rows.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from onnxptq.analysis.floor import FAMILY_FLOORS, Floor, measure, readings_of
from onnxptq.analysis.row_gates import gated_outputs, object_rows

FEATURES, HIDDEN, ROWS = 24, 16, 8


def onet_tail(classes: int = 2, same_feature: bool = True) -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    inits = {"w": rng.standard_normal((FEATURES, HIDDEN)) * 0.3, "b": np.zeros(HIDDEN), "slope": np.full(HIDDEN, 0.25),
             "wc": rng.standard_normal((HIDDEN, classes)), "bc": np.zeros(classes),
             "wb": rng.standard_normal((HIDDEN, 4)) * 0.05, "bb": np.zeros(4),
             "wl": rng.standard_normal((HIDDEN, 10)) * 0.05, "bl": np.full(10, 0.5)}
    tensors = [numpy_helper.from_array(np.asarray(v, np.float32), n) for n, v in inits.items()]
    cls_in = "f" if same_feature else "x2"
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="dense_3"), helper.make_node("Add", ["h", "b"], ["hb"], name="Add3"),
             helper.make_node("PRelu", ["hb", "slope"], ["f"], name="p_re_lu"),
             helper.make_node("MatMul", [cls_in, "wc"], ["c"], name="dense_4"), helper.make_node("Add", ["c", "bc"], ["cb"], name="Add2"),
             helper.make_node("Softmax", ["cb"], ["softmax_2"], name="softmax_2", axis=1),
             helper.make_node("MatMul", ["f", "wb"], ["bo"], name="dense_5"), helper.make_node("Add", ["bo", "bb"], ["dense_5"], name="Add"),
             helper.make_node("MatMul", ["f", "wl"], ["lm"], name="dense_6"), helper.make_node("Add", ["lm", "bl"], ["dense_6"], name="Add1")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", FEATURES])]
    if not same_feature:
        nodes.insert(0, helper.make_node("Relu", ["x"], ["x2"], name="other"))
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N", k]) for n, k in (("dense_5", 4), ("dense_6", 10), ("softmax_2", classes))]
    model = helper.make_model(helper.make_graph(nodes, "onet", inputs, outputs, tensors), opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _runs(model: onnx.ModelProto, feeds: int = 12) -> list[dict[str, np.ndarray]]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    names = [o.name for o in model.graph.output]
    return [dict(zip(names, sess.run(None, {"x": rng.standard_normal((ROWS, FEATURES)).astype(np.float32)}))) for _ in range(feeds)]


def _off(reference: list[dict[str, np.ndarray]], on_objects: bool) -> list[dict[str, np.ndarray]]:
    """Float's outputs with 0.07 of the box offsets' spread added (the tolerance is 0.05) to every row of one class."""
    box = np.concatenate([r["dense_5"] for r in reference])
    step = 0.07 * (np.percentile(box, 95, axis=0) - np.percentile(box, 5, axis=0))
    out = []
    for r in reference:
        rows = object_rows(r["softmax_2"], ROWS)
        assert rows is not None
        hit = rows if on_objects else ~rows
        out.append({**r, "dense_5": (r["dense_5"] + hit[:, None] * step).astype(np.float32)})
    return out


FLOOR = Floor("8-bit", *FAMILY_FLOORS["8-bit"])


def test_box_offsets_are_judged_on_the_rows_the_two_class_head_keeps():
    model = onet_tail()
    assert gated_outputs(model) == {"dense_5": "softmax_2", "dense_6": "softmax_2"}
    reference = _runs(model)
    objects = sum(int(object_rows(r["softmax_2"], ROWS).sum()) for r in reference)
    assert FLOOR.needed <= objects < ROWS * len(reference)  # both classes present, enough object rows to judge
    # errors on the background rows only: never read; main judged every row and broke (0.5 of them off)
    held = measure(reference, _off(reference, on_objects=False), FLOOR, **readings_of(model))
    check = held.outputs["dense_5"]
    assert held.ok and check.scores is not None and check.scores[1] == objects and check.scores[2] == 0
    assert "on the rows softmax_2 gives the object" in check.describe()
    # the same errors on the object rows: broken
    broken = measure(reference, _off(reference, on_objects=True), FLOOR, **readings_of(model))
    assert not broken.ok and broken.outputs["dense_5"].scores[2] == objects


def test_no_gate_without_a_two_class_head_on_the_same_feature():
    assert gated_outputs(onet_tail(classes=3)) == {}
    assert gated_outputs(onet_tail(same_feature=False)) == {}
    # a decision whose values are no two-class probabilities gates nothing
    assert object_rows(np.full((ROWS, 2), 0.7, np.float32), ROWS) is None
    assert object_rows(np.full((ROWS, 2), 0.5, np.float32), ROWS + 1) is None
