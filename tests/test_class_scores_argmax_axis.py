"""An ``ArgMax`` makes its input class scores only where it decides along that input's last axis.

bench/fuzz_silent.py (issue 27, "never silent") quantized trained small torch modules and judged each
delivered model again on 256 fresh feeds. A convolutional head ``Conv → y [N, 4, H, W]`` whose graph
also exports ``y.argmax(1)`` (``ArgMax(axis=1)``, the pixels' classes) was recognized as class scores
by rule 2 of ``class_scores.class_like_outputs`` (an arg-max consumer), and the floor reads class
scores along their *last* axis: it judged the arg-max across each row's pixel columns as reads. A
rounding swaps near-equal neighbouring pixels, so the plain build broke under every preset but FP16
and repair kept every node float (the delivered models were not quantized); on 256 fresh feeds the
same reading said otherwise (its data-driven parts switch), so the verdicts did not even agree with
themselves. Now rule 2 asks the decider's axis to be the last one the graph declares; the head is
judged by its cosine and its per-channel field cosine (``fields.declared_field_axes``).

The graph here is the smallest such head: NCHW image → Conv 3×3 [4] → ``y``, ``ArgMax(y, axis=1)``
→ ``ids``.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import onnxptq
from onnxptq.analysis.class_scores import Scores, class_like_outputs

H = W = 8


def _head(axis: int) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.4, (4, 3, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.normal(0, 0.1, (4,)).astype(np.float32), "b")]
    nodes = [helper.make_node("Conv", ["image", "w", "b"], ["y"], name="conv_head", pads=[1, 1, 1, 1]),
             helper.make_node("ArgMax", ["y"], ["ids"], name="argmax", axis=axis, keepdims=0)]
    out_shape = [1, H, W] if axis in (1, -3) else [1, 4, H] if axis in (3, -1) else None
    graph = helper.make_graph(nodes, "conv_head", [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, H, W])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, H, W]),
                               helper.make_tensor_value_info("ids", TensorProto.INT64, out_shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def test_an_argmax_over_channels_does_not_make_pixel_columns_classes():
    assert class_like_outputs(_head(1)) == {}
    assert class_like_outputs(_head(-3)) == {}


def test_an_argmax_over_the_last_axis_still_makes_class_scores():
    assert class_like_outputs(_head(3)) == {"y": Scores(None, "argmax")}
    assert class_like_outputs(_head(-1)) == {"y": Scores(None, "argmax")}


def test_an_undeclared_rank_keeps_rule_two():
    """Where the graph declares no rank for the decided tensor, rule 2 stands as it was."""
    model = _head(1)
    model.graph.output[0].type.tensor_type.ClearField("shape")
    assert class_like_outputs(model) == {"y": Scores(None, "argmax")}


def test_the_channel_argmax_head_is_not_judged_by_pixel_reads():
    """End to end (BF16, 16 feeds): ``y`` is judged by cosine, not by reads across its pixel columns,
    and nothing is kept float for it (before: reads along W broke the floor, repair kept the Conv float)."""
    rng = np.random.default_rng(1)
    feeds = [{"image": rng.normal(0, 1, (1, 3, H, W)).astype(np.float32)} for _ in range(16)]
    res = onnxptq.quantize(_head(1), "BF16", data=feeds)
    check = res.floor.outputs["y"]
    assert check.positions is None and check.top1 is None
    assert res.floor.ok and not (res.repair or {}).get("kept_float")
    assert res.plan.nodes  # the Conv is quantized
