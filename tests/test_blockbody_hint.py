"""Block bodies take their branch-free forms where calibration saw the tensor small (issue 26 items 1
and 3, blockhint15).

A model that declares its maps ``[N, C, ?, ?]`` (PP-OCR cls: every activation) never tells a body
builder that a tensor is small, so MX9's flush kept its ``If``, MXINT8 its two and BFP16 its one, on
tensors of 2-38 k elements. Emit now hands the builders the most elements each activation held on
the calibration feeds (``pipeline/observed_sizes.py``), and a body seen below the size line is
built without them. The hint only chooses between two exact bodies: these tests run a hinted body
on tensors far larger than its hint (zeros, ±0, subnormals, ±Inf, NaN, the float32 maximum, block
lengths that do not divide the axis) against the NumPy reference bit for bit, and check on PP-OCR
cls that the hinted file computes what the unhinted one does."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from _format_testing import assert_same_bits, fragment_session
from onnxptq.formats import fake_quantize
from onnxptq.onnx_ops import build_qdq
from test_blockbody_one_if import _cases, _fmt, _ifs

#: (dims the emitter knows, a concrete shape far above the hint, axis): a ragged channel axis (padded
#: view), one that blocks tile (BFP16's copied-dims view), one shorter than a block, rank 3, a last
#: axis of 33 (transposed view) under an unknown length.
VIEWS = [
    (["N", 20, "H", "W"], (2, 20, 37, 41), 1),
    ([None, 40, None, None], (1, 40, 61, 43), 1),
    (["N", 12, "H", "W"], (3, 12, 45, 47), 1),
    (["B", 24, "T"], (2, 24, 1031), 1),
    (["T", 33], (2050, 33), 1),
]
# A block axis of unknown length (the ranked views, ``r<rank>``) keeps its body: the hint does not
# reach those views (none of the five models timed quantizes one).
#: the presets whose bodies branch on tensors not known small (MXFP elements never branch)
BRANCHING = ["BFP16", "MX9", "MX6", "MXINT8"]
HINT = 1000  # elements seen on the calibration feeds: far below every shape above


def _body(preset: str, dims: list, axis: int, observed: int | None) -> tuple:
    fmt, attrs = _fmt(preset, axis)
    kw = {} if observed is None else {"observed": observed}
    return fmt, attrs, build_qdq(fmt, "x", "y", name="q", opset=21, shape=dims, dtype="float32", **kw, **attrs)


@pytest.mark.parametrize("dims,shape,axis", VIEWS, ids=str)
@pytest.mark.parametrize("preset", BRANCHING)
def test_hinted_body_is_branch_free_and_exact_far_above_its_hint(preset, dims, shape, axis) -> None:
    fmt, attrs, frag = _body(preset, dims, axis, HINT)
    body = frag.functions[0]
    assert _ifs(body.node) == 0, f"{body.name}: an If chooses formulas in a body seen small"
    _, _, plain = _body(preset, dims, axis, None)
    assert _ifs(plain.functions[0].node) >= 1, "without the hint the body keeps its If (the rule this test is about)"
    assert plain.functions[0].name != body.name  # two bodies, two names: both may live in one model
    sess = fragment_session(frag, [d if isinstance(d, int) or d is None else str(d) for d in dims])
    assert int(np.prod(shape)) > 20 * HINT
    for seed in (0, 1):
        for what, x in _cases(shape, seed):
            assert_same_bits(sess.run(None, {"x": x})[0], fake_quantize(x, fmt, **attrs), f"{what} {shape} seed {seed} ({body.name})")


@pytest.mark.parametrize("preset", BRANCHING)
def test_a_large_hint_keeps_the_branched_body(preset) -> None:
    """Seen at or above the line, the body is the one built without a hint (the same name)."""
    dims = ["N", 20, "H", "W"]
    _, _, big = _body(preset, dims, 1, 10**6)
    _, _, plain = _body(preset, dims, 1, None)
    assert big.functions[0].name == plain.functions[0].name


def test_observed_sizes_of_cls_on_its_feeds() -> None:
    """PP-OCR cls declares its maps ``[?, C, ?, ?]``; on 48x192 lines every one has a size (the
    one each shape inference gives), the largest seen over feeds of two widths."""
    from onnxptq.pipeline.observed_sizes import observed_sizes
    from testkit.models import model_path

    model = onnx.load(str(model_path("cls")))
    name = model.graph.input[0].name
    feeds = [{name: np.zeros((1, 3, 48, w), np.float32)} for w in (192, 96, 192)]
    sizes = observed_sizes(model, feeds)
    declared = {v.name: [d.dim_value if d.HasField("dim_value") else None for d in v.type.tensor_type.shape.dim]
                for v in onnx.shape_inference.infer_shapes(model).graph.value_info}
    unknown = [n for n, d in declared.items() if None in d]
    assert unknown and all(n in sizes for n in unknown)
    first_conv = next(n for n in model.graph.node if n.op_type == "Conv").output[0]
    assert sizes[first_conv] == 1 * 8 * 24 * 96  # stride 2 on the 48x192 feed, the wider of the two
    assert observed_sizes(model, []) == {}


@pytest.fixture(scope="module")
def cls_pair():
    """PP-OCR cls MX9, MXINT8 and BFP16 built from one calibration with and without the size hint
    (block formats read no statistics: one calibration serves every preset's build)."""
    import onnxptq
    from onnxptq.pipeline import observed_sizes as hint
    from onnxptq.pipeline.build import build_model
    from onnxptq.pipeline.calibrate import calibrate_once
    from testkit.models import model_path
    from testkit.ocr import render_cls

    images = render_cls(4, seed=3)[0]
    name = onnx.load(str(model_path("cls"))).graph.input[0].name
    feeds = [{name: images[i:i + 1]} for i in range(len(images))]
    cal = calibrate_once(str(model_path("cls")), onnxptq.get_preset("MX9").replace(repair=False), feeds[:2])
    out = {}
    for preset in ("MX9", "MXINT8", "BFP16"):
        cfg = onnxptq.get_preset(preset).replace(repair=False)
        with_hint = build_model(cal, cfg).model
        saved = hint._CACHE[id(cal)]
        hint._CACHE[id(cal)] = {}
        without = build_model(cal, cfg).model
        hint._CACHE[id(cal)] = saved
        out[preset] = with_hint, without, feeds
    return out


@pytest.mark.parametrize("preset", ["MX9", "MXINT8", "BFP16"])
def test_cls_hinted_file_has_fewer_ifs_and_the_same_outputs(cls_pair, preset) -> None:
    hinted, plain, feeds = cls_pair[preset]

    def ifs(model: onnx.ModelProto) -> int:
        bodies = {f.name: f for f in model.functions}
        return sum(_ifs(bodies[n.op_type].node) for n in model.graph.node if n.op_type in bodies)

    assert ifs(hinted) < ifs(plain) // 2, (ifs(hinted), ifs(plain))
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    sessions = [ort.InferenceSession(m.SerializeToString(), options, providers=["CPUExecutionProvider"])
                for m in (hinted, plain)]
    name = hinted.graph.input[0].name
    wide = np.concatenate([feeds[2][name]] * 3, axis=3)  # three times the width calibration saw
    odd = feeds[3][name].copy()
    odd[0, 0, :2, :4] = [[np.inf, -np.inf, np.nan, -0.0], [1e-40, -1e-41, 3e38, -3e38]]
    for x in (feeds[2][name], wide, odd):
        a, b = (s.run(None, {name: x})[0] for s in sessions)
        assert_same_bits(a, b, f"{preset} {x.shape}")
