"""The front of a small image/mel classifier, as two tests of short block axes build it: ``source`` → Conv(w1) → Relu →
Conv(w2) → Relu → GlobalAveragePool → Flatten → MatMul(w3) → ``logits`` (the shape of a Keras classifier's front)."""

from __future__ import annotations

import onnx
from onnx import helper


def conv_front_nodes(source: str) -> list[onnx.NodeProto]:
    """The nodes from the first convolution, reading ``source``, to ``logits``; initializers ``w1``, ``w2``, ``w3``."""
    return [helper.make_node("Conv", [source, "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
            helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
            helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
            helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
            helper.make_node("GlobalAveragePool", ["r2"], ["gap"], name="gap"),
            helper.make_node("Flatten", ["gap"], ["feat"], name="flat"),
            helper.make_node("MatMul", ["feat", "w3"], ["logits"], name="head")]
