"""Round 18 of outside models (issue 27 item 5): what the new models broke, held on small models.

hama's G2P encoder (a torch export run through a float cast pass) computes a length in float: Shape → Gather → Cast →
Mul by a constant, a rank-0 float activation. A16W8's range guard thinned every guarded activation in the graph and
took each protected axis modulo the rank, so a scalar raised a bare ``ZeroDivisionError`` out of ``quantize``; past
that, A16W8 quantized the float shape vector a Reshape's target was cast from, and 2 came back just under 2, truncated
to 1 (graph/shape_values.py). hama's phoneme recognizer (LogSoftmax over 191 classes) failed the linear heads' "float
decides" test and was judged frame by frame instead of by its CTC strings (analysis/class_scores.py).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxptq.api import quantize
from testkit.zoo import session_runner


def _scalar_length_model(path) -> None:
    """x [1, T, 8] → MatMul w → h; beside it a rank-0 activation, the mean of x (ReduceMean, keepdims 0) times 0.5,
    scales h."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
        helper.make_node("ReduceMean", ["x"], ["m"], name="mean", keepdims=0),
        helper.make_node("Mul", ["m", "half"], ["t_half"], name="scalar_mul"),
        helper.make_node("Mul", ["h", "t_half"], ["y"], name="scale"),
    ]
    inits = [numpy_helper.from_array(rng.normal(size=(8, 8)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array(0.5, np.float32), "half")]
    graph = helper.make_graph(nodes, "scalar_len", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "T", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "T", 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))


def test_a_rank0_float_activation_is_guarded_without_raising(tmp_path):
    src, out = tmp_path / "scalar_len.onnx", tmp_path / "scalar_len.A16W8.onnx"
    _scalar_length_model(src)
    rng = np.random.default_rng(1)
    feeds = [{"x": rng.normal(1.0, 1.0, size=(1, int(rng.integers(3, 9)), 8)).astype(np.float32)} for _ in range(6)]
    quantize(str(src), "A16W8", data=feeds, output=str(out))  # raised ZeroDivisionError in the guard's thinning
    ref, test = session_runner(src), session_runner(out)
    for f in feeds:
        a, b = ref(f)[0], test(f)[0]
        assert a.shape == b.shape
        assert np.abs(a - b).max() <= 0.02 * np.abs(a).max()


def _ctc_log_probs(rng: np.random.Generator, frames: int = 80, classes: int = 191) -> np.ndarray:
    """A phoneme recognizer's LogSoftmax over many classes ([1, T, C], blank last): 3 of 4 frames blank, each phoneme
    a short run between blanks; the implausible classes' logits far below the top two, as hama's are."""
    blank = classes - 1
    logits = rng.normal(-12.0, 3.0, size=(frames, classes))
    t = 0
    while t < frames:
        run = int(rng.integers(1, 3)) if rng.random() < 0.3 else int(rng.integers(2, 6))
        cls = int(rng.integers(0, classes - 2)) if rng.random() < 0.3 else blank
        for k in range(t, min(frames, t + run)):
            logits[k, cls] = rng.uniform(3.0, 6.0)
            logits[k, blank if cls != blank else int(rng.integers(0, classes - 2))] = rng.uniform(0.5, 2.5)
        t += run
    z = logits - logits.max(-1, keepdims=True)
    return (z - np.log(np.exp(z).sum(-1, keepdims=True)))[None].astype(np.float32)


def test_a_log_softmax_ctc_sequence_is_judged_by_its_strings():
    """The softmax spells the decision: a LogSoftmax CTC head is read by its strings even where its log-probabilities
    fail the linear heads' "float decides" test; a linear head's scores keep that test."""
    from onnxptq.analysis import class_scores as cs

    rng = np.random.default_rng(3)
    refs = [_ctc_log_probs(rng) for _ in range(6)]
    assert not cs.decides([r[0] for r in refs])  # the ratio the linear heads' test reads is under 0.25
    gots = [r + rng.normal(0, 0.01, r.shape).astype(np.float32) for r in refs]
    judged = cs.judge_positions(refs, gots, strings_only=True)
    assert judged is not None and judged.strings and judged.background == 190
    assert judged.reads == 6 and judged.agreement > 0.9
    assert cs.judge_positions(refs, gots) is None  # not a softmax: float does not decide, cosine only


def _float_shape_model() -> onnx.ModelProto:
    """hama's spelling of a Reshape target: x [1, T, 8] → MatMul → h; the target [Shape(h)[0], Shape(h)[1], 2, 4]
    computed in float (Shape cast to float, a Mul by ones, a Concat with [2, 4]; the constants Constant nodes cast to
    float, as the float16 pass wrote them) and Cast back to int64;
    y = Reshape(h, target)."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
        helper.make_node("Shape", ["h"], ["shp"], name="shape", end=2),
        helper.make_node("Cast", ["shp"], ["shp_f"], name="cast_in", to=TensorProto.FLOAT),
        helper.make_node("Constant", [], ["ones_i"], name="ones_const", value=numpy_helper.from_array(np.ones(2, np.int64))),
        helper.make_node("Cast", ["ones_i"], ["ones"], name="ones_cast", to=TensorProto.FLOAT),
        helper.make_node("Mul", ["shp_f", "ones"], ["scaled"], name="mul"),
        helper.make_node("Constant", [], ["tail_i"], name="tail_const", value=numpy_helper.from_array(np.array([2, 4], np.int64))),
        helper.make_node("Cast", ["tail_i"], ["tail"], name="tail_cast", to=TensorProto.FLOAT),
        helper.make_node("Concat", ["scaled", "tail"], ["target_f"], name="concat", axis=0),
        helper.make_node("Cast", ["target_f"], ["target"], name="cast_out", to=TensorProto.INT64),
        helper.make_node("Reshape", ["h", "target"], ["y"], name="reshape"),
    ]
    inits = [numpy_helper.from_array(rng.normal(size=(8, 8)).astype(np.float32), "w")]
    graph = helper.make_graph(nodes, "float_shape", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "T", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "T", 2, 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_shape_arithmetic_in_float_is_found_by_structure():
    """The rule that keeps it float (graph/shape_values.py, applied in pipeline/plan/rules.py's _keep_float): the
    float shape vector and its parts are shape values, the constants' Casts fold as constants, and nothing that
    mixes in an activation is one. (The plan of this small graph never selects its shape path; hama's encoder's did,
    and its A16W8 row in bench/RESULTS.md, newmodels18, failed in quantize's verification without the rule.)"""
    from onnxptq.graph.shape_values import CONSTANT_REASON, REASON, shape_value_float_tensors

    model = _float_shape_model()
    why = shape_value_float_tensors(model)
    assert {name for name, reason in why.items() if reason == REASON} == {"shp", "shp_f", "scaled", "target_f", "target"}
    # and the constants only the shape arithmetic reads (tests/test_shape_values_constants.py)
    assert {name for name, reason in why.items() if reason == CONSTANT_REASON} == {"ones", "tail"}
    model.graph.node.append(helper.make_node("Mul", ["y", "scaled"], ["mixed"], name="mixed"))  # a shape scaling data
    assert "mixed" not in shape_value_float_tensors(model)

