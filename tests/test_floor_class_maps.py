"""A field axis of class probabilities is judged by its arg-max masks, not field by field (issue 27).

napari-czann-segment's U-Net writes its softmax out (``ReduceMax``/``Sub``/``Exp``/``ReduceSum``/
``Div``) → ``[N, 1024, 1024, 2]`` background/nucleus probabilities, read by arg-max. The floor split
the last axis into fields and broke on the nucleus channel's cosine (0.9229 with 16-bit activations
and weights) while the nucleus masks kept IoU 0.986; repair kept 272 of 310 nodes float
(bench/RESULTS.md, "Repair steps up to 16 bits"). Built here: the same tail on a map of blobs
whose soft edges and background float leaves between 0 and ½ (analysis/class_maps.py).
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from onnxptq.analysis.floor import Floor, measure, readings_of

H = W = 96


def _softmax_tail():
    """``logits [1, H, W, 2]`` → a softmax written out along the last axis → ``probs [1, H, W, 2]``."""
    axes = numpy_helper.from_array(np.array([3], np.int64), "axes")
    nodes = [helper.make_node("ReduceMax", ["logits", "axes"], ["mx"], name="max", keepdims=1),
             helper.make_node("Sub", ["logits", "mx"], ["d"], name="sub"),
             helper.make_node("Exp", ["d"], ["e"], name="exp"),
             helper.make_node("ReduceSum", ["e", "axes"], ["s"], name="sum", keepdims=1),
             helper.make_node("Div", ["e", "s"], ["probs"], name="div")]
    graph = helper.make_graph(nodes, "tail", [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, H, W, 2])],
                              [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, H, W, 2])], initializer=[axes])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _logits(rng: np.random.Generator) -> np.ndarray:
    """Nuclei (discs of radius 5-9) scoring +4 over the background's 0, a soft background of −1.5 ± 1."""
    yy, xx = np.mgrid[:H, :W]
    nucleus = -1.5 + rng.standard_normal((H, W)) * 0.5
    for _ in range(8):
        cy, cx, rad = rng.integers(10, H - 10), rng.integers(10, W - 10), rng.integers(5, 10)
        nucleus = np.where((yy - cy) ** 2 + (xx - cx) ** 2 <= rad ** 2, 4.0, nucleus)
    return np.stack([np.zeros((H, W)), nucleus], -1)[None].astype(np.float32)


def _runs():
    model = _softmax_tail()
    session = ort.InferenceSession(model.SerializeToString())
    rng = np.random.default_rng(0)
    feeds = [_logits(rng) for _ in range(4)]
    probs = [session.run(["probs"], {"logits": f})[0] for f in feeds]
    return model, session, feeds, probs


def test_soft_cells_that_move_keep_a_class_map_whose_masks_agree():
    """The candidate moves every soft background cell's logit by ±½ (its nucleus probability about
    0.18 ↔ 0.12-0.27) and no arg-max: the whole output's cosine stays 0.993, the nucleus channel's
    falls to 0.985 < 0.99, and the floor, which broke on it, now holds on IoU 1.0 of the nucleus masks."""
    model, session, feeds, probs = _runs()
    readings = readings_of(model)
    assert readings["field_axes"] == {"probs": 3} and "probs" not in readings["class_outputs"]
    rng = np.random.default_rng(1)
    moved = []
    for f in feeds:
        g = f.copy()
        soft = g[..., 1] < 0
        g[..., 1] = np.where(soft, np.minimum(g[..., 1] + rng.choice([-0.5, 0.5], g[..., 1].shape), -0.2), g[..., 1])
        moved.append(session.run(["probs"], {"logits": g})[0])
    floor = Floor("16-bit", 0.99, 0.97)
    verdict = measure([{"probs": p} for p in probs], [{"probs": m} for m in moved], floor, **readings)
    check = verdict.outputs["probs"]
    x, y = np.concatenate([p[..., 1].ravel() for p in probs]), np.concatenate([m[..., 1].ravel() for m in moved])
    assert x @ y / np.sqrt((x @ x) * (y @ y)) < 0.99 <= check.cosine  # the field cosine main judged by; the output's
    assert verdict.ok and check.worst_field is None and check.mask is not None and check.mask[1] == 1.0, check.describe()
    assert "arg-max class 1 of axis 3" in check.describe()


def test_a_class_map_whose_masks_shrink_breaks_the_floor():
    """Each nucleus loses its rim (logits at the edge pulled below the background's): IoU about 0.75.
    Under a 4/6-bit floor (cosine 0.95, top-1 0.90) main held on the nucleus channel's cosine 0.969."""
    model, session, feeds, probs = _runs()
    readings = readings_of(model)
    shrunk = []
    for f in feeds:
        g = f.copy()
        inside = g[0, ..., 1] > 0
        from scipy import ndimage

        rim = inside & ~ndimage.binary_erosion(inside)
        g[0, ..., 1] = np.where(rim, -0.5, g[0, ..., 1])
        shrunk.append(session.run(["probs"], {"logits": g})[0])
    verdict = measure([{"probs": p} for p in probs], [{"probs": s} for s in shrunk], Floor("4/6-bit", 0.95, 0.90), **readings)
    check = verdict.outputs["probs"]
    assert not verdict.ok and check.mask is not None and check.mask[1] < 0.9, check.describe()


def test_a_field_axis_of_no_probabilities_is_still_judged_field_by_field():
    """Values that do not sum to 1 along the axis (a detector's box fields) keep the per-field cosine."""
    rng = np.random.default_rng(2)
    ref = rng.standard_normal((1, 4000, 6)).astype(np.float32)
    got = ref.copy()
    got[..., 5] = rng.standard_normal((1, 4000)) * 0.3 + ref[..., 5]  # one field off
    verdict = measure([{"rows": ref}], [{"rows": got}], Floor("16-bit", 0.99, 0.97), field_axes={"rows": 2})
    check = verdict.outputs["rows"]
    assert check.worst_field is not None and check.worst_field[1] == 5 and not verdict.ok and check.mask is None
