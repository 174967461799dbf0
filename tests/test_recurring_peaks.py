"""Percentile calibration keeps what several calibration batches reach, at weighted layers.

A detector's score features peak at a few positions of every image (the objects). Pooled over
the calibration set those peaks are a handful of values among millions, so a 99.9999 percentile
drops them although most images reach that high, and held-out objects saturate. The rule
(``calibration.methods._cover_recurring``): the range covers the ``RECURRING_BATCHES``-th largest
per-batch maximum (and smallest minimum). Found against NNCF on a YOLO-style detector and a
file-type classifier (bench/RESULTS.md, "A8W8 against NNCF on the zoo and outside models"); placed
by structure (``pipeline/plan/peaks.py``): only at the operands and results of weighted layers,
the plain percentile elsewhere (bench/RESULTS.md, "Calibration that keeps recurring peaks,
structurally").
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq import get_preset, quantize
from onnxptq.calibration import methods
from onnxptq.calibration.collectors import RECURRING_BATCHES
from onnxptq.pipeline.plan import make_plan
from onnxptq.sessions import open_session

SIZE = 256
CHANNELS = 16


def peak_model() -> onnx.ModelProto:
    """x [1,1,256,256] → 1×1 Conv to 16 channels + Relu (``feat``: channel 0 answers the object
    three times stronger than the others) → 1×1 Conv to 4 + Relu (``y``)."""
    w1 = np.ones((CHANNELS, 1, 1, 1), np.float32)
    w1[0] = 3.0
    w2 = np.random.default_rng(0).uniform(0.2, 1.0, (4, CHANNELS, 1, 1)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["pre"], name="conv1"),
        helper.make_node("Relu", ["pre"], ["feat"], name="relu1"),
        helper.make_node("Conv", ["feat", "w2"], ["pre2"], name="conv2"),
        helper.make_node("Relu", ["pre2"], ["y"], name="relu2"),
    ]
    graph = helper.make_graph(
        nodes, "peaks", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, SIZE, SIZE])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, SIZE, SIZE])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def images(seed: int, n: int) -> tuple[list[dict[str, np.ndarray]], list[tuple[int, int]]]:
    """Dim textured background with one bright object pixel per image, object brightness spread
    over 2..4 (every image has one: the peaks recur, none is an outlier)."""
    rng = np.random.default_rng(seed)
    feeds, where = [], []
    for a in rng.permutation(np.linspace(2.0, 4.0, n)):
        x = np.abs(rng.normal(0.0, 0.1, (1, 1, SIZE, SIZE))).astype(np.float32)
        r, c = (int(v) for v in rng.integers(8, SIZE - 8, 2))
        x[0, 0, r, c] = a
        feeds.append({"x": x})
        where.append((r, c))
    return feeds, where


def _represented_max(model: onnx.ModelProto, tensor: str) -> float:
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    # the Relu is folded into the quantizer (fold_relu): the quantizer reads the Conv output, named by its scale
    q = next(n for n in model.graph.node if n.op_type == "QuantizeLinear" and tensor in (n.input[0], n.input[1][: -len("_scale")]))
    scale, zp = float(inits[q.input[1]]), inits[q.input[2]]
    top = np.iinfo(zp.dtype).max
    return (top - int(zp)) * scale


@pytest.fixture(scope="module")
def quantized():
    model = peak_model()
    calib, _ = images(1, 10)  # < 12 feeds: all calibrate (the floor holds none out)
    return model, calib, quantize(model, "A8W8", data=calib).model


def test_range_covers_peaks_that_several_images_reach(quantized):
    model, calib, qmodel = quantized
    ref = open_session(_with_output(model, "feat"))
    maxima = sorted(float(ref.run(["feat"], f)[0].max()) for f in calib)
    # the pooled percentile alone clips to about the 6th-largest object (half the images' peaks)
    collector = methods.make_collector("percentile", percentile=99.9999, symmetric=False)
    for f in calib:
        collector.update(ref.run(["feat"], f)[0])
    plain = methods.compute_range(collector, "percentile", percentile=99.9999, symmetric=False)[1]
    assert plain < maxima[-RECURRING_BATCHES] * 0.95, (plain, maxima)
    covered = methods.compute_range(collector, "percentile", percentile=99.9999, symmetric=False, recurring=True)[1]
    assert covered == pytest.approx(maxima[-RECURRING_BATCHES], rel=1e-6)
    # ... and the delivered model's quantizer of feat reaches the peak that many images reach
    reach = maxima[-RECURRING_BATCHES]
    assert _represented_max(qmodel, "feat") >= reach * (1 - 1 / 255), (_represented_max(qmodel, "feat"), maxima)


def test_held_out_objects_keep_their_score(quantized):
    model, _, qmodel = quantized
    held, where = images(2, 10)
    ref, test = open_session(model), open_session(qmodel)
    errors = []
    for f, (r, c) in zip(held, where):
        a, b = ref.run(None, f)[0][0, :, r, c], test.run(None, f)[0][0, :, r, c]
        errors.append(float(np.abs(a - b).max() / np.abs(a).max()))
    # clipped at the 6th-largest calibration object, 4 of the 10 held-out objects lose 3-6 % of
    # their score; with the recurring peaks covered only the brightest may saturate
    assert sum(e <= 0.03 for e in errors) >= 8, np.round(errors, 3)


def test_one_batch_alone_is_still_an_outlier():
    """The percentile still drops a value only one batch reaches, and a single batch keeps the
    plain percentile (nothing recurs)."""
    rng = np.random.default_rng(3)
    collector = methods.make_collector("percentile", percentile=99.9999, symmetric=False)
    for i in range(6):
        x = rng.uniform(0.0, 1.0, 2_000_000).astype(np.float32)
        if i == 2:
            x[:3] = 50.0  # a one-off glitch in one batch
        collector.update(x)
    lo, hi = methods.compute_range(collector, "percentile", percentile=99.9999, symmetric=False, recurring=True)
    assert hi < 1.01 and collector.max == 50.0
    single = methods.make_collector("percentile", percentile=99.9999, symmetric=False)
    single.update(np.concatenate([rng.uniform(0, 1, 2_000_000), [50.0, 50.0, 50.0]]).astype(np.float32))
    assert methods.compute_range(single, "percentile", percentile=99.9999, symmetric=False, recurring=True) == \
        methods.compute_range(single, "percentile", percentile=99.9999, symmetric=False)


@pytest.mark.parametrize("symmetric", [True, False])
def test_recurring_peaks_only_ever_widen_a_lopsided_range(symmetric):
    """The percentile's own range can be lopsided (a negative tail reaching further than the positive
    one). Covering the recurring peaks widens it and never cuts that tail: a symmetric cover built from
    the positive side alone narrowed an attention input's int16 range from ±3.55 to ±3.10, and the
    model's relative error tripled (tests/test_sentinels.py, A16W8)."""
    rng = np.random.default_rng(5)
    collector = methods.make_collector("percentile", percentile=99.999, symmetric=symmetric)
    for i in range(8):
        x = rng.normal(0.0, 0.5, 4096).astype(np.float32)
        x[0] = -3.5 if i == 0 else -1.0  # one batch reaches far down
        x[1] = 2.5 + 0.1 * i  # every batch peaks upwards, less far
        collector.update(x)
    plain = methods.compute_range(collector, "percentile", percentile=99.999, symmetric=symmetric, qmin=-32767, qmax=32767)
    covered = methods.compute_range(collector, "percentile", percentile=99.999, symmetric=symmetric, recurring=True,
                                    qmin=-32767, qmax=32767)
    assert covered[0] <= plain[0] and covered[1] >= plain[1], (plain, covered)
    assert covered[1] >= sorted(2.5 + 0.1 * i for i in range(8))[-RECURRING_BATCHES]


def test_merge_keeps_the_largest_batch_extremes():
    a, b = methods.make_collector("percentile", percentile=99.9999), methods.make_collector("percentile", percentile=99.9999)
    for v in (1.0, 5.0):
        a.update(np.array([-v, v], np.float32))
    for v in (3.0, 4.0):
        b.update(np.array([-v, v], np.float32))
    a.merge(b)
    assert a.batch_highs == sorted([1.0, 5.0, 3.0, 4.0])[-RECURRING_BATCHES:]
    assert a.batch_lows == sorted([-1.0, -5.0, -3.0, -4.0])[:RECURRING_BATCHES]


def residual_model() -> onnx.ModelProto:
    """A residual block with a gate: x → Conv + Relu (``feat``) → Conv (``pre2``); ``res = feat +
    pre2`` (the residual sum, elementwise), read by a Conv (``y``) and by a gating ``Mul`` (``gated``).
    The objects' peaks recur in ``feat`` and in ``res`` alike."""
    rng = np.random.default_rng(0)
    w1 = np.ones((CHANNELS, 1, 1, 1), np.float32)
    w1[0] = 3.0
    w2 = rng.uniform(-0.3, 0.6, (CHANNELS, CHANNELS, 1, 1)).astype(np.float32)
    w3 = rng.uniform(0.2, 1.0, (4, CHANNELS, 1, 1)).astype(np.float32)
    gate = rng.uniform(0.5, 1.0, (1, CHANNELS, 1, 1)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["pre"], name="conv1"),
        helper.make_node("Relu", ["pre"], ["feat"], name="relu1"),
        helper.make_node("Conv", ["feat", "w2"], ["pre2"], name="conv2"),
        helper.make_node("Add", ["feat", "pre2"], ["res"], name="residual"),
        helper.make_node("Conv", ["res", "w3"], ["y"], name="conv3"),
        helper.make_node("Mul", ["res", "gate"], ["gated"], name="gate_mul"),
    ]
    graph = helper.make_graph(
        nodes, "residual", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, SIZE, SIZE])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, SIZE, SIZE]),
         helper.make_tensor_value_info("gated", TensorProto.FLOAT, [1, CHANNELS, SIZE, SIZE])],
        [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (w2, "w2"), (w3, "w3"), (gate, "gate"))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_peaks_are_kept_at_weighted_layers_only():
    """The plan marks the tensors a Conv writes or alone reads; the residual sum, which a gating Mul
    also reads, keeps the plain percentile: the delivered quantizer of ``res`` stops below the peak
    3 of the 10 images reach, while that of ``pre2`` (a Conv's result) covers it."""
    model = onnx.shape_inference.infer_shapes(residual_model())
    config = get_preset("A8W8").replace(runtime="npu", repair=False)
    plan = make_plan(model, config)
    assert plan.tensors["pre2"].keep_peaks and plan.tensors["x"].keep_peaks
    assert not plan.tensors["res"].keep_peaks and "recurring" not in plan.tensors["res"].range_options()
    assert plan.tensors["pre2"].range_options()["recurring"] is True
    calib, _ = images(1, 10)
    qmodel = quantize(model, config, data=calib).model
    ref = open_session(_with_output(_with_output(model, "res"), "pre2"))
    reach = {t: sorted(float(ref.run([t], f)[0].max()) for f in calib)[-RECURRING_BATCHES] for t in ("res", "pre2")}
    assert _represented_max(qmodel, "pre2") >= reach["pre2"] * (1 - 1 / 127), (_represented_max(qmodel, "pre2"), reach)
    assert _represented_max(qmodel, "res") < reach["res"] * 0.95, (_represented_max(qmodel, "res"), reach)


def _with_output(model: onnx.ModelProto, name: str) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    m.graph.output.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    return m
