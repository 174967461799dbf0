"""Fast finetuning (AdaRound / AdaQuant) on a small synthetic model: exactness, never-worse, devices.

The real-model checks (PP-OCR cls task metric) are in test_finetune_ppocr.py.
"""

from __future__ import annotations

import sys
from typing import Callable

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq.api import quantize
from onnxptq.config.presets import get_preset
from onnxptq.config.schema import ConfigError, FinetuneOptions
from onnxptq.formats import fake_quantize, integer

torch = pytest.importorskip("torch")

from onnxptq.pipeline.refine import finetune  # noqa: E402
from onnxptq.pipeline.refine.finetune import extract  # noqa: E402
from onnxptq.pipeline.refine.finetune.layer import make_forward  # noqa: E402
from testkit.holdout import with_held_out  # noqa: E402


def reference_loss_and_grad(forward: Callable, channel_dim: int, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None,
                            y: torch.Tensor, want_bias: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Autograd through :func:`onnxptq.pipeline.refine.finetune.layer.make_forward` on an unprepared ``x``:
    the oracle the hand-written gradients (``grad.LayerGrad``) are compared against."""
    with torch.enable_grad():
        wl = w.detach().clone().requires_grad_(True)
        bl = b.detach().clone().requires_grad_(True) if (b is not None and want_bias) else b
        loss = (forward(x, wl, bl) - y).pow(2).sum(dim=channel_dim).mean()
        wanted = [wl] + ([bl] if (b is not None and want_bias) else [])
        grads = torch.autograd.grad(loss, wanted)
    return loss.detach(), grads[0], grads[1] if len(grads) > 1 else None


def _model(seed: int = 0) -> onnx.ModelProto:
    """Every layer form the refine step handles: strided grouped Conv with asymmetric pads + HardSwish,
    ConvTranspose + Relu, depthwise Conv + Clip, Gemm(transB) and a MatMul with a constant weight."""
    rng = np.random.default_rng(seed)
    arrays = {
        "W1": rng.normal(0, 0.3, (8, 2, 3, 3)), "B1": rng.normal(0, 0.1, (8,)),
        "WT": rng.normal(0, 0.2, (8, 6, 2, 2)), "BT": rng.normal(0, 0.1, (6,)),
        "WD": rng.normal(0, 0.4, (6, 1, 3, 3)), "BD": rng.normal(0, 0.1, (6,)),
        "WG": rng.normal(0, 0.3, (12, 6)), "BG": rng.normal(0, 0.1, (12,)),
        "WM": rng.normal(0, 0.3, (12, 5)),
        "lo": np.array(0.0), "hi": np.array(4.0),
    }
    inits = [numpy_helper.from_array(np.asarray(a, np.float32), n) for n, a in arrays.items()]
    nodes = [
        helper.make_node("Conv", ["x", "W1", "B1"], ["c1"], name="conv1", strides=[2, 2], pads=[0, 1, 1, 0], group=2),
        helper.make_node("HardSwish", ["c1"], ["h1"], name="hswish"),
        helper.make_node("ConvTranspose", ["h1", "WT", "BT"], ["t1"], name="deconv", strides=[2, 2]),
        helper.make_node("Relu", ["t1"], ["r1"], name="relu"),
        helper.make_node("Conv", ["r1", "WD", "BD"], ["d1"], name="dw", pads=[1, 1, 1, 1], group=6),
        helper.make_node("Clip", ["d1", "lo", "hi"], ["k1"], name="clip"),
        helper.make_node("GlobalAveragePool", ["k1"], ["g1"], name="gap"),
        helper.make_node("Flatten", ["g1"], ["f1"], name="flatten"),
        helper.make_node("Gemm", ["f1", "WG", "BG"], ["fc"], name="fc", transB=1),
        helper.make_node("MatMul", ["fc", "WM"], ["y"], name="mm"),
    ]
    graph = helper.make_graph(nodes, "ft", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 12, 12])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _feeds(n: int = 16, seed: int = 1) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.normal(0, 1, (1, 4, 12, 12)).astype(np.float32)} for _ in range(n)]


def _options(**kw) -> FinetuneOptions:
    return FinetuneOptions(**{"num_iterations": 150, "batch_size": 4, **kw})


class _Spy:
    """Wraps finetune.refine to keep its arguments, result and per-layer report."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[dict] = []
        real = finetune.refine

        def spy(prepared, plan, params, samples, options, **kw):
            report: list = []
            out = real(prepared, plan, params, samples, options, report=report)
            self.calls.append(dict(prepared=prepared, plan=plan, params=params, options=options, result=out, report=report))
            return out

        monkeypatch.setattr(finetune, "refine", spy)


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def test_torch_layers_match_onnxruntime():
    """make_forward reproduces each ONNX layer (attributes and fused activation included)."""
    model = _model()
    # The NPU placement quantizes every layer type here (the CPU one leaves ConvTranspose to float).
    plan = __import__("onnxptq.pipeline.plan", fromlist=["make_plan"]).make_plan(model, get_preset("A8W8").replace(runtime="npu"))
    layers = extract.find_layers(model, plan, FinetuneOptions().target_op_types)
    assert [l.name for l in layers] == ["conv1", "deconv", "dw", "fc", "mm"]
    assert [l.activation for l in layers] == ["HardSwish", "Relu", "Clip", None, None]
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    probe = extract.float_probe(model, [l.input for l in layers if l.input != "x"] + [l.output for l in layers])
    sess = _session(probe)
    feed = _feeds(2)[0]
    for layer in layers:
        x = feed["x"] if layer.input == "x" else sess.run([layer.input], feed)[0]
        y = sess.run([layer.output], feed)[0]
        bias = torch.from_numpy(inits[layer.bias].copy()) if layer.bias else None
        got = make_forward(layer)(torch.from_numpy(x.copy()), torch.from_numpy(inits[layer.weight].copy()), bias)
        np.testing.assert_allclose(got.numpy(), y, rtol=1e-5, atol=1e-5, err_msg=layer.name)


@pytest.mark.parametrize("activation", [None, "Relu", "LeakyRelu", "Clip", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish"])
def test_hand_written_gradient_matches_autograd(activation):
    """grad.LayerGrad (the optimisers' hand-written backward) gives autograd's loss and weight/bias
    gradients through make_forward, for every layer form of the synthetic model and every fused activation."""
    from onnxptq.pipeline.refine.finetune.grad import Adam, LayerGrad

    model = _model()
    plan = __import__("onnxptq.pipeline.plan", fromlist=["make_plan"]).make_plan(model, get_preset("A8W8"))
    layers = extract.find_layers(model, plan, FinetuneOptions().target_op_types)
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    probe = _session(extract.float_probe(model, [l.input for l in layers if l.input != "x"]))
    feed = {"x": np.concatenate([f["x"] for f in _feeds(3)], axis=0)}
    gen = torch.Generator().manual_seed(0)
    attrs = {"LeakyRelu": {"alpha": 0.1}, "Clip": {"min": -0.5, "max": 0.7}, "HardSigmoid": {"alpha": 0.3, "beta": 0.4}}
    for layer in layers:
        layer = extract.Layer(**{**layer.__dict__, "activation": activation, "activation_attrs": attrs.get(activation, {})})
        x = torch.from_numpy(feed["x"] if layer.input == "x" else probe.run([layer.input], feed)[0])
        w = torch.from_numpy(inits[layer.weight].copy())
        b = torch.from_numpy(inits[layer.bias].copy()) if layer.bias else None
        forward = make_forward(layer)
        y = forward(x, w, b).detach() + 0.1 * torch.randn(forward(x, w, b).shape, generator=gen)
        for channels_last in (False, True):
            xx, yy = x, y
            if channels_last and x.dim() == 4:
                xx, yy = x.contiguous(memory_format=torch.channels_last), y.contiguous(memory_format=torch.channels_last)
            step = LayerGrad(layer, want_bias=b is not None)
            loss, gw, gb = step.loss_and_grad(step.prepare(xx, w.shape), w, b, yy)
            ref_loss, ref_gw, ref_gb = reference_loss_and_grad(forward, step.channel_dim, xx, w, b, yy, want_bias=b is not None)
            assert step.manual
            np.testing.assert_allclose(float(loss), float(ref_loss), rtol=1e-5, err_msg=layer.name)
            np.testing.assert_allclose(gw.numpy(), ref_gw.numpy(), rtol=1e-4, atol=1e-6, err_msg=layer.name)
            assert gw.is_contiguous()
            if b is not None:
                np.testing.assert_allclose(gb.numpy(), ref_gb.numpy(), rtol=1e-4, atol=1e-6, err_msg=layer.name)
    # the fused Adam step is torch.optim.Adam's, also for a gradient in another memory format
    p1 = torch.randn(8, 3, 3, 3, generator=gen)
    p2 = p1.clone()
    ours, theirs = Adam(p1, lr=0.1), torch.optim.Adam([p2], lr=0.1)
    for _ in range(5):
        g = torch.randn(8, 3, 3, 3, generator=gen)
        ours.step(g.contiguous(memory_format=torch.channels_last))
        p2.grad = g
        theirs.step()
    np.testing.assert_allclose(p1.numpy(), p2.numpy(), rtol=1e-5, atol=1e-6)


def test_adaround_returns_grid_values_that_emit_reproduces(monkeypatch):
    """AdaRound's weights are exactly (q − zp)·s; emit's re-quantization gives back exactly q, and q is
    floor or ceil of w/s (the learned rounding), differing from round-to-nearest somewhere."""
    spy = _Spy(monkeypatch)
    # The NPU placement quantizes every layer form of the synthetic model; the CPU placement leaves
    # its 4-channel stem and depthwise convolution float (onnxruntime runs them faster so).
    cfg = get_preset("A8W8").replace(runtime="npu", finetune=_options(algorithm="adaround", holdout_fraction=0.25))
    result = quantize(_model(), cfg, _feeds())
    call = spy.calls[0]
    assert call["result"], "AdaRound improved no layer of the synthetic model"
    inits_q = {t.name: numpy_helper.to_array(t) for t in result.model.graph.initializer}
    float_inits = {t.name: numpy_helper.to_array(t) for t in call["prepared"].graph.initializer}
    changed = 0
    for name, value in call["result"].items():
        p, axis = call["params"][name], call["plan"].tensors[name].axis
        q = integer.quantize(value, "int8", p.scale, p.zero_point, axis)
        np.testing.assert_array_equal(integer.dequantize(q, p.scale, p.zero_point, axis).view(np.uint32), value.view(np.uint32))
        np.testing.assert_array_equal(inits_q[f"{name}_quantized"], q)
        w_div = float_inits[name] / integer.broadcast_param(p.scale, value.shape, axis, None)
        assert np.all((q == np.floor(w_div)) | (q == np.ceil(w_div)) | (np.abs(q) == 127))
        changed += int((q != integer.quantize(float_inits[name], "int8", p.scale, p.zero_point, axis)).sum())
    assert changed > 0, "learned rounding chose round-to-nearest everywhere"
    for r in call["report"]:
        assert (r.layer in {l for l in result.plan.nodes}) and (r.kept == (r.after < r.before))
    kept_weights = {w for w in call["result"]}
    assert len(kept_weights) == sum(r.kept for r in call["report"])


def test_selective_update_never_worse_on_held_out_output():
    """With selective_update the model's output error on the held-out samples cannot rise."""
    feeds = _feeds(24)
    held_out = feeds[-6:]  # holdout_fraction 0.25 of 24
    base = quantize(_model(), "A8W8", feeds)
    cfg = get_preset("A8W8").replace(finetune=_options(algorithm="adaround", selective_update=True))
    tuned = quantize(_model(), cfg, feeds)

    def l2(model):
        sess, ref = _session(model), _session(_model())
        return sum(float(np.mean((sess.run(None, f)[0] - ref.run(None, f)[0]) ** 2)) for f in held_out)

    assert l2(tuned.model) <= l2(base.model)


@pytest.mark.parametrize("preset", ["BF16", "MX9", "A8W8"])
def test_adaquant_emits_what_it_trained(monkeypatch, preset):
    """AdaQuant: float formats hand back learned floats that emit fake-quantizes (folded initializers
    equal the reference fake quantization of them); integer formats hand back grid values."""
    spy = _Spy(monkeypatch)
    # pack_weights=False: every weight as one folded fake-quantized initializer, compared below by
    # name (packed weights decode to the same values: tests/test_packed_weights.py)
    cfg = get_preset(preset).replace(finetune=_options(algorithm="adaquant", learning_rate=1e-3 if preset != "BF16" else 1e-4),
                                     pack_weights=False)
    # 8 feeds (seed 2) ahead of the 16: the accuracy floor holds them out, so the finetune trains on
    # the same 16 feeds as before the floor held feeds out of small data
    result = quantize(_model(), cfg, with_held_out(_feeds(8, seed=2), _feeds()))
    call = spy.calls[0]
    assert call["report"], "no layer was considered"
    sess = _session(result.model)
    assert np.all(np.isfinite(sess.run(None, _feeds(1, seed=9)[0])[0]))
    from onnxptq.pipeline.emit import quantizer_attrs

    inits_q = {t.name: numpy_helper.to_array(t) for t in result.model.graph.initializer}
    for name, value in call["result"].items():
        tplan = call["plan"].tensors[name]
        expected = fake_quantize(value, tplan.quant.format, **quantizer_attrs(tplan, call["params"].get(name)))
        if tplan.quant.is_integer:
            np.testing.assert_array_equal(expected, value)  # already on the grid
        else:
            folded = next(v for k, v in inits_q.items() if k.startswith(f"{name}_{tplan.quant.format}"))
            np.testing.assert_array_equal(folded, expected)


def test_bias_learned_by_adaquant(monkeypatch):
    spy = _Spy(monkeypatch)
    cfg = get_preset("MX4").replace(finetune=_options(algorithm="adaquant", learning_rate=1e-3, update_bias=True))
    quantize(_model(), cfg, _feeds())
    assert any(k.startswith("B") for k in spy.calls[0]["result"]), "no bias was learned"


def test_presets_and_compat_mapping():
    cfg = get_preset("A8W8_ADAROUND")
    assert cfg.finetune.algorithm == "adaround" and cfg.finetune.lr == 0.1 and cfg.finetune.batch_size == 2
    assert cfg.finetune.early_stop and cfg.finetune.data_size == 1000
    assert get_preset("MX9_ADAQUANT").finetune.lr == 1e-5
    with pytest.raises(ConfigError, match="AdaRound"):
        get_preset("BF16_ADAROUND")
    from onnxptq.compat import get_default_config
    from onnxptq.compat.options import to_quant_config

    for name in ("A8W8_ADAROUND", "A16W8_ADAQUANT", "BF16_ADAQUANT", "MX9_ADAQUANT"):
        assert to_quant_config(get_default_config(name)) == get_preset(name)


def test_options_validation():
    assert FinetuneOptions(algorithm="AdaQuant").lr == 1e-5
    assert FinetuneOptions(batch_size=0).batch_size == 1
    for bad in (dict(algorithm="adam"), dict(optim_device="gpu"), dict(infer_device="cuda:x"), dict(warm_start=1.0)):
        with pytest.raises(ConfigError):
            FinetuneOptions(**bad)


def test_devices_never_fall_back_to_cpu(monkeypatch):
    assert finetune.torch_device("cpu").type == "cpu"
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="sees no GPU"):
            finetune.torch_device("cuda:0")
    if not getattr(torch.version, "hip", None):
        with pytest.raises(RuntimeError, match="ROCm build of torch"):
            finetune.torch_device("hip:0")
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        with pytest.raises(RuntimeError, match="CUDAExecutionProvider"):
            extract.providers_for("cuda:0")
    if "ROCMExecutionProvider" not in ort.get_available_providers():
        with pytest.raises(RuntimeError, match="ROCMExecutionProvider"):
            extract.providers_for("hip:0")


def test_without_torch_the_error_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(ImportError, match=r"pip install onnxptq\[finetune\]"):
        finetune.require_torch()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA GPU")
def test_cuda_optim_device(monkeypatch):
    spy = _Spy(monkeypatch)
    cfg = get_preset("A8W8").replace(finetune=_options(algorithm="adaround", optim_device="cuda:0"))
    result = quantize(_model(), cfg, _feeds())
    assert spy.calls[0]["report"]
    assert np.all(np.isfinite(_session(result.model).run(None, _feeds(1)[0])[0]))
    # the same torch quantizers on the GPU are bit-exact with the NumPy references too
    from onnxptq.pipeline.refine.finetune import torch_formats as tf

    w = np.random.default_rng(0).normal(0, 1, (16, 32)).astype(np.float32)
    for fmt, attrs in (("bf16", {}), ("bfp", dict(bfp_method="to_bfp_prime", bit_width=16, block_size=16, rounding_mode=2)),
                       ("mx", dict(element_dtype="fp4_e2m1", block_size=32, rounding_mode=2))):
        got = tf.fake_quantize(torch.from_numpy(w).cuda(), fmt, **attrs).cpu().numpy()
        np.testing.assert_array_equal(got, fake_quantize(w, fmt, **attrs))


def _fp32_precisions() -> tuple:
    b = torch.backends
    return (b.cuda.matmul.fp32_precision, b.cudnn.conv.fp32_precision, b.cudnn.rnn.fp32_precision)


def test_layers_are_optimised_in_ieee_float32_then_settings_restored(monkeypatch):
    """cuDNN convolutions default to TF32 on GPUs: finetuning must run in full float32 (on an H100 the
    TF32 run kept no layer), and hand the caller's settings back afterwards."""
    from onnxptq.pipeline.refine.finetune import adaround

    seen = []
    real = adaround.optimise

    def spy(problem, options, gen):
        seen.append(_fp32_precisions())
        return real(problem, options, gen)

    monkeypatch.setattr(adaround, "optimise", spy)
    monkeypatch.setattr(torch.backends.cudnn.conv, "fp32_precision", "tf32")
    monkeypatch.setattr(torch.backends.cuda.matmul, "fp32_precision", "tf32")
    before = _fp32_precisions()
    quantize(_model(), get_preset("A8W8").replace(finetune=_options(algorithm="adaround", num_iterations=20)), _feeds())
    assert seen and all(p == ("ieee", "ieee", "ieee") for p in seen), seen
    assert _fp32_precisions() == before


def test_adaround_early_exit_once_decided_changes_nothing(monkeypatch):
    """AdaRound stops once every h(α) is clipped with Adam's momentum pointing outwards; running
    every iteration instead gives exactly the same weights."""
    from onnxptq.pipeline.refine.finetune import adaround

    calls = []
    real = adaround._decided

    def spy(alpha, opt):
        calls.append(real(alpha, opt))
        return calls[-1]

    cfg = get_preset("A8W8").replace(finetune=_options(algorithm="adaround", num_iterations=400))
    monkeypatch.setattr(adaround, "_decided", spy)
    early = quantize(_model(), cfg, _feeds())
    assert any(calls), "no layer reached the exit (the test would prove nothing)"
    monkeypatch.setattr(adaround, "_decided", lambda alpha, opt: False)
    full = quantize(_model(), cfg, _feeds())
    a = {t.name: numpy_helper.to_array(t) for t in early.model.graph.initializer}
    b = {t.name: numpy_helper.to_array(t) for t in full.model.graph.initializer}
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


# ------------------------------------------------------------------------------------ model check


def _gain_model(gain_on: int) -> onnx.ModelProto:
    """x [N, 3] → Gemm ``fc1`` (2 channels) → MatMul ``out`` → y [N, 2]; channel ``gain_on`` of fc1 reaches
    y ×100, the other ×0.001. In grid steps (s = 1/127), fc1's rows round to nearest with errors
    (0, −0.3, 0) and (0, −0.4, −0.4): fed equal inputs, channel errors −0.3 and −0.8 (see _flip_fc1)."""
    w1 = np.array([[127.0, 20.3, 30.0], [127.0, 20.4, 30.4]]) / 127.0
    wm = np.diag([100.0 if c == gain_on else 0.001 for c in range(2)])
    inits = [numpy_helper.from_array(np.asarray(w1, np.float32), "W1"), numpy_helper.from_array(np.asarray(wm, np.float32), "WM")]
    nodes = [helper.make_node("Gemm", ["x", "W1"], ["h"], name="fc1", transB=1),
             helper.make_node("MatMul", ["h", "WM"], ["y"], name="out")]
    graph = helper.make_graph(nodes, "gain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _gain_feeds(n: int = 16) -> list[dict[str, np.ndarray]]:
    """Equal inputs x = t·(1, 1, 1): a channel's output error is t × the sum of its rounding errors."""
    t = np.random.default_rng(3).uniform(0.5, 1.0, n)
    return [{"x": np.full((1, 3), v, np.float32)} for v in t]


def _flip_fc1(monkeypatch: pytest.MonkeyPatch) -> None:
    """The per-layer algorithm, replaced: fc1 gets the other rounding of its middle column, which moves
    channel 0's error −0.3 → +0.7 steps and channel 1's −0.8 → +0.2 (per-layer squared error 0.73 → 0.53:
    it passes the per-layer check); every other layer gets its float weight back (nothing changes)."""
    from onnxptq.pipeline.refine.finetune import adaround
    from onnxptq.pipeline.refine.finetune import torch_formats as tf

    def optimise(problem, options, gen):
        w = problem.weight
        if problem.layer.name != "fc1":
            return w.cpu().numpy().copy(), None
        a = problem.weight_q.attrs
        s, zp, _, _, _ = tf.integer_grid(w, problem.weight_q.format, a["scale"], a["zero_point"], a.get("axis"), a.get("block_size"))
        w_div = (w / s).double()
        q = torch.round(w_div)
        q[:, 1] += torch.sign(w_div[:, 1] - q[:, 1])
        return (q.float() * s).cpu().numpy(), None

    monkeypatch.setattr(adaround, "optimise", optimise)


def _output_error(model: onnx.ModelProto, reference: onnx.ModelProto, feeds: list[dict[str, np.ndarray]]) -> float:
    """Output MSE of ``model`` vs ``reference`` over ``feeds`` (the refine step's model error)."""
    sess, ref = _session(model), _session(reference)
    return float(np.mean([np.mean((sess.run(None, f)[0] - ref.run(None, f)[0]) ** 2) for f in feeds]))


@pytest.mark.parametrize("gain_on, hurts", [(0, True), (1, False)])
def test_model_check_drops_weights_that_raise_the_model_error(monkeypatch, gain_on, hurts):
    """fc1's new rounding passes the per-layer check either way; the model check keeps it only when the
    model's held-out output error falls (gain on channel 1) and drops it, report and all, when it rises."""
    _flip_fc1(monkeypatch)
    real_refine = finetune.refine
    spy = _Spy(monkeypatch)
    feeds = _gain_feeds()
    # A16W8: int16 activations keep their rounding far below fc1's weight steps, so the errors are the designed ones.
    cfg = get_preset("A16W8").replace(finetune=_options(algorithm="adaround"))
    assert cfg.finetune.model_check  # the default
    tuned = quantize(_gain_model(gain_on), cfg, feeds)
    plain = quantize(_gain_model(gain_on), "A16W8", feeds)
    call = spy.calls[0]
    report = {r.layer: r for r in call["report"]}
    assert set(report) == {"fc1", "out"}
    assert report["fc1"].after < report["fc1"].before, "the stub's rounding did not pass the per-layer check"
    assert not report["out"].kept and report["out"].dropped is None  # unchanged weights: reverted per layer
    err_tuned, err_plain = (_output_error(m.model, _gain_model(gain_on), feeds[-4:]) for m in (tuned, plain))
    if hurts:
        assert call["result"] == {}
        assert not report["fc1"].kept and report["fc1"].dropped.startswith("model check")
        assert err_tuned == err_plain
        # entries already in the caller's report list are not this call's to drop
        earlier = finetune.LayerResult("earlier", "Conv", 2.0, 1.0, True, 0.0)
        report = [earlier]
        assert real_refine(call["prepared"], call["plan"], call["params"], feeds, call["options"], report=report) == {}
        assert earlier.kept and earlier.dropped is None
        assert [(r.layer, r.kept, r.dropped is not None) for r in report[1:]] == [("fc1", False, True), ("out", False, False)]
    else:
        assert set(call["result"]) == {"W1"}
        assert report["fc1"].kept and report["fc1"].dropped is None
        assert err_tuned < err_plain


def test_without_model_check_the_per_layer_gains_are_kept(monkeypatch):
    """model_check=False: the old behaviour. fc1's per-layer gain is kept although it raises the model's
    held-out output error (what the check is for), and the probe watches no model output."""
    _flip_fc1(monkeypatch)
    spy = _Spy(monkeypatch)
    probes = []
    real_probe = extract.build_probe

    def build_probe(quantized, layers, keep_outputs=()):
        probes.append(list(keep_outputs))
        return real_probe(quantized, layers, keep_outputs=keep_outputs)

    monkeypatch.setattr(extract, "build_probe", build_probe)
    feeds = _gain_feeds()
    cfg = get_preset("A16W8").replace(finetune=_options(algorithm="adaround", model_check=False))
    tuned = quantize(_gain_model(0), cfg, feeds)
    plain = quantize(_gain_model(0), "A16W8", feeds)
    call = spy.calls[0]
    assert set(call["result"]) == {"W1"}
    assert [(r.layer, r.kept, r.dropped) for r in call["report"]] == [("fc1", True, None), ("out", False, None)]
    assert probes == [[]]
    assert _output_error(tuned.model, _gain_model(0), feeds[-4:]) > _output_error(plain.model, _gain_model(0), feeds[-4:])
