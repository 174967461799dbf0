"""fuzz21 (issue 27 items 1 and 3): the hand-built spellings of this round compute what they name, and two
normalization spellings new to the campaign are regions the plan keeps float inside.

The campaign (bench/RESULTS.md, fuzz21) found no raw exception and no SILENT row on these spellings, so nothing in
``src/`` changed; these tests pin what the campaign relied on: the generators against independent references
(onnx's reference evaluator, NumPy written from the operators' definitions), and the region rule on Gemma's
``(1 + γ)`` RMSNorm at opset 18 and ConvNeXt-V2's Global Response Normalization, both of which a later change to
``graph/structure.py`` could lose without any other test noticing.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import fuzz_corners as fc  # noqa: E402

from onnxptq import get_preset, quantize  # noqa: E402
from onnxptq.graph.structure import find_regions  # noqa: E402


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    o = ort.SessionOptions()
    o.intra_op_num_threads, o.log_severity_level = 1, 3
    return ort.InferenceSession(model.SerializeToString(), o, providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.parametrize("kind", ["layernorm_stash_axis", "scatternd_cache", "where_neginf_fp16", "rmsnorm_offset18",
                                  "einsum_attn_argmax", "opset23_llm_ops"])
def test_the_hand_built_spellings_of_fuzz21_run_as_onnx_defines_them(kind: str) -> None:
    """onnxruntime's outputs equal onnx's reference evaluator's (Python written from the operator definitions) on
    every output: LayerNormalization's stash Mean at axis 1, ScatterND, Where with −inf in half, ReduceMean's axes
    input, Einsum and ArgMax, opset 23's RMSNormalization/RotaryEmbedding/Attention."""
    from onnx.reference import ReferenceEvaluator

    model, feeds = fc.CASES[kind](5)
    feed = feeds(2, 1)[1]
    got, ref = _run(model, feed), ReferenceEvaluator(model).run(None, feed)
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        assert g.shape == r.shape
        tol = 4e-3 if g.dtype == np.float16 else 1e-5
        np.testing.assert_allclose(g.astype(np.float64), r.astype(np.float64), rtol=tol, atol=tol)


def test_the_centernet_peaks_decode_as_numpy_says() -> None:
    """``maxpool_nms_topk``: with the heatmap and the size maps exposed, the graph's scores, indices and sizes are
    NumPy's peaks (a value equal to its 3×3 neighbourhood's maximum, padding never a maximum), their top 8 over the
    flattened (class, y, x) and the sizes Gathered at each peak's pixel."""
    model, feeds = fc.CASES["maxpool_nms_topk"](5)
    g = model.graph
    heat = next(n for n in g.node if n.op_type == "MaxPool").input[0]
    wh = [n for n in g.node if n.op_type == "Conv"][-1].output[0]  # the 1×1 size head, the graph's last Conv
    g.output.extend([helper.make_tensor_value_info(heat, TensorProto.FLOAT, None),
                     helper.make_tensor_value_info(wh, TensorProto.FLOAT, None)])
    scores, idx, sizes, hm, whv = _run(model, feeds(2, 3)[1])
    padded = np.pad(hm, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    local = np.max(np.stack([padded[:, :, i:i + hm.shape[2], j:j + hm.shape[3]] for i in range(3) for j in range(3)]), 0)
    peaks = (hm * (local == hm)).reshape(-1)
    assert np.count_nonzero(peaks) > 8  # more peaks than picked: the top 8 are a choice
    np.testing.assert_allclose(scores[0], np.sort(peaks)[::-1][:8], rtol=1e-6)
    np.testing.assert_allclose(peaks[idx[0]], scores[0], rtol=1e-6)  # each index points at its score
    pix = idx[0] % (hm.shape[2] * hm.shape[3])
    np.testing.assert_allclose(sizes[0], whv.reshape(2, -1)[:, pix], rtol=1e-6)


def _grn(seed: int = 4) -> tuple[onnx.ModelProto, list[dict[str, np.ndarray]]]:
    """ConvNeXt-V2's Global Response Normalization, channels-last, between two MatMuls: Gx = ReduceL2 over (H, W),
    Nx = Gx / (ReduceMean over C of Gx + ε), γ·(x·Nx) + β + x."""
    g = fc.G(seed, opset=17)
    c = 8
    inp = g.input("x", ["batch", 4, 4, c])
    x = g.op("Relu", [g.op("MatMul", [inp, g.w((c, c))])])
    gx = g.op("ReduceL2", [x], axes=[1, 2], keepdims=1)
    nx = g.op("Div", [gx, g.op("Add", [g.op("ReduceMean", [gx], axes=[-1], keepdims=1), g.f(1e-6)])])
    y = g.op("Add", [g.op("Add", [g.op("Mul", [g.op("Mul", [x, nx]), g.w((1, 1, 1, c), 0.5)]), g.w((1, 1, 1, c), 0.1)]), x])
    g.output(g.op("MatMul", [y, g.w((c, 4))]))
    rng = np.random.default_rng(seed)
    return g.make(), [{"x": rng.normal(0, 1, (1, 4, 4, c)).astype(np.float32)} for _ in range(12)]


def _case(kind: str) -> tuple[onnx.ModelProto, list[dict[str, np.ndarray]]]:
    if kind == "grn":
        return _grn()
    model, feeds = fc.CASES[kind](7)
    return model, feeds(12, 1)


@pytest.mark.parametrize("kind, region_kind", [("rmsnorm_offset18", "RMSNorm"), ("grn", "RMSNorm")])
def test_gemma_rmsnorm_and_grn_are_regions_bf16_keeps_float_inside(kind: str, region_kind: str) -> None:
    """Gemma's RMSNorm at opset 18 (ReduceMean's axes an input, the weight ``Add(1, γ)``) and ConvNeXt-V2's GRN
    (an L2 norm over the spatial axes divided by its channel mean, times ``x``, ``+ x``) are each one region, and
    BF16 (repair off) rounds none of their interior tensors: the mean square, the root, the norms, the ratio."""
    model, data = _case(kind)
    regions = [r for r in find_regions(model) if r.kind == region_kind]
    assert len(regions) == 1, [(r.kind, r.x, r.y) for r in find_regions(model)]
    interior = set(regions[0].interior)
    assert len(interior) >= 4
    res = quantize(model, get_preset("BF16").replace(repair=False), data=data)
    planned = {t.name for t in res.plan.tensors.values() if t.role == "activation"}
    assert planned, "BF16 planned nothing at all"
    assert not planned & interior, sorted(planned & interior)
