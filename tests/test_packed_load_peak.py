"""The load peak of packed block weights (issue 26 item 4, branch packed16): onnxruntime's constant
folding keeps every folded step's output until its pass ends, so what a decode chain adds to the
session's peak is the sum of its steps' outputs. Computed here from the graph (static shapes, no
timing): large weights decode from their own codes in their own axis order (Cast, Mul, one Reshape;
a -0 code's fmod; a ragged axis's Concat), not from a group's code stream cut by a Split and put
back by a Reshape and a Transpose each, and they decode bit for bit as before."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, shape_inference

from onnxptq.formats import fake_quantize
from onnxptq.graph.walk import FreshNames
from onnxptq.onnx_ops import packed
from onnxptq.onnx_ops.packed import WeightPacker
from test_packed_weights import FORMATS

#: opset of the decode model: MXFP8's codes are then float8 and cast (FP8_CAST_OPSET, 19)
OPSET = 19


def _weights() -> dict[str, tuple[np.ndarray, int]]:
    """A 3x3 conv (blocks along its input channel, 9 values after it), a MatMul weight whose block
    axis (its 120 rows) ends in a ragged block under 16- and 32-blocks, and a 1x1 conv; -0 inputs
    and values MX rounding sends to -0 among them; each at least OWN_FROM elements."""
    rng = np.random.default_rng(5)
    conv = rng.normal(0, 0.1, (128, 64, 3, 3)).astype(np.float32)
    conv[0, :, 0, 0] = -0.0
    conv[1, :16] = -1e-30
    conv[1, 16:32] = 3.0
    matmul = (rng.standard_t(3, (120, 640)) * 0.05).astype(np.float32)
    pointwise = rng.normal(0, 0.2, (256, 256, 1, 1)).astype(np.float32)
    return {"conv": (conv, 1), "matmul": (matmul, 0), "pointwise": (pointwise, 1)}


def _decode_model(key: str, weights: dict[str, tuple[np.ndarray, int]], unpacked: tuple[str, ...] = ()
                  ) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """The packed weights' decode model and the reference's values; ``unpacked``: weights the
    packer must refuse (too many elements to patch), left out of the model."""
    fmt, base = FORMATS[key]
    packer = WeightPacker(OPSET, FreshNames())
    frags, expected = [], {}
    for name, (values, axis) in weights.items():
        attrs = dict(base, axis=axis)
        fq = fake_quantize(values, fmt, **attrs)
        frag = packer.add(name, values, fq, fmt, attrs, f"{name}_out")
        if name in unpacked:
            assert frag is None, f"{key}: {name} was packed"
            continue
        assert frag is not None, f"{key}: {name} was not packed"
        frags.append(frag)
        expected[f"{name}_out"] = fq
    head = packer.finish()
    nodes = list(head.nodes) + [n for f in frags for n in f.nodes]
    inits = list(head.initializers) + [t for f in frags for t in f.initializers]
    graph = helper.make_graph(nodes, "decode", [], [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v.shape))
                                                    for k, v in expected.items()], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=9)
    onnx.checker.check_model(model)
    return model, expected


def folded_bytes(model: onnx.ModelProto) -> int:
    """Bytes of every node output of ``model`` (a graph of initializers and the nodes that decode
    them, all folded at load), from ONNX shape inference: what the folding holds at its end."""
    inferred = shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    info = {v.name: v.type.tensor_type for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
    total = 0
    for node in model.graph.node:
        for out in node.output:
            t = info[out]
            dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
            assert t.HasField("shape") and None not in dims, f"{node.op_type} {out}: shape not inferred"
            total += int(np.prod(dims, dtype=np.int64)) * helper.tensor_dtype_to_np_dtype(t.elem_type).itemsize
    return total


#: the bound per format, over the weights' float32 bytes (main before packed16: BFP16 6.89, MXINT8 6.33,
#: MXFP8_E4M3 5.33, MX9 9.39 on these weights; this branch 4.60, 4.58, 3.58, 6.29): the block-level
#: steps (exponents, escapes: 1/8 of the elements each under BFP16's blocks of 8) are the rest
@pytest.mark.parametrize("key, bound", [("BFP16", 4.8), ("MXINT8", 4.8), ("MXFP8_E4M3", 3.8), ("MX9", 6.5)])
def test_large_weights_decode_from_their_own_codes_with_few_full_size_steps(key, bound):
    """The values the decode chain's folded steps hold at the end of onnxruntime's folding, over the
    weights' float32 bytes: Cast + Mul + Reshape (a weight one block along its axis: no Reshape),
    MXINT8/MX9's -0 codes one fmod, the ragged MatMul weight's parts one Concat, MX9's sub-block
    flags and their Where (half-size); the group form held 5-7 copies (its Split, each weight's
    Reshape and Transpose). The weights decode bit for bit at both optimisation levels."""
    weights = _weights()
    model, expected = _decode_model(key, weights)
    for level in (ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_ALL):
        so = ort.SessionOptions()
        so.graph_optimization_level = level
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        for out, got in zip([o.name for o in sess.get_outputs()], sess.run(None, {})):
            bad = np.flatnonzero(got.view(np.uint32) != expected[out].view(np.uint32))
            assert bad.size == 0, f"{key}/{out}: {bad.size} elements differ"
    ratio = folded_bytes(model) / sum(v.nbytes for v in expected.values())
    assert ratio <= bound, f"{key}: the folded steps hold {ratio:.2f}x the weights' bytes"
    ops = {n.op_type for n in model.graph.node}
    assert "Transpose" not in ops, ops  # each weight's codes are stored in its own axis order


def test_own_codes_off_gives_the_group_form_with_the_same_values(monkeypatch):
    """``OWN_CODES = False`` keeps every weight in its group's code stream (the form before
    packed16): the same decoded bits, more folded bytes."""
    weights = _weights()
    own, expected = _decode_model("MXINT8", weights)
    monkeypatch.setattr(packed, "OWN_CODES", False)
    grouped, _ = _decode_model("MXINT8", weights)
    assert "Split" in {n.op_type for n in grouped.graph.node}
    assert folded_bytes(grouped) > 1.3 * folded_bytes(own)
    so = ort.SessionOptions()
    got = ort.InferenceSession(grouped.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, {})
    for out, value in zip([o.name for o in grouped.graph.output], got):
        assert np.array_equal(value.view(np.uint32), expected[out].view(np.uint32)), out


@pytest.mark.parametrize("key", ["MX9", "MXINT8"])
def test_a_refused_large_weight_leaves_no_trace_in_the_groups(key):
    """A large weight with too many elements the format cannot hold (Inf every 7th: more than the
    patch allows) is refused after its codes, exponents, shifts and pieces went to its groups;
    they are taken back, and the weights packed after it decode bit for bit."""
    weights = _weights()
    bad = np.random.default_rng(3).normal(0, 0.1, (128, 64, 3, 3)).astype(np.float32)
    bad.reshape(-1)[::7] = np.inf
    model, expected = _decode_model(key, {"bad": (bad, 1), **weights}, unpacked=("bad",))
    got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {})
    for out, value in zip([o.name for o in model.graph.output], got):
        assert np.array_equal(value.view(np.uint32), expected[out].view(np.uint32)), out
