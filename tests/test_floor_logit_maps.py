"""Class logits no softmax ends are judged by their arg-max masks; images, height and flow maps are not (issue 27).

BiSeNet face parsing ends ``Conv 1×1 [19] → Resize`` → per-pixel class logits, which its package reads by arg-max:
the floor judged them by their cosine alone, and MXFP8_E4M3 / MXINT8 held while the hair masks lost (bench/RESULTS.md,
"The twenty-eighth round"). Built here: the same tail (a 1×1 class Conv whose rows share no common shift, as a
softmax cross-entropy leaves them, then a bilinear Resize), and three outputs of the same structure that are no class
map: an image's colour channels, a height map, a two-channel flow field (analysis/class_maps.py, "Class logits").
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from onnxptq.analysis.class_maps import logit_axis
from onnxptq.analysis.floor import Floor, measure, readings_of

S, UP = 16, 4
FLOOR = Floor("16-bit", 0.99, 0.97)


def _head(weight: np.ndarray, bias: np.ndarray, channels_in: int, name: str = "out"):
    """``x [1, channels_in, S, S]`` → ``Conv 1×1`` (``weight [C, channels_in]``, ``bias``) → bilinear ``Resize`` ×4."""
    c = weight.shape[0]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["z"], name="head"),
             helper.make_node("Resize", ["z", "", "scales"], [name], name="up", mode="linear")]
    inits = [numpy_helper.from_array(weight.astype(np.float32)[:, :, None, None], "w"),
             numpy_helper.from_array(bias.astype(np.float32), "b"),
             numpy_helper.from_array(np.array([1, 1, UP, UP], np.float32), "scales")]
    graph = helper.make_graph(nodes, "head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels_in, S, S])],
                              [helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, c, S * UP, S * UP])], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _smooth(rng: np.random.Generator, channels: int) -> np.ndarray:
    x = rng.standard_normal((1, channels, S, S))
    for axis in (2, 3):
        x = np.apply_along_axis(lambda v: np.convolve(v, np.ones(3) / 3, "same"), axis, x)
    return x.astype(np.float32)


def _run(model, feeds):
    session = ort.InferenceSession(model.SerializeToString())
    return [session.run(None, f)[0] for f in feeds]


C = 19  # BiSeNet face parsing's count: more than a field axis holds (analysis/fields.py), so main judged its cosine alone


def _segmenter(shift: float = 0.0):
    """Class logits ``4·(x − mean over classes)`` of ``C`` per-pixel class evidence maps (zero-mean rows: the common
    shift a cross-entropy never trains); ``shift`` added to class 2's bias (a rounding that favours one class)."""
    bias = np.zeros(C)
    bias[2] = shift
    return _head((np.eye(C) - 1.0 / C) * 4.0, bias, C, "logits")


def _class_feeds(n: int = 4) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    feeds = []
    for _ in range(n):
        x = _smooth(rng, C)
        x[:, 0] += 0.7  # a background class, float's arg-max at about 0.7 of the pixels
        feeds.append({"x": x})
    return feeds


def _verdict(model, candidate_model, feeds, name: str):
    readings = readings_of(model)
    ref = [{name: r} for r in _run(model, feeds)]
    got = [{name: g} for g in _run(candidate_model, feeds)]
    return readings, measure(ref, got, FLOOR, **readings).outputs[name]


def test_logits_whose_arg_max_moves_break_the_floor_their_cosine_holds():
    """Class 2's bias +0.5: the logits' cosine stays 0.996 (main held on it), the labelled masks keep IoU 0.917."""
    feeds = _class_feeds()
    readings, check = _verdict(_segmenter(), _segmenter(0.5), feeds, "logits")
    assert readings["logit_maps"] == {"logits": (1, C)}
    assert check.cosine >= FLOOR.cosine
    assert check.mask is not None and check.mask[1] < 0.95 and not check.ok, check.describe()
    assert "class logits: labelled masks, background class 0 left out" in check.describe()


def test_logits_whose_arg_max_stays_hold():
    feeds = _class_feeds()
    _, check = _verdict(_segmenter(), _segmenter(0.002), feeds, "logits")
    assert check.ok and check.mask is not None and check.mask[1] >= FLOOR.top1, check.describe()


def test_an_image_is_no_class_map():
    """A 1×1 Conv to RGB (an image-to-image model's last layer): its channels share their luminance, so the data
    refuses it though the structure is the class head's; judged by its cosine as before."""
    rng = np.random.default_rng(1)
    tint = np.array([[1.0, 0.1, 0.0], [0.1, 0.9, 0.1], [0.0, 0.1, 1.1]])  # colour mixing, luminance carried through
    model, moved = _head(tint, np.zeros(3), 3, "rgb"), _head(tint * 1.01, np.zeros(3), 3, "rgb")
    feeds = []
    for _ in range(4):
        grey = rng.uniform(0, 1, (1, 1, S, S))
        feeds.append({"x": (grey + 0.1 * rng.standard_normal((1, 3, S, S))).astype(np.float32)})
    readings, check = _verdict(model, moved, feeds, "rgb")
    assert readings["logit_maps"] == {"rgb": (1, 3)}  # the structure alone would take it
    assert not logit_axis(_run(model, feeds), 1, 3)
    assert check.mask is None, check.describe()


def test_a_height_map_and_a_flow_field_are_no_class_maps():
    """One channel (a height map) is no class axis; a flow field's two channels are regressed each on its own (its
    per-position mean moves with them), so the data refuses it."""
    rng = np.random.default_rng(2)
    height = _head(rng.standard_normal((1, 4)), np.zeros(1), 4, "height")
    assert readings_of(height)["logit_maps"] == {}
    flow = _head(rng.standard_normal((2, 4)), np.zeros(2), 4, "flow")
    feeds = [{"x": _smooth(rng, 4)} for _ in range(4)]
    assert readings_of(flow)["logit_maps"] == {"flow": (1, 2)}
    assert not logit_axis(_run(flow, feeds), 1, 2)
    _, check = _verdict(flow, _head(rng.standard_normal((2, 4)), np.zeros(2), 4, "flow"), feeds, "flow")
    assert check.mask is None


def _topk_model(weight: np.ndarray, k_input: bool = True):
    """``x [N, 10]`` → ``MatMul`` → ``scores`` → ``TopK`` → ``values``, ``indices``: k an input as in fuzz18's
    topk_argmax_heads (``k_input``), else a constant 3 (its rows then a selection: analysis/selection.py)."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["scores"], name="mm"),
             helper.make_node("TopK", ["scores", "k"], ["values", "indices"], name="top3", axis=-1)]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 10])]
    inits = [numpy_helper.from_array(weight.astype(np.float32), "w")]
    if k_input:
        inputs.append(helper.make_tensor_value_info("k", TensorProto.INT64, [1]))
    else:
        inits.append(numpy_helper.from_array(np.array([3], np.int64), "k"))
    graph = helper.make_graph(nodes, "topk", inputs, [helper.make_tensor_value_info("values", TensorProto.FLOAT, [None, 3]),
                                                      helper.make_tensor_value_info("indices", TensorProto.INT64, [None, 3])],
                              initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _topk_runs(weight, moved, feeds, k_input: bool = True):
    from onnxptq.analysis.decisions import capture

    model, candidate = _topk_model(weight, k_input), _topk_model(moved, k_input)
    if k_input:
        feeds = [dict(f, k=np.array([3], np.int64)) for f in feeds]
    readings = readings_of(model)
    refs, gots = [], []
    for m, out in ((model, refs), (candidate, gots)):
        session = ort.InferenceSession(m.SerializeToString())
        for f, extra in zip(feeds, capture(m, feeds, readings["decisions"])):
            out.append(dict(zip(("values", "indices"), session.run(None, f)), **extra))
    return readings, refs, gots


def test_topk_indices_that_change_break_the_floor():
    """A weight moved by 5 % changes the top-3 set on 5 of 64 rows while the TopK's scores keep cosine 0.999 and
    the values' 0.999: on main the index output was not judged and the verdict held."""
    rng = np.random.default_rng(3)
    weight = rng.standard_normal((10, 10))
    feeds = [{"x": rng.standard_normal((16, 10)).astype(np.float32)} for _ in range(4)]
    readings, refs, gots = _topk_runs(weight, weight + 0.05 * rng.standard_normal((10, 10)), feeds)
    assert set(readings["index_outputs"]) == {"indices"}
    verdict = measure(refs, gots, FLOOR, **readings)
    check = verdict.outputs["decision:top3 indices indices"]
    assert check.rows == 64 and check.top1 < FLOOR.top1 and not check.ok and not verdict.ok, check.describe()
    assert "the set float chose kept on" in check.describe()


def test_topk_indices_reordered_or_swapped_within_a_tie_are_kept():
    """The same set in another order is the same choice; a swap between float's tied third and fourth scores is a
    tie float could have broken either way. With k a constant the rows are a selection too (analysis/selection.py),
    no longer judged by a cosine of index values: by the sets."""
    rng = np.random.default_rng(4)
    weight = rng.standard_normal((10, 10))
    feeds = [{"x": rng.standard_normal((16, 10)).astype(np.float32)} for _ in range(4)]
    readings, refs, gots = _topk_runs(weight, weight, feeds, k_input=False)
    assert "indices" in readings["selection"]
    for ref, got in zip(refs, gots):
        got["indices"] = got["indices"][:, ::-1].copy()  # the same sets, reversed
    scores = refs[0]["decision:top3"]
    order = np.argsort(-scores[0])
    scores[0, order[3]] = scores[0, order[2]]  # float's third and fourth tie on row 0
    gots[0]["indices"][0] = [order[0], order[1], order[3]]
    verdict = measure(refs, gots, FLOOR, **readings)
    check = verdict.outputs["decision:top3 indices indices"]
    assert check.ok and check.top1 == 1.0 and verdict.ok, check.describe()
    assert "indices" not in verdict.outputs
    assert "1 of them by a tie" in check.describe()


def test_the_class_axis_follows_a_transpose_and_a_detectors_heads_are_not_taken():
    """``Conv 1×1 [19] → Transpose(0, 2, 3, 1)`` puts the classes last (a TF-style NHWC output); a second 1×1 head of
    another width beside it (a CenterNet's sizes beside its heat map) makes both a detector's heads."""
    w = numpy_helper.from_array(np.zeros((C, 4, 1, 1), np.float32), "w")
    w2 = numpy_helper.from_array(np.zeros((2, 4, 1, 1), np.float32), "w2")
    nodes = [helper.make_node("Conv", ["x", "w"], ["z"], name="head"),
             helper.make_node("Transpose", ["z"], ["nhwc"], name="t", perm=[0, 2, 3, 1]),
             helper.make_node("Conv", ["x", "w2"], ["sizes"], name="sizes_head")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, S, S])
    nhwc = helper.make_tensor_value_info("nhwc", TensorProto.FLOAT, [1, S, S, C])
    sizes = helper.make_tensor_value_info("sizes", TensorProto.FLOAT, [1, 2, S, S])
    alone = helper.make_model(helper.make_graph(nodes[:2], "nhwc", [x], [nhwc], initializer=[w]))
    assert readings_of(alone)["logit_maps"] == {"nhwc": (3, C)}
    beside = helper.make_model(helper.make_graph(nodes, "det", [x], [nhwc, sizes], initializer=[w, w2]))
    assert readings_of(beside)["logit_maps"] == {}
