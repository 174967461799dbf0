"""fuzz20's findings (issue 27 items 1 and 3), each on a small synthetic graph that failed before.

* ``Gemm``'s C need only broadcast to (M, N). Keras through tf2onnx writes it as a row (1, N), other exporters
  as a scalar. The int32 bias of the integer presets took a per-channel axis 0 (a Conv's bias is 1-D), so a
  (1, N) row met N scales on an axis of length 1 and emit raised a raw ``ValueError`` ("per-channel scale must be
  1-D of length 1") under A8W8 and A16W8. A row now takes its channels on its last axis; a C that is not one
  value per output channel (a scalar) stays float with the reason in the plan.
* An InstanceNorm written as moments over (H, W) of a Conv output (``x.mean((2, 3))``, the variance of the
  centred, ``Sqrt``, ``Div``, ``· γ + β``: StyleGAN/pix2pix-style exports) lost its structure region: prepare writes
  a channels-first ``ReduceMean(axes=[2, 3])`` as ``GlobalAveragePool`` (graph/passes/spatial_means.py), which the
  region rule did not count as a reduction, so BF16 rounded the mean, the squares, the variance and the root, and
  A8W8 quantized the mean the centring subtracts. ``GlobalAveragePool`` is a reduction there now.
* MX bodies for a tensor whose whole block axis is one block run the formulas in the tensor's own shape with
  constants shaped ``[1] * rank``, but their name held the axis and the length, not the rank: attention's
  (b, heads, 8, t) keys and a later (b, t, 8) activation, both blocked along axis 2, named one body, the model kept
  the first, and the rank-3 tensor came out rank 4. quantize's own check then raised ``ShapeMismatchError`` under
  MXINT8 (a decoder's cached-K/V attention beside a Whisper-style front end, TorchScript 11). The rank is in the name.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq import get_preset, quantize
from onnxptq.graph.structure import find_regions

D, N = 8, 16


def _gemms() -> onnx.ModelProto:
    """x → Gemm(W (N, D), C (1, N), transB=1, alpha 0.5, beta 2) → Relu → Transpose → Gemm(transA=1, C a scalar,
    alpha 1.5, beta 0.5) → Relu → Gemm(transB=1, alpha 2, no C)."""
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.normal(0, 0.4, (N, D)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.normal(0, 0.3, (1, N)).astype(np.float32), "c_row"),
             numpy_helper.from_array(rng.normal(0, 0.4, (N, D)).astype(np.float32), "w2"),
             numpy_helper.from_array(np.asarray(0.3, np.float32), "c_scalar"),
             numpy_helper.from_array(rng.normal(0, 0.4, (4, D)).astype(np.float32), "w3")]
    nodes = [helper.make_node("Gemm", ["x", "w1", "c_row"], ["g1"], transB=1, alpha=0.5, beta=2.0, name="row_bias"),
             helper.make_node("Relu", ["g1"], ["r1"], name="act1"),
             helper.make_node("Transpose", ["r1"], ["t1"], perm=[1, 0], name="flip"),
             helper.make_node("Gemm", ["t1", "w2", "c_scalar"], ["g2"], transA=1, alpha=1.5, beta=0.5, name="scalar_bias"),
             helper.make_node("Relu", ["g2"], ["r2"], name="act2"),
             helper.make_node("Gemm", ["r2", "w3"], ["y"], transB=1, alpha=2.0, name="head")]
    graph = helper.make_graph(nodes, "gemms", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", D])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def _feeds(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": (rng.normal(0, 1, (2, D)) * np.linspace(0.5, 2, D)).astype(np.float32)} for _ in range(n)]


@pytest.mark.parametrize("preset", ["A8W8", "A16W8"])
def test_a_gemm_row_bias_is_int32_on_its_last_axis_and_a_scalar_c_stays_float(preset: str, tmp_path) -> None:
    model = _gemms()
    out = tmp_path / "q.onnx"
    res = quantize(model, get_preset(preset).replace(repair=False), data=_feeds(16, 0), output=str(out))
    row = res.plan.tensors["c_row"]
    assert (row.quant.format, row.axis) == ("int32", 1)
    assert "c_scalar" not in res.plan.tensors and "one value per channel" in res.plan.float_tensors["c_scalar"]
    f = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    q = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    ref = np.concatenate([f.run(None, fd)[0].ravel() for fd in _feeds(8, 1)])
    got = np.concatenate([q.run(None, fd)[0].ravel() for fd in _feeds(8, 1)])
    assert ref @ got / (np.linalg.norm(ref) * np.linalg.norm(got)) > 0.99


def _instnorm_hw() -> onnx.ModelProto:
    """x → Conv → InstanceNorm written as ReduceMean over (2, 3), centred variance, Sqrt, Div, · γ + β → Relu → Conv."""
    rng = np.random.default_rng(4)
    c = 6
    inits = [numpy_helper.from_array(rng.normal(0, 0.4, (c, 3, 3, 3)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.normal(0, 0.3, (c,)).astype(np.float32), "b1"),
             numpy_helper.from_array(np.asarray(2.0, np.float32), "two"),
             numpy_helper.from_array(np.asarray(1e-5, np.float32), "eps"),
             numpy_helper.from_array((rng.random((1, c, 1, 1)) + 0.5).astype(np.float32), "gamma"),
             numpy_helper.from_array(rng.normal(0, 0.1, (1, c, 1, 1)).astype(np.float32), "beta"),
             numpy_helper.from_array(rng.normal(0, 0.4, (2, c, 3, 3)).astype(np.float32), "w2")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["z"], pads=[1] * 4, name="conv1"),
             helper.make_node("ReduceMean", ["z"], ["mu"], axes=[2, 3], keepdims=1, name="mean"),
             helper.make_node("Sub", ["z", "mu"], ["dz"], name="centre"),
             helper.make_node("Pow", ["dz", "two"], ["sq"], name="square"),
             helper.make_node("ReduceMean", ["sq"], ["var"], axes=[2, 3], keepdims=1, name="variance"),
             helper.make_node("Add", ["var", "eps"], ["ve"], name="add_eps"),
             helper.make_node("Sqrt", ["ve"], ["sd"], name="root"),
             helper.make_node("Div", ["dz", "sd"], ["nz"], name="normalize"),
             helper.make_node("Mul", ["nz", "gamma"], ["sc"], name="scale"),
             helper.make_node("Add", ["sc", "beta"], ["y0"], name="shift"),
             helper.make_node("Relu", ["y0"], ["r"], name="act"),
             helper.make_node("Conv", ["r", "w2"], ["y"], pads=[1] * 4, name="conv2")]
    graph = helper.make_graph(nodes, "instnorm_hw", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2, 8, 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def _images(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.normal(0.5, 1, (1, 3, 8, 8)).astype(np.float32)} for _ in range(n)]


INSTNORM_INTERIOR = {"mu", "dz", "sq", "var", "ve", "sd", "nz", "sc"}


def test_an_instance_norm_over_spatial_axes_is_one_region_after_the_pools() -> None:
    """The spatial means become GlobalAveragePool in prepare; the region is found on either spelling."""
    from onnxptq.pipeline.prepare import prepare

    model = _instnorm_hw()
    prepared = prepare(model)
    pools = [n for n in prepared.graph.node if n.op_type == "GlobalAveragePool"]
    assert len(pools) == 2  # what prepare makes of the two spatial means
    for m in (model, prepared):
        assert [(r.kind, r.x, r.y) for r in find_regions(m)] == [("LayerNorm/GroupNorm (mean/variance)", "z", "y0")]


@pytest.mark.parametrize("preset", ["BF16", "FP16", "A8W8"])
def test_an_instance_norm_over_spatial_axes_is_kept_float_inside(preset: str) -> None:
    res = quantize(_instnorm_hw(), get_preset(preset).replace(repair=False), data=_images(12, 0))
    planned = {t.name for t in res.plan.tensors.values() if t.role == "activation"}
    assert not planned & INSTNORM_INTERIOR, sorted(planned & INSTNORM_INTERIOR)


@pytest.mark.parametrize("opset", [17, 18])
def test_the_drawn_spellings_of_fuzz20_compute_what_they_name(opset: int) -> None:
    """testkit's three new op-set steps, run by onnxruntime, against NumPy written from the operators' definitions:
    an InstanceNorm as moments over (H, W), a Gemm with a (1, N) C, transB and alpha/beta ≠ 1, and (opset 18) a Split
    into three by ``num_outputs`` (the last piece shorter) concatenated back in reverse."""
    from testkit.fuzz import run_step

    img = np.random.default_rng(2).normal(1, 2, (2, 3, 4, 5)).astype(np.float32)
    got, b = run_step("InstanceNormHW", img, opset)
    inits = {t.name: numpy_helper.to_array(t) for t in b.inits}
    scale, shift = inits[b.nodes[-2].input[1]], inits[b.nodes[-1].input[1]]
    x = img.astype(np.float64)
    d = x - x.mean((2, 3), keepdims=True)
    np.testing.assert_allclose(got, d / np.sqrt((d * d).mean((2, 3), keepdims=True) + 1e-5) * scale + shift, rtol=1e-4, atol=1e-5)

    rows = np.random.default_rng(3).normal(0, 1, (3, 7)).astype(np.float32)
    got, b = run_step("GemmRowBias", rows, opset)
    inits = {t.name: numpy_helper.to_array(t) for t in b.inits}
    w, c = (inits[i].astype(np.float64) for i in b.nodes[-1].input[1:])
    np.testing.assert_allclose(got, 0.5 * rows.astype(np.float64) @ w.T + 2.0 * c, rtol=1e-5, atol=1e-6)

    if opset >= 18:
        got, _ = run_step("SplitNumOutputs", rows, opset)
        np.testing.assert_array_equal(got, np.concatenate([rows[:, 6:], rows[:, 3:6], rows[:, :3]], -1))


def _attention_then_rank3() -> onnx.ModelProto:
    """x (b, t, 16) → q, k heads (b, 2, t, 8) and (b, 2, 8, t) → scores → Softmax → · v → merged (b, t, 16); then a
    (b, t, 8) tensor read by a MatMul: blocked along axis 2 (its length 8 one block) as the keys are."""
    rng = np.random.default_rng(5)
    d = 16
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, (d, d)).astype(np.float32), n) for n in ("wq", "wk", "wv")]
    inits += [numpy_helper.from_array(np.asarray([0, 0, 2, 8], np.int64), "heads"),
              numpy_helper.from_array(np.asarray([0, 0, d], np.int64), "merged"),
              numpy_helper.from_array(rng.normal(0, 0.3, (d, 8)).astype(np.float32), "wdown"),
              numpy_helper.from_array(rng.normal(0, 0.3, (8, 4)).astype(np.float32), "whead")]
    mm, tr, rs = "MatMul", "Transpose", "Reshape"
    nodes = [helper.make_node(mm, ["x", "wq"], ["q0"]), helper.make_node(rs, ["q0", "heads"], ["q1"]),
             helper.make_node(tr, ["q1"], ["q"], perm=[0, 2, 1, 3]),
             helper.make_node(mm, ["x", "wk"], ["k0"]), helper.make_node(rs, ["k0", "heads"], ["k1"]),
             helper.make_node(tr, ["k1"], ["kt"], perm=[0, 2, 3, 1]),
             helper.make_node(mm, ["x", "wv"], ["v0"]), helper.make_node(rs, ["v0", "heads"], ["v1"]),
             helper.make_node(tr, ["v1"], ["v"], perm=[0, 2, 1, 3]),
             helper.make_node(mm, ["q", "kt"], ["s"]), helper.make_node("Softmax", ["s"], ["p"], axis=-1),
             helper.make_node(mm, ["p", "v"], ["a"]), helper.make_node(tr, ["a"], ["at"], perm=[0, 2, 1, 3]),
             helper.make_node(rs, ["at", "merged"], ["m"]), helper.make_node("Add", ["m", "x"], ["r"]),
             helper.make_node(mm, ["r", "wdown"], ["down"]), helper.make_node("Relu", ["down"], ["act"]),
             helper.make_node(mm, ["act", "whead"], ["y"])]
    graph = helper.make_graph(nodes, "attn_rank3", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", d])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    model = onnx.shape_inference.infer_shapes(model)
    onnx.checker.check_model(model)
    return model


def test_mx_bodies_of_one_whole_block_differ_by_rank(tmp_path) -> None:
    """MXINT8 (repair off): the delivered model's output has float's shape on sequences of several lengths."""
    model = _attention_then_rank3()
    rng = np.random.default_rng(6)
    feeds = [{"x": rng.normal(0, 1, (1, int(rng.integers(3, 9)), 16)).astype(np.float32)} for _ in range(12)]
    out = tmp_path / "q.onnx"
    quantize(model, get_preset("MXINT8").replace(repair=False), data=feeds, output=str(out))
    f = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    q = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    for fd in feeds[:3]:
        ref, got = f.run(None, fd)[0], q.run(None, fd)[0]
        assert got.shape == ref.shape
        assert float(ref.ravel() @ got.ravel() / (np.linalg.norm(ref) * np.linalg.norm(got))) > 0.99
