"""Tests for cross-layer equalization: float outputs unchanged, channel ranges equalized, unsafe
activations left alone, exact bias absorption; on synthetic chains and on both PP-OCR models."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq.config.schema import EqualizationOptions
from onnxptq.graph.passes.equalize import BIAS_SHRINK, equalize, find_pairs
from onnxptq.graph.passes._common import to_ir

RNG = np.random.default_rng(0)


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def _imbalanced(shape: tuple[int, ...], axis: int = 0) -> np.ndarray:
    """Weights whose channels on ``axis`` differ in range by up to 1000x (as after BatchNorm folding)."""
    w = RNG.standard_normal(shape)
    gains = np.exp(RNG.uniform(np.log(1e-3), 0, shape[axis])) * 4
    return (w * gains.reshape([-1 if i == axis else 1 for i in range(len(shape))])).astype(np.float32)


def _model(nodes, inits, x_shape, y_shape) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
                              [numpy_helper.from_array(a, n) for n, a in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _conv_chain(act: list[onnx.NodeProto], extra: dict | None = None) -> onnx.ModelProto:
    """conv1 (8→16) → act… → depthwise conv (16) → Relu → conv3 (16→4)."""
    inits = {"W1": _imbalanced((16, 8, 3, 3)), "B1": RNG.standard_normal(16).astype(np.float32),
             "W2": _imbalanced((16, 1, 3, 3)), "B2": RNG.standard_normal(16).astype(np.float32),
             "W3": _imbalanced((4, 16, 1, 1), axis=1), "B3": RNG.standard_normal(4).astype(np.float32)}
    inits.update(extra or {})
    nodes = [helper.make_node("Conv", ["x", "W1", "B1"], ["c1"], name="conv1", pads=[1, 1, 1, 1])]
    prev = "c1"
    for i, node in enumerate(act):
        node.input[0] = prev
        node.output[0] = f"a{i}"
        prev = f"a{i}"
        nodes.append(node)
    nodes += [helper.make_node("Conv", [prev, "W2", "B2"], ["c2"], name="dw", group=16, pads=[1, 1, 1, 1]),
              helper.make_node("Relu", ["c2"], ["r2"]),
              helper.make_node("Conv", ["r2", "W3", "B3"], ["y"], name="conv3")]
    return _model(nodes, inits, [2, 8, 10, 10], [2, 4, 10, 10])


def _weights(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    return {n.name: inits[n.input[1]] for n in model.graph.node if n.op_type in ("Conv", "Gemm", "MatMul")}


def _max_delta(a: onnx.ModelProto, b: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> float:
    return max(float(np.abs(x - y).max()) for x, y in zip(_run(a, feeds), _run(b, feeds)))


def _int8_weight_error(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> float:
    """Relative output error of ``model`` with every layer weight rounded to per-tensor int8."""
    q = onnx.ModelProto()
    q.CopyFrom(model)
    weights = {n.input[1] for n in q.graph.node if n.op_type in ("Conv", "Gemm", "MatMul")}
    for t in q.graph.initializer:
        if t.name in weights:
            w = numpy_helper.to_array(t)
            s = np.abs(w).max() / 127
            t.CopyFrom(numpy_helper.from_array((np.clip(np.round(w / s), -127, 127) * s).astype(w.dtype), t.name))
    ref, out = _run(model, feeds)[0], _run(q, feeds)[0]
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


@pytest.mark.parametrize("act", [
    [],
    [helper.make_node("Relu", ["i"], ["o"])],
    [helper.make_node("LeakyRelu", ["i"], ["o"], alpha=0.1)],
    [helper.make_node("Clip", ["i", "zero"], ["o"])],
    [helper.make_node("Relu", ["i"], ["o"]), helper.make_node("Mul", ["i", "k"], ["o"]),
     helper.make_node("Add", ["i", "c"], ["o"])],
    [helper.make_node("MaxPool", ["i"], ["o"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])],
], ids=["identity", "relu", "leakyrelu", "clip0", "relu_mul_add", "maxpool"])
def test_float_outputs_unchanged_and_weights_balanced(act):
    extra = {"zero": np.array(0, np.float32), "k": np.float32(0.5) * np.ones((16, 1, 1), np.float32),
             "c": RNG.standard_normal((1, 16, 1, 1)).astype(np.float32)}
    model = _conv_chain(act, extra)
    out = equalize(model, EqualizationOptions(steps=-1))
    onnx.checker.check_model(out)
    feeds = {"x": RNG.standard_normal((2, 8, 10, 10)).astype(np.float32)}
    ref = _run(model, feeds)[0]
    assert _max_delta(model, out, feeds) <= 1e-4 * float(np.abs(ref).max())
    before, after = _weights(model), _weights(out)
    assert not np.array_equal(before["conv1"], after["conv1"])
    # The point of it: per-tensor int8 weights lose far less of the output.
    assert _int8_weight_error(out, feeds) < 0.6 * _int8_weight_error(model, feeds)


def test_ranges_equal_within_threshold_after_convergence():
    model = _conv_chain([helper.make_node("Relu", ["i"], ["o"])])
    opts = EqualizationOptions(steps=-1, scale_append_bias=False, scale_use_threshold=False, absorb_bias=False)
    out = equalize(model, opts)
    pairs = find_pairs(to_ir(out).graph)
    assert [(p.head.node.name, p.tail.node.name) for p in pairs] == [("conv1", "dw"), ("dw", "conv3")]
    for p in pairs:
        r0, r1 = p.head.out_range(), p.tail.in_range()
        # converged: one more round would change no scale by more than the threshold (log-scale)
        np.testing.assert_allclose(r0, r1, rtol=1e-3)
    # one round only (the reference default) leaves the depthwise layer between two unequal pulls
    once = find_pairs(to_ir(equalize(model, EqualizationOptions(steps=1, scale_append_bias=False,
                                                                 scale_use_threshold=False, absorb_bias=False))).graph)
    assert not np.allclose(once[0].head.out_range(), once[0].tail.in_range(), rtol=1e-3)


def test_threshold_keeps_small_channels():
    model = _conv_chain([helper.make_node("Relu", ["i"], ["o"])])
    opts = EqualizationOptions(steps=1, weight_threshold=1e9, absorb_bias=False)
    out = equalize(model, opts)
    for name, w in _weights(model).items():
        np.testing.assert_array_equal(_weights(out)[name], w)


@pytest.mark.parametrize("op,attrs,inputs", [
    ("HardSwish", {}, []), ("Sigmoid", {}, []), ("HardSigmoid", {}, []), ("Tanh", {}, []),
    ("Clip", {}, ["zero", "six"]),  # ReLU6: not homogeneous
    ("Add", {}, ["x2"]),  # a residual: the other branch is not scaled
], ids=["hardswish", "sigmoid", "hardsigmoid", "tanh", "relu6", "residual"])
def test_non_homogeneous_links_are_not_scaled_through(op, attrs, inputs):
    extra = {"zero": np.array(0, np.float32), "six": np.array(6, np.float32)}
    node = helper.make_node(op, ["i"] + inputs, ["o"], **attrs)
    model = _conv_chain([node], extra)
    if op == "Add":  # make x2 a real tensor of the same shape from the input
        model.graph.node.insert(0, helper.make_node("Conv", ["x", "W1"], ["x2"], name="side", pads=[1, 1, 1, 1]))
    pairs = find_pairs(to_ir(model).graph)
    assert ("conv1", "dw") not in [(p.head.node.name, p.tail.node.name) for p in pairs]
    out = equalize(model)
    np.testing.assert_array_equal(_weights(out)["conv1"], _weights(model)["conv1"])


def test_gemm_and_matmul_chains():
    inits = {"W1": _imbalanced((6, 12), axis=0), "C1": RNG.standard_normal(12).astype(np.float32),
             "W2": _imbalanced((12, 5)), "C2": RNG.standard_normal(5).astype(np.float32),
             "W3": _imbalanced((7, 5), axis=0)}
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["m1"], name="mm1"),
             helper.make_node("Add", ["m1", "C1"], ["a1"]),
             helper.make_node("Relu", ["a1"], ["r1"]),
             helper.make_node("Gemm", ["r1", "W2", "C2"], ["g2"], name="gemm2", alpha=0.5, beta=2.0),
             helper.make_node("Relu", ["g2"], ["r2"]),
             helper.make_node("Gemm", ["r2", "W3"], ["y"], name="gemm3", transB=1)]
    model = _model(nodes, inits, [3, 6], [3, 7])
    out = equalize(model, EqualizationOptions(steps=-1))
    assert len(find_pairs(to_ir(model).graph)) == 2
    feeds = {"x": RNG.standard_normal((3, 6)).astype(np.float32)}
    assert _max_delta(model, out, feeds) <= 1e-4 * float(np.abs(_run(model, feeds)[0]).max())
    assert not np.array_equal(_weights(out)["gemm2"], _weights(model)["gemm2"])


def test_bias_absorbed_only_where_exact():
    """Identity chain into an unpadded 1x1 conv: the head bias moves into the tail; with a Relu
    between them it stays (absorption there would need a proven lower bound)."""
    def chain(act):
        inits = {"W1": _imbalanced((16, 8, 3, 3)), "B1": (RNG.standard_normal(16) * 5).astype(np.float32),
                 "W2": _imbalanced((4, 16, 1, 1), axis=1), "B2": RNG.standard_normal(4).astype(np.float32)}
        nodes = [helper.make_node("Conv", ["x", "W1", "B1"], ["c1"], name="conv1", pads=[1, 1, 1, 1])]
        nodes += [helper.make_node(op, ["c1"], ["a"]) for op in act] or [helper.make_node("Identity", ["c1"], ["a"])]
        nodes.append(helper.make_node("Conv", ["a", "W2", "B2"], ["y"], name="conv2"))
        return _model(nodes, inits, [2, 8, 6, 6], [2, 4, 6, 6])

    feeds = {"x": RNG.standard_normal((2, 8, 6, 6)).astype(np.float32)}
    for act, absorbed in (([], True), (["Relu"], False)):
        model = chain(act)
        out = equalize(model)
        biases = {n.name: numpy_helper.to_array(next(t for t in out.graph.initializer if t.name == n.input[2]))
                  for n in out.graph.node if n.op_type == "Conv"}
        assert (np.abs(biases["conv1"]).max() == 0) == absorbed
        assert _max_delta(model, out, feeds) <= 1e-4 * float(np.abs(_run(model, feeds)[0]).max())


def test_input_untouched_and_shared_weights_not_changed_under_others():
    model = _conv_chain([helper.make_node("Relu", ["i"], ["o"])])
    # conv3's weight is also read by a second node: it must keep its value there
    model.graph.node.append(helper.make_node("Conv", ["c1", "W3"], ["z"], name="other"))
    model.graph.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, None))
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    out = equalize(model)
    assert model == copy
    assert not np.array_equal(_weights(out)["conv3"], _weights(model)["conv3"])
    inits = {t.name: numpy_helper.to_array(t) for t in out.graph.initializer}
    other = next(n for n in out.graph.node if n.name == "other")
    np.testing.assert_array_equal(inits[other.input[1]], numpy_helper.to_array(next(t for t in copy.graph.initializer if t.name == "W3")))


def test_bad_options_raise():
    with pytest.raises(ValueError, match="balance method"):
        EqualizationOptions(balance_method="mean")
    with pytest.raises(ValueError, match="steps"):
        EqualizationOptions(steps=0)


# ------------------------------------------------------------------------------------------------
# the real PP-OCR models


@pytest.mark.slow
@pytest.mark.parametrize("name, pairs", [("rec", 3), ("cls", 15)])
def test_real_models_float_outputs_unchanged(name, pairs):
    """Equalized as the quantizer does (after BatchNorm folding and the fusions): outputs equal
    within float rounding. rec has only 3 equalizable pairs: every other Conv→Conv link in it goes
    through HardSwish, which no positive scale passes exactly."""
    from onnxptq.pipeline.prepare import prepare_for_quantization
    from testkit import ocr
    from testkit.models import model_path

    prepared = prepare_for_quantization(onnx.load(model_path(name)))
    assert len(find_pairs(to_ir(prepared).graph)) == pairs
    out = equalize(prepared, EqualizationOptions(steps=-1))
    images = ocr.render_lines(8, seed=5)[0] if name == "rec" else ocr.render_cls(8, seed=5)[0]
    feeds = {"x": images}
    ref = _run(prepared, feeds)[0]
    delta = _max_delta(prepared, out, feeds)
    print(f"{name}: max |Δ| {delta:.3g} on outputs of max {np.abs(ref).max():.3g}")
    assert delta <= 1e-4 * max(1.0, float(np.abs(ref).max()))
    # converged: every pair's scaled channels have equal head and tail ranges (the fixed point of
    # s = sqrt(r_tail / r_head)), within the convergence threshold of the last round
    for p in find_pairs(to_ir(out).graph):
        r0, r1 = p.head.out_range(), p.tail.in_range()
        scaled = (r0 + r1 >= EqualizationOptions().weight_threshold) & (r0 > 0) & (r1 > 0)
        if p.head.bias is not None:  # the appended bias column can be the head's range instead
            scaled &= np.abs(p.head.bias.reshape(-1)[: r0.size]) / BIAS_SHRINK <= r0
        np.testing.assert_allclose(r0[scaled], r1[scaled], rtol=1e-3)


def _if_model() -> onnx.ModelProto:
    """All the layers inside an If's then-branch (as silero VAD computes), reading outer-scope
    weights: conv1 (129→16, k3) → Relu → conv2 (16→12, k3) → Relu → Gather(axis 2, index 0) →
    Gemm (12→5, transB). The else-branch is an Identity."""
    rng = np.random.default_rng(7)  # its own draws: the figures must not depend on test order

    def imbalanced(shape: tuple[int, ...], axis: int = 0) -> np.ndarray:
        gains = np.exp(rng.uniform(np.log(1e-3), 0, shape[axis])) * 4
        return (rng.standard_normal(shape) * gains.reshape([-1 if i == axis else 1 for i in range(len(shape))])).astype(np.float32)

    inits = {"W1": imbalanced((16, 6, 3)), "B1": rng.standard_normal(16).astype(np.float32),
             "W2": imbalanced((12, 16, 3)), "B2": rng.standard_normal(12).astype(np.float32),
             "W3": imbalanced((5, 12), axis=1), "B3": rng.standard_normal(5).astype(np.float32),
             "idx": np.array(0, np.int64)}
    then = helper.make_graph(
        [helper.make_node("Conv", ["x", "W1", "B1"], ["c1"], name="conv1", pads=[1, 1]),
         helper.make_node("Relu", ["c1"], ["r1"]),
         helper.make_node("Conv", ["r1", "W2", "B2"], ["c2"], name="conv2"),
         helper.make_node("Relu", ["c2"], ["r2"]),
         helper.make_node("Gather", ["r2", "idx"], ["g"], axis=2),
         helper.make_node("Gemm", ["g", "W3", "B3"], ["t"], name="gemm", transB=1)],
        "then", [], [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)])
    other = helper.make_graph([helper.make_node("Identity", ["z"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)])
    inits["z"] = np.zeros((1, 5), np.float32)
    graph = helper.make_graph(
        [helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 6, 3]),
         helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(a, n) for n, a in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_equalizes_inside_if_bodies_and_through_a_time_step_gather():
    """Layers inside an If body are equalized like the main graph's (silero VAD: per-tensor A8W8
    decision agreement 0.33 → 0.94-0.99, bench/RESULTS.md), and a Gather picking one time step of
    a conv's output passes the conv's channel scale on to a Gemm tail; the float function holds."""
    model = _if_model()
    pairs = find_pairs(to_ir(model).graph.node(0).attributes["then_branch"].as_graph())
    assert [(p.head.node.name, p.tail.node.name) for p in pairs] == [("conv1", "conv2"), ("conv2", "gemm")]
    out = equalize(model)
    feeds = {"x": np.random.default_rng(8).standard_normal((64, 6, 3)).astype(np.float32), "cond": np.array(True)}
    assert _max_delta(model, out, feeds) < 1e-4
    assert _body_int8_error(out, feeds) < 0.7 * _body_int8_error(model, feeds)


def _body_int8_error(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> float:
    """Relative output error with every Conv/Gemm weight of the then-branch rounded to per-tensor
    int8 (the weights live in the main graph or, once rewritten, in the body)."""
    q = onnx.ModelProto()
    q.CopyFrom(model)
    body = next(a.g for a in q.graph.node[0].attribute if a.name == "then_branch")
    weights = {n.input[1] for n in body.node if n.op_type in ("Conv", "Gemm")}
    for t in list(q.graph.initializer) + list(body.initializer):
        if t.name in weights:
            w = numpy_helper.to_array(t)
            s = np.abs(w).max() / 127
            t.CopyFrom(numpy_helper.from_array((np.clip(np.round(w / s), -127, 127) * s).astype(w.dtype), t.name))
    ref, out = _run(model, feeds)[0], _run(q, feeds)[0]
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


@pytest.mark.parametrize("axis, index", [(1, 0), (0, 0), (2, [0, 1])])
def test_gather_on_channel_or_batch_axis_or_keeping_rank_is_no_link_to_gemm(axis, index):
    """A Gather over the channel or batch axis mixes what the scale tells apart; one that keeps
    the rank leaves the channels on axis 1, where a Gemm does not read them: no pair."""
    model = _if_model()
    body = next(a.g for a in model.graph.node[0].attribute if a.name == "then_branch")
    for n in body.node:
        if n.op_type == "Gather":
            n.attribute[0].i = axis
    for t in model.graph.initializer:
        if t.name == "idx":
            t.CopyFrom(numpy_helper.from_array(np.array(index, np.int64), "idx"))
    pairs = find_pairs(to_ir(model).graph.node(0).attributes["then_branch"].as_graph())
    assert [(p.head.node.name, p.tail.node.name) for p in pairs] == [("conv1", "conv2")]
