"""A softmax over a convolution's channels: the convolution is the class head, its logits stay float
(issue 27, third round).

slovorez 0.1.0 (a Russian morpheme tagger, Keras Conv1D exported by tf2onnx) ends
``Conv [27, 96, 1, 1] → Squeeze → Add(bias) → Softmax(axis=1) → Transpose``: per character, 27
BIES tags. The class-score rule kept a ``MatMul``/``Gemm`` head's logits float but not a
convolution's, so A8W8 put the logits on an int8 grid and 24 % of the words changed a tag
(0.758 exact against float; with the head's output float 0.910; bench/RESULTS.md "More models
outside the zoo, third round").

The graph here is that tagger's shape: character ids → embedding ``Gather`` → three Conv1D
(written as Unsqueeze → Conv 1×k → Squeeze → bias Add → Relu) → the 1×1 head → Softmax over the
channel axis → Transpose to [batch, chars, tags].
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from onnxptq.analysis.class_scores import SCORE_REASON, score_float_tensors
from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config

TAGS, CHARS = 12, 40


def _conv1d_tagger(seed: int = 11):
    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def const(name, arr, dtype=np.float32):
        inits.append(numpy_helper.from_array(np.asarray(arr, dtype), name))
        return name

    nodes.append(helper.make_node("Gather", [const("emb", rng.normal(0, 1, (CHARS, 32))), "ids"], ["e"], axis=0))
    nodes.append(helper.make_node("Transpose", ["e"], ["et"], perm=[0, 2, 1]))  # [B, 32, L]
    src, ch = "et", 32
    for i, (out_ch, k) in enumerate(((48, 5), (48, 5), (32, 1))):
        nodes += [helper.make_node("Unsqueeze", [src, const("ax2", [2], np.int64) if i == 0 else "ax2"], [f"u{i}"]),
                  helper.make_node("Conv", [f"u{i}", const(f"w{i}", rng.normal(0, (2.0 / (ch * k)) ** 0.5, (out_ch, ch, 1, k)))],
                                   [f"c{i}"], pads=[0, k // 2, 0, k // 2]),
                  helper.make_node("Squeeze", [f"c{i}", "ax2"], [f"s{i}"]),
                  helper.make_node("Add", [f"s{i}", const(f"b{i}", rng.normal(0, 0.1, (1, out_ch, 1)))], [f"a{i}"]),
                  helper.make_node("Relu", [f"a{i}"], [f"r{i}"])]
        src, ch = f"r{i}", out_ch
    nodes += [helper.make_node("Unsqueeze", [src, "ax2"], ["hu"]),
              helper.make_node("Conv", ["hu", const("hw", rng.normal(0, (2.0 / ch) ** 0.5, (TAGS, ch, 1, 1)))], ["head"], name="head_conv"),
              helper.make_node("Squeeze", ["head", "ax2"], ["hs"]),
              helper.make_node("Add", ["hs", const("hb", rng.normal(0, 0.1, (1, TAGS, 1)))], ["logits"]),
              helper.make_node("Softmax", ["logits"], ["probs"], axis=1),
              helper.make_node("Transpose", ["probs"], ["tags"], perm=[0, 2, 1])]
    graph = helper.make_graph(nodes, "tagger", [helper.make_tensor_value_info("ids", TensorProto.INT64, ["B", "L"])],
                              [helper.make_tensor_value_info("tags", TensorProto.FLOAT, ["B", "L", TAGS])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_the_logits_of_a_softmax_over_conv_channels_stay_float():
    model = _conv1d_tagger()
    kept = score_float_tensors(model)
    assert kept.get("head") == SCORE_REASON and kept.get("tags") == SCORE_REASON
    assert not any(name.startswith(("c", "s", "r")) and name[1:].isdigit() for name in kept)  # the trunk stays quantized
    rng = np.random.default_rng(2)
    feeds = [{"ids": rng.integers(1, CHARS, (16, 12)).astype(np.int64)} for _ in range(12)]
    result = quantize(model, resolve_config("A8W8").replace(repair=False), feeds)
    assert "head_conv" in result.plan.nodes  # its input and weight are quantized ...
    assert result.plan.float_tensors.get("head") == SCORE_REASON  # ... its logits are not
