"""Round 18 of outside models (issue 27 item 5): what the new models broke, held on small models.

hama's G2P encoder (a torch export run through a float cast pass) computes a length in float: Shape → Gather → Cast →
Mul by a constant, a rank-0 float activation. A16W8's range guard thinned every guarded activation in the graph and
took each protected axis modulo the rank, so the scalar raised a bare ``ZeroDivisionError`` out of ``quantize``.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxptq.api import quantize
from testkit.zoo import session_runner


def _scalar_length_model(path) -> None:
    """x [1, T, 8] → MatMul w → y; beside it T as a float scalar (Shape, Gather, Cast, Mul 0.5) scales y: rank 0."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
        helper.make_node("Shape", ["x"], ["shp"], name="shape"),
        helper.make_node("Gather", ["shp", "one"], ["t_int"], name="gather", axis=0),
        helper.make_node("Cast", ["t_int"], ["t_f"], name="cast", to=TensorProto.FLOAT),
        helper.make_node("Mul", ["t_f", "half"], ["t_half"], name="scalar_mul"),
        helper.make_node("Mul", ["h", "t_half"], ["y"], name="scale"),
    ]
    inits = [numpy_helper.from_array(rng.normal(size=(8, 8)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array(1, np.int64), "one"),
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
    feeds = [{"x": rng.normal(size=(1, int(rng.integers(3, 9)), 8)).astype(np.float32)} for _ in range(6)]
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
