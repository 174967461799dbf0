"""Bias correction from the calibration pass's own runs (issue 26 item 1, blockq18).

Where a layer's input has no integer quantizer (every block and float format), the correction is
``E[op(x, ΔW)]``, linear in ``x``: :class:`onnxptq.pipeline.refine.bias_correction.InputMeans` has
calibration's runs of the kept samples reduce each layer's input to its mean kernel taps, and the
probe model (a second float run of every kept sample, ~0.8 CPU s of PP-OCRv4 rec's MXFP8_E4M3
quantize) is not built. Held here: the shifts equal an independent float64 reference (torch's
convolution of the float inputs with ΔW) for every Conv geometry the taps must follow (padding,
strides, dilations, groups, auto_pad, 1×1 with and without stride) and for Gemm with ``transB`` and
``alpha``/``beta``; they agree with the probe's to float32 rounding; a real model's quantize opens no
probe session, and its delivered outputs agree with the probe's build to float32 rounding.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxptq.pipeline.refine.bias_correction as bc
from onnxptq import get_preset, quantize
from onnxptq.graph.naming import node_names
from onnxptq.pipeline.calibrate import calibrate_once
from onnxptq.pipeline.emit import fake_quantize_in_slices, quantizer_attrs
from onnxptq.pipeline.final_plan import final_plan
from onnxptq.pipeline.solve import solve
from testkit.models import model_path

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(11)


def _model() -> onnx.ModelProto:
    """Conv layers of every tap geometry, then two Gemms (transB 1 with alpha/beta, transB 0)."""
    def w(*shape: int) -> np.ndarray:
        return (RNG.standard_normal(shape) * 0.7).astype(np.float32)

    inits = {"Wa": w(40, 4, 3, 3), "Ba": w(40), "Wb": w(80, 20, 3, 3), "Bb": w(80), "Wc": w(8, 80, 1, 1), "Bc": w(8),
             "Wd": w(8, 8, 1, 1), "Bd": w(8), "We": w(8, 1, 3, 3), "Be": w(8),
             "Wf": w(5, 8), "Bf": w(5), "Wg": w(5, 3), "Bg": w(3)}
    nodes = [
        helper.make_node("Conv", ["x", "Wa", "Ba"], ["a"], name="conv_pad_stride", pads=[1, 0, 2, 1], strides=[2, 1]),
        helper.make_node("Relu", ["a"], ["ar"]),
        helper.make_node("Conv", ["ar", "Wb", "Bb"], ["b"], name="conv_group_dilated", group=2, dilations=[2, 2],
                         pads=[2, 1, 1, 2]),
        helper.make_node("Conv", ["b", "Wc", "Bc"], ["c"], name="conv_1x1_stride", strides=[2, 2]),
        helper.make_node("Conv", ["c", "Wd", "Bd"], ["d"], name="conv_1x1"),
        helper.make_node("Conv", ["d", "We", "Be"], ["e"], name="conv_depthwise", group=8, auto_pad="SAME_UPPER"),
        helper.make_node("GlobalAveragePool", ["e"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "Wf", "Bf"], ["g"], name="gemm_trans", transB=1, alpha=0.5, beta=2.0),
        helper.make_node("Gemm", ["g", "Wg", "Bg"], ["y"], name="gemm"),
    ]
    inits["Wf"] = inits["Wf"].reshape(8, 5).T.copy()  # transB: [5, 8]
    graph = helper.make_graph(nodes, "taps", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 11, 9])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    node_names(model)
    return model


def _data(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)  # a mean far from 0 and unequal batches: E[x] ≠ 0, the weighting shows
    return [{"x": rng.uniform(-0.5, 2.0, (1 + i % 3, 4, 11, 9)).astype(np.float32)} for i in range(n)]


def _inputs(model: onnx.ModelProto, feeds: list[dict[str, np.ndarray]]) -> dict[str, list[np.ndarray]]:
    """Every layer's float input on every feed (onnxruntime, the float model)."""
    names = ["x", "ar", "b", "c", "d", "f", "g"]
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.output.extend([helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in names[1:]])
    s = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    got = {n: [] for n in names}
    for feed in feeds:
        for n, v in zip(names[1:], s.run(names[1:], feed)):
            got[n].append(v)
        got["x"].append(feed["x"])
    return got


def _reference_shift(node: onnx.NodeProto, delta: np.ndarray, xs: list[np.ndarray]) -> np.ndarray:
    """E[op(x, ΔW)] per output channel, each feed's mean weighted by its batch, in float64 (torch)."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    d = torch.from_numpy(delta.astype(np.float64))
    total, count = 0.0, 0
    for x in xs:
        t = torch.from_numpy(x.astype(np.float64))
        if node.op_type == "Gemm":
            y = float(attrs.get("alpha", 1.0)) * (t @ (d.T if attrs.get("transB", 0) else d))
            mean = y.mean(dim=0)
        else:
            pads = list(attrs.get("pads", [0, 0, 0, 0]))
            dil = list(attrs.get("dilations", [1, 1]))
            if attrs.get("auto_pad") == b"SAME_UPPER":  # stride 1: total padding dilation·(k - 1), the extra at the end
                total_pad = [dl * (k - 1) for dl, k in zip(dil, delta.shape[2:])]
                pads = [p // 2 for p in total_pad] + [p - p // 2 for p in total_pad]
            t = torch.nn.functional.pad(t, (pads[1], pads[3], pads[0], pads[2]))
            y = torch.nn.functional.conv2d(t, d, stride=list(attrs.get("strides", [1, 1])), dilation=dil,
                                           groups=int(attrs.get("group", 1)))
            mean = y.mean(dim=(0, 2, 3))
        total = total + mean.numpy() * x.shape[0]
        count += x.shape[0]
    return total / count


@pytest.fixture(scope="module")
def fitted():
    model = _model()
    cfg = get_preset("MXFP8_E4M3").replace(repair=False, bias_correction=True)
    cfg = cfg.replace(calibration=dataclasses.replace(cfg.calibration, progress=False))
    calibrated = calibrate_once(model, cfg, _data(10, 1))
    plan = final_plan(calibrated, cfg)
    params = solve(calibrated.prepared, plan, calibrated.stats)
    return calibrated, plan, params


def test_the_calibration_pass_takes_every_layers_input_taps(fitted):
    calibrated, _, _ = fitted
    assert len(calibrated.kept) == 10
    means = calibrated.bias_means
    assert means is not None, "the calibration pass took no input means"
    layers = {n.name: n.output[0] for n in calibrated.prepared.graph.node if n.op_type in ("Conv", "Gemm")}
    assert set(means) == set(layers.values())
    shapes = {name: means[out][0].shape for name, out in layers.items()}
    assert shapes["conv_pad_stride"] == (4, 3, 3) and shapes["conv_group_dilated"] == (40, 3, 3)
    assert shapes["conv_1x1_stride"] == (80, 1, 1) and shapes["conv_1x1"] == (8, 1, 1)
    assert shapes["gemm_trans"] == (8,) and shapes["gemm"] == (5,)
    # a depthwise Conv's taps would cost more than its ΔW Conv: its shift itself, with the weight it rounded
    assert shapes["conv_depthwise"] == (8,) and means[layers["conv_depthwise"]][1] is not None
    assert all(means[out][1] is None for name, out in layers.items() if name != "conv_depthwise")


def test_shifts_are_the_float64_reference_and_the_probes(fitted):
    calibrated, plan, params = fitted
    model = calibrated.prepared
    from_means = bc.correct_biases(model, plan, params, calibrated.kept, means=calibrated.bias_means)
    probed = bc.correct_biases(model, plan, params, calibrated.kept)
    xs = _inputs(model, calibrated.kept)
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    checked = 0
    for node in model.graph.node:
        if node.op_type not in ("Conv", "Gemm"):
            continue
        w_name, b_name = node.input[1], node.input[2]
        w = inits[w_name]
        wq = fake_quantize_in_slices(w, plan.tensors[w_name].quant.format, quantizer_attrs(plan.tensors[w_name], params.get(w_name)))
        delta = (wq.astype(np.float64) - w).astype(np.float32)
        ref = _reference_shift(node, delta, xs[node.input[0]])
        if node.op_type == "Gemm":
            ref = ref / next((a.f for a in node.attribute if a.name == "beta"), 1.0)
        bias = inits[b_name].astype(np.float64)
        got, probe = bias - from_means[b_name], bias - probed[b_name]
        assert np.abs(ref).max() > 1e-4, node.name  # the rounding shifts the layer: something to correct
        # float32 sums against float64: within a few float32 ulps of the biases
        tol = 4e-7 * (np.abs(bias).max() + np.abs(ref).max())
        np.testing.assert_allclose(got, ref, rtol=0, atol=tol, err_msg=node.name)
        np.testing.assert_allclose(got, probe, rtol=0, atol=tol, err_msg=node.name)
        checked += 1
    assert checked == 7


def test_a_shift_measured_with_another_rounding_is_probed(fitted, monkeypatch):
    """A depthwise layer's captured shift holds for its weight rounded as calibration's plan rounded it;
    a build that rounds it otherwise (another plan: repair's ladder) probes that layer."""
    calibrated, plan, params = fitted
    model = calibrated.prepared
    depthwise = next(n for n in model.graph.node if n.name == "conv_depthwise")
    value, rounded = calibrated.bias_means[depthwise.output[0]]
    other = dict(calibrated.bias_means)
    other[depthwise.output[0]] = (value, rounded * np.float32(2.0))
    seen = []
    real = bc._probe
    monkeypatch.setattr(bc, "_probe", lambda m, layers, *a: seen.append([n.name for n, _, _ in layers]) or real(m, layers, *a))
    bc.correct_biases(model, plan, params, calibrated.kept, means=other)
    assert seen == [["conv_depthwise"]]


def test_a_layer_without_means_is_probed(fitted, monkeypatch):
    """Means missing for one layer (as for a layer in an If branch): that layer alone goes to the probe."""
    calibrated, plan, params = fitted
    model = calibrated.prepared
    gemm = next(n for n in model.graph.node if n.name == "gemm")
    means = {k: v for k, v in calibrated.bias_means.items() if k != gemm.output[0]}
    seen = []
    real = bc._probe
    monkeypatch.setattr(bc, "_probe", lambda m, layers, *a: seen.append([n.name for n, _, _ in layers]) or real(m, layers, *a))
    part = bc.correct_biases(model, plan, params, calibrated.kept, means=means)
    full = bc.correct_biases(model, plan, params, calibrated.kept, means=calibrated.bias_means)
    assert seen == [["gemm"]]
    assert set(part) == set(full)
    assert all(np.allclose(part[k], full[k], rtol=0, atol=1e-6 * np.abs(full[k]).max()) for k in part)  # float32 sums


def test_real_model_quantize_opens_no_probe_session_and_keeps_its_outputs(monkeypatch):
    """PP-OCR cls under MXFP8_E4M3 (correction on by default: 12 feeds, 4 held out): no probe session;
    the delivered model's outputs are the probe build's to float32 rounding on fresh feeds."""
    path = str(model_path("cls"))
    name = onnx.load(path, load_external_data=False).graph.input[0].name
    rng = np.random.default_rng(0)
    data = [{name: rng.random((1, 3, 48, 192), dtype=np.float32)} for _ in range(12)]  # 4 held out: corrected
    cfg = get_preset("MXFP8_E4M3").replace(repair=False)
    cfg = cfg.replace(calibration=dataclasses.replace(cfg.calibration, progress=False))
    opened = []
    real_open = bc.open_session
    monkeypatch.setattr(bc, "open_session", lambda *a, **k: opened.append(1) or real_open(*a, **k))
    new = quantize(path, cfg, data=data).model
    assert opened == [], "bias correction opened a probe session"
    monkeypatch.setattr(bc.InputMeans, "means", lambda self, kept: None)
    old = quantize(path, cfg, data=data).model
    assert opened, "without the means the probe runs"
    fresh = [rng.random((2, 3, 48, 192), dtype=np.float32) for _ in range(3)]
    a = ort.InferenceSession(new.SerializeToString(), providers=["CPUExecutionProvider"])
    b = ort.InferenceSession(old.SerializeToString(), providers=["CPUExecutionProvider"])
    for x in fresh:
        ya, yb = a.run(None, {name: x})[0], b.run(None, {name: x})[0]
        np.testing.assert_allclose(ya, yb, rtol=0, atol=1e-4)
