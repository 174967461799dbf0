"""A single-channel Conv input blocks along its last spatial axis whether or not the exporter declared the sizes.

pipeline/plan/short_blocks.py ``off_unit_axis``: a block axis of known length 1 (a Conv's channel axis on a grey image, a
mel image, a waveform) moves to where the tensor has extent. It used to move only to an axis of *known* length > 1,
so the same single-channel convolution exported with dynamic spatial sizes (``[N, 1, h, w]``) kept its blocks on the
channel axis, one element each: under MXFP8_E4M3 every element then takes its own OCP exponent and every one whose
mantissa is above 1.75 saturates (one in eight, by up to 12.5 %) where a block of 32 clips only its maximum. The
graph: the input through an affine (an input BatchNorm written out as Mul/Add, as tf2onnx writes tempocnn's, so the
input-only exponent rule of plan/short_blocks.py does not apply) into Conv 1→8 (edge taps that cancel on a flat
image) → Relu → Conv 8→16 → Relu → GlobalAveragePool → MatMul: a Keras mel/grey classifier's front in miniature.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from _conv_front import conv_front_nodes

from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config

H, W = 24, 40


def _model(dynamic: bool) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((8, 1, 3, 3)).astype(np.float32) * 0.5
    w1 -= w1.mean(axis=(1, 2, 3), keepdims=True)
    inits = {"g": np.array([[[[1.9]]]], np.float32), "b": np.array([[[[0.05]]]], np.float32), "w1": w1,
             "w2": (rng.standard_normal((16, 8, 3, 3)) / 8).astype(np.float32),
             "w3": (rng.standard_normal((16, 4)) / 4).astype(np.float32)}
    nodes = [helper.make_node("Mul", ["image", "g"], ["scaled"], name="bn_mul"),
             helper.make_node("Add", ["scaled", "b"], ["affine"], name="bn_add"),
             *conv_front_nodes("affine")]
    dims = ["n", 1, "h", "w"] if dynamic else [1, 1, H, W]
    graph = helper.make_graph(nodes, "one_channel", [helper.make_tensor_value_info("image", TensorProto.FLOAT, dims)],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["n" if dynamic else 1, 4])],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _feeds(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    """Smooth grey images in [0.3, 1] with fine texture: each pixel's mantissa anywhere in its octave."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        coarse = np.kron(rng.uniform(0.3, 1.0, (H // 4, W // 4)), np.ones((4, 4)))
        out.append({"image": np.clip(coarse + rng.normal(0, 0.02, (H, W)), 0, 1)[None, None].astype(np.float32)})
    return out


def _run(model: onnx.ModelProto, feeds) -> np.ndarray:
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.concatenate([s.run(None, f)[0] for f in feeds])


def _quantize(dynamic: bool, preset: str, **changes):
    cfg = resolve_config(preset).replace(repair=False, bias_correction=False, **changes)
    return quantize(_model(dynamic), cfg, _feeds(4, 1), eval_samples=0)


@pytest.mark.parametrize("preset", ["MXFP8_E4M3", "MXINT8", "BFP16"])
def test_dynamic_sizes_block_as_declared_ones(preset: str) -> None:
    """The plan's block axis of the single-channel Conv input is its last spatial axis in both exports, and the
    two files compute the same logits bit for bit (on main the dynamic export blocked along the channel axis)."""
    dyn, static = _quantize(True, preset), _quantize(False, preset)
    assert static.plan.tensors["affine"].axis == -1
    assert dyn.plan.tensors["affine"].axis == -1, dyn.plan.tensors["affine"]
    held = _feeds(6, 2)
    np.testing.assert_array_equal(_run(dyn.model, held), _run(static.model, held))


def test_mxfp8_error_against_float() -> None:
    """MXFP8_E4M3 activations (weights float, so the activations' quantizers alone are compared), the dynamic
    export: the logits' relative squared error against the float model (onnxruntime on the unquantized graph)
    stays below 3.5e-3 (measured: 2.27e-3 with blocks along the width, as the declared export gets; 6.15e-3 with
    one element per block, main's plan)."""
    held = _feeds(8, 2)
    ref = _run(_model(True), held)
    got = _run(_quantize(True, "MXFP8_E4M3", weight=None).model, held)
    err = float(((got - ref) ** 2).mean() / (ref ** 2).mean())
    assert err < 3.5e-3, err


def test_batch_axis_is_never_a_block_axis() -> None:
    """A ``[N, 1]`` activation whose only other axis is the batch keeps its blocks on its own axis: blocks across
    samples would make one sample's result depend on the others in its batch."""
    from onnxptq.pipeline.plan.short_blocks import off_unit_axis

    assert off_unit_axis(1, (None, 1)) == 1
    assert off_unit_axis(1, (None, 1, None, None)) == -1
    assert off_unit_axis(1, (None, 1, None)) == -1
    assert off_unit_axis(1, (None, 1, 40, None)) == -2
    assert off_unit_axis(1, (None, 8, None, None)) == 1
