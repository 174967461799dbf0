"""BF16/FP16 roundings that cost without changing a bit: an ``If`` whose branches all hand back
rounded values, a branch's own rounding of an exact tensor, and a recurrent layer's whole output
rounded where the graph reads only its last step (bf16lat17, issue 26 item 3)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import onnxptq
from onnxptq.graph.passes import drop_exact_casts, sink_roundings
from onnxptq.graph.walk import all_graphs

BF16, F32 = TensorProto.BFLOAT16, TensorProto.FLOAT


def _pair(src: str, dst: str, to: int = BF16) -> list[onnx.NodeProto]:
    return [helper.make_node("Cast", [src], [dst + "_q"], name=dst + "_q", to=to),
            helper.make_node("Cast", [dst + "_q"], [dst], name=dst + "_dq", to=F32)]


def _c(name: str, value) -> onnx.TensorProto:
    return onnx.numpy_helper.from_array(np.asarray(value, np.float32), name)


def _casts(model: onnx.ModelProto) -> int:
    return sum(n.op_type == "Cast" for g in all_graphs(model.graph) for n in g.node)


def _run(model: onnx.ModelProto, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"]).run(None, feed)


def _same_bits(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return all(np.array_equal(np.asarray(x).view(np.uint8), np.asarray(y).view(np.uint8)) for x, y in zip(a, b))


def _edge_feed(shape: tuple[int, ...], seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).normal(0, 3, shape).astype(np.float32)
    flat = x.reshape(-1)
    flat[:8] = [np.inf, -np.inf, np.nan, -0.0, 1e-41, -3e-39, 1.00390625, 3.4e38]
    return x


def _verifier(else_rounded: bool) -> onnx.ModelProto:
    """openWakeWord's classifier layout (oww_hey_jarvis): a score, and an ``If`` on it whose then
    branch runs a second network and whose else branch hands the score back; the ``If``'s output is
    the graph output, rounded there. With ``else_rounded`` False the else branch hands back a new
    value (a Sigmoid of the score), so the ``If``'s output is not bfloat16-exact."""
    rng = np.random.default_rng(0)
    w1, w2 = (rng.normal(0, 0.5, (8, 1)).astype(np.float32) for _ in range(2))
    then = helper.make_graph(
        [helper.make_node("MatMul", ["q", "w2"], ["s2"]), helper.make_node("Sigmoid", ["s2"], ["p2_in"])]
        + _pair("p2_in", "p2")
        + [helper.make_node("Unsqueeze", ["q", "ax"], ["u_in"])] + _pair("u_in", "u"),  # silero_half: exact
        "then", [], [helper.make_tensor_value_info("p2", F32, [2, 1]), helper.make_tensor_value_info("u", F32, [1, 2, 8])])
    back = [helper.make_node("Identity", ["pr"], ["p1"])] if else_rounded else [helper.make_node("Sigmoid", ["pr"], ["p1"])]
    other = helper.make_graph(back + [helper.make_node("Unsqueeze", ["q", "ax"], ["u1"])], "else", [],
                              [helper.make_tensor_value_info("p1", F32, [2, 1]), helper.make_tensor_value_info("u1", F32, [1, 2, 8])])
    nodes = (_pair("x", "q") + [helper.make_node("MatMul", ["q", "w1"], ["s"]), helper.make_node("Sigmoid", ["s"], ["p_in"])]
             + _pair("p_in", "pr")
             + [helper.make_node("GreaterOrEqual", ["pr", "half"], ["c"]),
                helper.make_node("ReduceMax", ["c_f"], ["c_any"], keepdims=0),
                helper.make_node("Cast", ["c_any"], ["cond"], to=TensorProto.BOOL),
                helper.make_node("If", ["cond"], ["o_in", "v_in"], then_branch=then, else_branch=other)]
             + _pair("o_in", "out") + _pair("v_in", "v") + [helper.make_node("Sigmoid", ["v"], ["vs"])])
    nodes.insert(nodes.index(next(n for n in nodes if n.op_type == "ReduceMax")),
                 helper.make_node("Cast", ["c"], ["c_f"], to=F32))
    graph = helper.make_graph(nodes, "verifier", [helper.make_tensor_value_info("x", F32, [2, 8])],
                              [helper.make_tensor_value_info("out", F32, [2, 1]), helper.make_tensor_value_info("vs", F32, [1, 2, 8])],
                              [_c("w1", w1), _c("w2", w2), _c("half", 0.5),
                               onnx.numpy_helper.from_array(np.array([0], np.int64), "ax")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_an_if_of_rounded_branches_and_a_branchs_exact_rounding_lose_their_pairs():
    """The ``If``'s graph-output pair (both branches hand back bfloat16 values), the pair on the
    ``If``'s second output (an Unsqueeze of the rounded input in both branches) and the then
    branch's own pair on that Unsqueeze go; the graph keeps its output names and computes the same
    bits on feeds holding ±Inf, NaN, −0, subnormals, ties and values that round to Inf. On main the
    pass looked at the main graph's ops only and dropped none of them."""
    model = _verifier(else_rounded=True)
    before = onnx.ModelProto()
    before.CopyFrom(model)
    assert drop_exact_casts.drop_exact_casts(model) == 3
    onnx.checker.check_model(model)
    assert [o.name for o in model.graph.output] == ["out", "vs"]
    assert _casts(before) - _casts(model) == 6
    for seed in range(4):
        feed = {"x": _edge_feed((2, 8), seed)}
        assert _same_bits(_run(model, feed), _run(before, feed)), seed


def test_an_if_with_a_branch_that_computes_keeps_its_pair():
    """The else branch hands back a Sigmoid of the score: a new value, so the ``If``'s output pair
    stays (only the exact second output's pairs go)."""
    model = _verifier(else_rounded=False)
    before = onnx.ModelProto()
    before.CopyFrom(model)
    assert drop_exact_casts.drop_exact_casts(model) == 2
    producers = {o: n for n in model.graph.node for o in n.output}
    assert producers["out"].op_type == "Cast"
    feed = {"x": _edge_feed((2, 8), 7)}
    assert _same_bits(_run(model, feed), _run(before, feed))


def _recurrent(steps: int = 6, hidden: int = 16) -> onnx.ModelProto:
    """openWakeWord's hey_mycroft tail: a bidirectional LSTM whose whole output ``[T, 2, B, H]``
    is read only as its last step of each direction, concatenated, into a MatMul."""
    rng = np.random.default_rng(3)
    w = rng.normal(0, 0.3, (2, 4 * hidden, 8)).astype(np.float32)
    r = rng.normal(0, 0.3, (2, 4 * hidden, hidden)).astype(np.float32)
    head = rng.normal(0, 0.3, (2 * hidden, 3)).astype(np.float32)
    ints = {k: onnx.numpy_helper.from_array(np.array(v, np.int64), k) for k, v in
            {"last": [-1], "end": [steps], "zero": [0], "one": [1], "two": [2], "ax0": [0], "ax1": [1]}.items()}
    nodes = [
        helper.make_node("LSTM", ["x", "w", "r"], ["y"], hidden_size=hidden, direction="bidirectional"),
        helper.make_node("Slice", ["y", "last", "end", "ax0"], ["y_last"]),     # [1, 2, B, H]
        helper.make_node("Squeeze", ["y_last", "ax0"], ["y_s"]),               # [2, B, H]
        helper.make_node("Slice", ["y_s", "zero", "one", "ax0"], ["fw"]),
        helper.make_node("Slice", ["y_s", "one", "two", "ax0"], ["bw"]),
        helper.make_node("Squeeze", ["fw", "ax0"], ["fw_s"]),
        helper.make_node("Squeeze", ["bw", "ax0"], ["bw_s"]),
        helper.make_node("Concat", ["fw_s", "bw_s"], ["both"], axis=1),       # [B, 2H]
        helper.make_node("MatMul", ["both", "head"], ["logits"]),
    ]
    graph = helper.make_graph(nodes, "rnn", [helper.make_tensor_value_info("x", F32, [steps, "batch", 8])],
                              [helper.make_tensor_value_info("logits", F32, ["batch", 3])],
                              [_c("w", w), _c("r", r), _c("head", head), *ints.values()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _feeds(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.normal(0, 1, (6, 2, 8)).astype(np.float32)} for _ in range(n)]


@pytest.mark.parametrize("preset", ["BF16", "FP16"])
def test_a_recurrent_output_is_rounded_where_the_graph_reads_it(monkeypatch, preset):
    """BF16/FP16 quantize round the LSTM's output: with the rounding moved past the Slices,
    Squeezes and the Concat, it rounds ``[B, 2H]`` values instead of ``[T, 2, B, H]``, and the file
    computes the same bits as the one that rounds the whole output (feeds with ±Inf, NaN,
    subnormals). On main the pair read the LSTM's output."""
    model = _recurrent()
    cfg = onnxptq.get_preset(preset)
    moved = onnxptq.quantize(model, cfg, _feeds(4, 0)).model
    monkeypatch.setattr(sink_roundings, "sink_roundings", lambda m, sizes=None: 0)
    whole = onnxptq.quantize(model, cfg, _feeds(4, 0)).model
    to = BF16 if preset == "BF16" else TensorProto.FLOAT16

    def rounded(m: onnx.ModelProto) -> set[str]:
        producers = {o: n for n in m.graph.node for o in n.output}
        return {producers[n.input[0]].op_type for n in m.graph.node
                if n.op_type == "Cast" and n.attribute[0].i == to and n.input[0] in producers}

    assert "LSTM" in rounded(whole) and "LSTM" not in rounded(moved)
    assert "Concat" in rounded(moved)
    for k, feed in enumerate(_feeds(3, 1) + [{"x": _edge_feed((6, 2, 8), 5)}]):
        assert _same_bits(_run(moved, feed), _run(whole, feed)), k


def _chain(tail: list[onnx.NodeProto], outputs: list[str], dims: dict[str, list]) -> onnx.ModelProto:
    nodes = [helper.make_node("Relu", ["x"], ["r"])] + _pair("r", "t") + tail
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F32, [4, "b", 8])],
                              [helper.make_tensor_value_info(o, F32, [None, None, None]) for o in outputs],
                              [onnx.numpy_helper.from_array(np.array(v, np.int64), k)
                               for k, v in {"s0": [0], "s1": [1], "a0": [0]}.items()])
    graph.value_info.extend(helper.make_tensor_value_info(k, F32, v) for k, v in dims.items())
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_the_rounding_stays_where_moving_it_would_not_be_cheaper():
    """Not moved: a Transpose (as many values), two tensors leaving the moves (two pairs), a
    Concat that also reads another tensor (it would round that too), a graph output inside the
    moves, unknown sizes; moved: one Slice to fewer values."""
    slice_ = helper.make_node("Slice", ["t", "s0", "s1", "a0"], ["sl"])
    cases = {
        "transpose": ([helper.make_node("Transpose", ["t"], ["tr"], perm=[1, 0, 2]), helper.make_node("Sigmoid", ["tr"], ["y"])],
                      ["y"], {"r": [4, "b", 8], "tr": ["b", 4, 8]}, 0),
        "two leave": ([slice_, helper.make_node("Sigmoid", ["sl"], ["y"]), helper.make_node("Tanh", ["t"], ["z"])],
                      ["y", "z"], {"r": [4, "b", 8], "sl": [1, "b", 8]}, 0),
        "concat reads another": ([slice_, helper.make_node("Concat", ["sl", "x"], ["cc"], axis=0),
                                  helper.make_node("Sigmoid", ["cc"], ["y"])],
                                 ["y"], {"r": [4, "b", 8], "sl": [1, "b", 8], "cc": [5, "b", 8]}, 0),
        "output in the moves": ([slice_, helper.make_node("Sigmoid", ["sl"], ["y"])], ["y", "sl"],
                                {"r": [4, "b", 8], "sl": [1, "b", 8]}, 0),
        "unknown size": ([slice_, helper.make_node("Sigmoid", ["sl"], ["y"])], ["y"], {"r": [4, "b", 8], "sl": [None, "b", 8]}, 0),
        "slice": ([slice_, helper.make_node("Sigmoid", ["sl"], ["y"])], ["y"], {"r": [4, "b", 8], "sl": [1, "b", 8]}, 1),
    }
    for label, (tail, outputs, dims, moved) in cases.items():
        model = _chain(tail, outputs, dims)
        before = onnx.ModelProto()
        before.CopyFrom(model)
        assert sink_roundings.sink_roundings(model) == moved, label
        onnx.checker.check_model(model)
        feed = {"x": _edge_feed((4, 3, 8), 11)}
        assert _same_bits(_run(model, feed), _run(before, feed)), label


def test_fewer_reads_named_dims_as_at_least_one():
    assert sink_roundings.fewer((1, "b", 8), (4, "b", 8))
    assert not sink_roundings.fewer((1, "b", 8), (4, "c", 8))  # b may be larger than 4 c
    assert not sink_roundings.fewer(("b", "b", 1), ("b", 32))  # b² may exceed 32 b
    assert sink_roundings.fewer(("b", 64), (16, 2, "b", 32))
    assert not sink_roundings.fewer((4, "b", 8), (4, "b", 8))
    assert not sink_roundings.fewer((None, 8), (4, 8))


def _three_convs() -> onnx.ModelProto:
    """attacut's tokenizer head: three Conv1d widths on one embedding, each transposed and
    unsqueezed, stacked by a Concat, max-reduced over the stack, into a MatMul."""
    rng = np.random.default_rng(4)
    inits = [_c(f"w{k}", rng.normal(0, 0.3, (12, 8, k)).astype(np.float32)) for k in (1, 3, 5)]
    inits += [_c("head", rng.normal(0, 0.3, (12, 4)).astype(np.float32)),
              onnx.numpy_helper.from_array(np.array([3], np.int64), "ax")]
    nodes = []
    for k in (1, 3, 5):
        nodes += [helper.make_node("Conv", ["x", f"w{k}"], [f"c{k}"], pads=[k // 2, k // 2]),
                  helper.make_node("Transpose", [f"c{k}"], [f"t{k}"], perm=[0, 2, 1]),
                  helper.make_node("Unsqueeze", [f"t{k}", "ax"], [f"u{k}"])]
    nodes += [helper.make_node("Concat", ["u1", "u3", "u5"], ["stack"], axis=3),
              helper.make_node("ReduceMax", ["stack"], ["best"], axes=[3], keepdims=0),
              helper.make_node("MatMul", ["best", "head"], ["y"])]
    graph = helper.make_graph(nodes, "convs", [helper.make_tensor_value_info("x", F32, [1, 8, "seq"])],
                              [helper.make_tensor_value_info("y", F32, [1, "seq", 4])], inits)
    # the exporter's value infos (PyTorch names the sequence dim; ONNX inference loses it at a Conv)
    graph.value_info.extend([helper.make_tensor_value_info(f"c{k}", F32, [1, 12, "seq"]) for k in (1, 3, 5)]
                            + [helper.make_tensor_value_info(f"t{k}", F32, [1, "seq", 12]) for k in (1, 3, 5)]
                            + [helper.make_tensor_value_info(f"u{k}", F32, [1, "seq", 12, 1]) for k in (1, 3, 5)]
                            + [helper.make_tensor_value_info("stack", F32, [1, "seq", 12, 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_roundings_that_meet_in_a_concat_become_one(monkeypatch):
    """BF16 rounds the three Conv outputs; their values meet, moved only, in the Concat: one
    rounding of the Concat's output (as many values, four Cast nodes fewer) computes the same bits
    as the three (feeds with ±Inf, NaN, subnormals, −0). On main each Conv kept its pair."""
    model = _three_convs()
    cfg = onnxptq.get_preset("BF16")
    feeds = [{"x": np.random.default_rng(k).normal(0, 1, (1, 8, 10)).astype(np.float32)} for k in range(4)]
    moved = onnxptq.quantize(model, cfg, feeds).model
    monkeypatch.setattr(sink_roundings, "sink_roundings", lambda m, sizes=None: 0)
    kept = onnxptq.quantize(model, cfg, feeds).model

    def rounded(m: onnx.ModelProto) -> list[str]:
        producers = {o: n for n in m.graph.node for o in n.output}
        return sorted(producers[n.input[0]].op_type for n in m.graph.node
                      if n.op_type == "Cast" and n.attribute[0].i == BF16 and n.input[0] in producers)

    assert rounded(kept).count("Conv") == 3 and "Concat" not in rounded(kept)
    assert rounded(moved).count("Conv") == 0 and rounded(moved).count("Concat") == 1
    assert _casts(kept) - _casts(moved) == 4
    for k, feed in enumerate(feeds[:2] + [{"x": _edge_feed((1, 8, 10), 9)}]):
        assert _same_bits(_run(moved, feed), _run(kept, feed)), k
