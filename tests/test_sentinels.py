"""Attention-mask sentinels never set a quantization range (issue 14, graph/sentinels.py).

Each test builds one small single-head attention block by hand, with the mask written in one of
the forms exporters use, calibrates on inputs whose mask really masks positions, and checks that
(1) no mask-path tensor is planned, calibrated or given a scale, (2) every scale is finite and
small, (3) the quantized output stays within the format's error of the float one.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq.api import quantize
from onnxptq.graph.sentinels import SENTINEL_THRESHOLD, holds_sentinel, is_sentinel_constant, sentinel_tensors
from onnxptq.pipeline.calibrate import calibrate_once
from onnxptq.config.presets import resolve_config

S, D = 6, 16
K, H = 8, 16  # distances 0..K-1 and heads of the embedding form
FMIN = float(np.finfo(np.float32).min)


def _attention(mask_form: str) -> tuple[onnx.ModelProto, set[str]]:
    """x[1,S,D], mask[1,S] -> single-head attention -> out[1,S,D]; returns the model and the names
    of its mask-path tensors (which must stay float)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((D, D)) / np.sqrt(D)).astype(np.float32), n)
             for n in ("Wq", "Wk", "Wv", "Wo")]
    inits.append(numpy_helper.from_array(np.array(1.0 / np.sqrt(D), np.float32), "inv_sqrt_d"))
    nodes = [
        helper.make_node("MatMul", ["x", "Wq"], ["q"], name="q_proj"),
        helper.make_node("MatMul", ["x", "Wk"], ["k"], name="k_proj"),
        helper.make_node("MatMul", ["x", "Wv"], ["v"], name="v_proj"),
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1], name="k_t"),
        helper.make_node("MatMul", ["q", "kt"], ["qk"], name="scores"),
        helper.make_node("Mul", ["qk", "inv_sqrt_d"], ["scaled"], name="scale"),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, S, D])]
    if mask_form == "finfo":  # (1 - mask) * finfo.min, added to the scores
        inputs.append(helper.make_tensor_value_info("mask", TensorProto.INT64, [1, S]))
        inits += [numpy_helper.from_array(np.array(1.0, np.float32), "one"),
                  numpy_helper.from_array(np.array(FMIN, np.float32), "fmin"),
                  numpy_helper.from_array(np.array([1], np.int64), "ax1")]
        nodes += [
            helper.make_node("Cast", ["mask"], ["mask_f"], to=TensorProto.FLOAT, name="cast"),
            helper.make_node("Unsqueeze", ["mask_f", "ax1"], ["mask_u"], name="unsq"),
            helper.make_node("Sub", ["one", "mask_u"], ["inv"], name="inv"),
            helper.make_node("Mul", ["inv", "fmin"], ["add_mask"], name="to_sentinel"),
            helper.make_node("Add", ["scaled", "add_mask"], ["masked"], name="apply_mask"),
        ]
        path = {"fmin", "add_mask", "masked", "inv", "one", "mask_u", "mask_f", "mask", "ax1"}
    elif mask_form == "inf":  # a causal 0 / -inf mask constant, added to the scores
        causal = np.triu(np.full((S, S), -np.inf, np.float32), k=1)
        inits.append(numpy_helper.from_array(causal, "causal"))
        nodes.append(helper.make_node("Add", ["scaled", "causal"], ["masked"], name="apply_mask"))
        path = {"causal", "masked"}
    elif mask_form == "where":  # masked_fill: Where(bool mask, scores, finfo.min)
        inputs.append(helper.make_tensor_value_info("mask", TensorProto.BOOL, [1, 1, S]))
        inits.append(numpy_helper.from_array(np.array(FMIN, np.float32), "fmin"))
        nodes.append(helper.make_node("Where", ["mask", "scaled", "fmin"], ["masked"], name="apply_mask"))
        path = {"fmin", "masked"}
    elif mask_form == "embedding":  # Graphormer / chython-rxnmap: a bias per graph distance and head, row 0 = -inf
        inputs.append(helper.make_tensor_value_info("distances", TensorProto.INT64, [1, S, S]))
        table = rng.standard_normal((K, H)).astype(np.float32)
        table[0] = -np.inf
        inits.append(numpy_helper.from_array(table, "spatial"))
        nodes += [
            helper.make_node("Gather", ["spatial", "distances"], ["bias4"], axis=0, name="spatial_encoder"),
            helper.make_node("Transpose", ["bias4"], ["bias"], perm=[0, 3, 1, 2], name="heads_first"),
            helper.make_node("Add", ["scaled", "bias"], ["masked"], name="apply_mask"),  # [1, H, S, S]
        ]
        path = {"spatial", "bias4", "bias", "masked"}
    else:
        raise ValueError(mask_form)
    nodes += [
        helper.make_node("Softmax", ["masked"], ["probs"], axis=-1, name="softmax"),
        helper.make_node("MatMul", ["probs", "v"], ["ctx"], name="context"),
        helper.make_node("MatMul", ["ctx", "Wo"], ["out"], name="o_proj"),
    ]
    out_shape = [1, H, S, D] if mask_form == "embedding" else [1, S, D]
    graph = helper.make_graph(nodes, f"attention_{mask_form}", inputs,
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, out_shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model, path


def _feeds(mask_form: str, n: int = 8) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(1)
    feeds = []
    for i in range(n):
        feed = {"x": rng.standard_normal((1, S, D)).astype(np.float32)}
        valid = 2 + i % (S - 2)  # always some masked (padding) positions
        if mask_form == "finfo":
            feed["mask"] = (np.arange(S) < valid).astype(np.int64)[None]
        elif mask_form == "where":
            feed["mask"] = (np.arange(S) < valid)[None, None]
        elif mask_form == "embedding":  # two molecules: bond distance + 2 inside each, 0 (-inf) across
            pos = np.arange(S)
            same = (pos[:, None] < valid) == (pos[None] < valid)
            feed["distances"] = np.where(same, np.minimum(np.abs(pos[:, None] - pos[None]), K - 3) + 2, 0)[None].astype(np.int64)
        feeds.append(feed)
    return feeds


def _run(model: onnx.ModelProto, feeds) -> np.ndarray:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.concatenate([sess.run(None, f)[0] for f in feeds])


@pytest.mark.parametrize("mask_form", ["finfo", "inf", "where", "embedding"])
def test_sentinel_detection_finds_exactly_the_mask_path(mask_form):
    model, path = _attention(mask_form)
    assert sentinel_tensors(model) == path


@pytest.mark.parametrize("mask_form", ["finfo", "inf", "where", "embedding"])
@pytest.mark.parametrize("preset,tolerance", [("A8W8", 0.08), ("A16W8", 0.02), ("MXINT8", 0.05), ("BFP16", 0.05)])
def test_mask_path_sets_no_range_and_output_within_format_error(mask_form, preset, tolerance):
    model, path = _attention(mask_form)
    feeds = _feeds(mask_form)
    calibrated = calibrate_once(model, resolve_config(preset), feeds)
    assert not path & set(calibrated.stats), f"mask-path tensors calibrated: {path & set(calibrated.stats)}"
    result = quantize(model, preset, feeds)
    assert not path & set(result.plan.tensors), "mask-path tensors must stay float"
    assert {"masked", "add_mask"} & set(result.plan.float_tensors) or mask_form != "finfo"
    assert result.plan.float_tensors.get("masked") == "attention-mask sentinel", "the plan says why"
    if preset == "A8W8":  # 8-bit integer activations: probs·V reads float by the transformer placement
        assert "probs·V" in result.plan.float_tensors["probs"], "not the sentinel rule"
    else:
        assert "probs" in result.plan.tensors, "Softmax's output (probabilities) is still quantized"
    for name, qp in result.params.items():
        if qp.scale is not None:
            assert np.all(np.isfinite(qp.scale)) and float(np.max(qp.scale)) < 1.0, (name, qp.scale)
    ref, got = _run(model, feeds), _run(result.model, feeds)
    assert np.all(np.isfinite(got))
    rel = np.linalg.norm(got - ref) / np.linalg.norm(ref)
    assert rel < tolerance, f"{preset} {mask_form}: relative error {rel:.4f}"


def test_embedding_table_mask_stays_float_under_mx9():
    """chython-rxnmap's pattern under MX9 (bench/RESULTS.md, second round of models outside the zoo):
    the per-distance bias table, read by Gather, was quantized as a weight, and MX9's kernel turns a
    block holding -inf into NaN: every output was NaN (12288 of 12288 here; on rxnmap the floor
    caught it and repair paid 119 CPU s). The table and the bias path stay float; the delivered
    model is finite and close to float."""
    import dataclasses
    model, path = _attention("embedding")
    feeds = _feeds("embedding")
    result = quantize(model, dataclasses.replace(resolve_config("MX9"), repair=False), feeds)
    assert result.plan.float_tensors.get("masked") == "attention-mask sentinel"
    assert not path & set(result.plan.tensors)
    ref, got = _run(model, feeds), _run(result.model, feeds)
    assert np.all(np.isfinite(ref)) and np.all(np.isfinite(got))
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 0.05


def test_user_tensor_override_still_quantizes_a_mask_tensor():
    """A tensor_overrides entry is the user's explicit choice: it wins over the sentinel rule."""
    from onnxptq.config.schema import TensorQuant
    import dataclasses
    model, _ = _attention("finfo")
    cfg = dataclasses.replace(resolve_config("A16W8"), tensor_overrides={"add_mask": TensorQuant("int16")})
    result = quantize(model, cfg, _feeds("finfo"))
    assert "add_mask" in result.plan.tensors


def test_is_sentinel_constant_forms():
    assert holds_sentinel(np.array([[-np.inf], [0.3]], np.float32)) and not holds_sentinel(np.array([0.3, np.nan], np.float32))
    assert is_sentinel_constant(np.array(FMIN, np.float32))
    assert is_sentinel_constant(np.array([0.0, -np.inf], np.float32))
    assert is_sentinel_constant(np.array(-10000.0, np.float32))
    assert is_sentinel_constant(np.array(SENTINEL_THRESHOLD, np.float32))
    assert not is_sentinel_constant(np.array(-9999.0, np.float32)), "just above the threshold: a value"
    assert not is_sentinel_constant(np.array([0.0, -3.0, FMIN], np.float32)), "mixed values are weights, not a mask"
    assert not is_sentinel_constant(np.array([0.0, 0.0], np.float32))
    assert not is_sentinel_constant(np.array([np.nan], np.float32))
    assert not is_sentinel_constant(np.array([-20000], np.int64)), "integer tensors are indices, not masks"
