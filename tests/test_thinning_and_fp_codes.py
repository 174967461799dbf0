"""Two cheaper roads to the same results (issue 26 item 1, branch blocktime6).

* The range guard's in-graph thinning of a float32 NCHW feature map is an ``AveragePool`` with a
  1×1 kernel and the Slice's steps as strides (:func:`onnxptq.pipeline.subsample.thin_in_graph`):
  onnxruntime's NCHWc pass then keeps the guarded convolutions' outputs in its blocked layout
  instead of converting each whole feature map back for a Slice. Held here: the same indices and
  values as the Slice (NaN and ±Inf included), in the calibration session's own optimisation
  level, and on a real model the same guard decisions and the same delivered file as the Slice.
* An FP element's code (MXFP8/MXFP6/MXFP4 and the FP8 element formats) is found by a cast to its
  ml_dtypes type instead of a binary search of the magnitude table
  (:meth:`onnxptq.onnx_ops.packed.ElementCode.cast_codes`): the same codes for every value.
"""

from __future__ import annotations

import hashlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxptq.onnx_ops.packed as packed
import onnxptq.pipeline.subsample as sub
from onnxptq.api import quantize
from onnxptq.config.presets import get_preset
from onnxptq.sessions import open_session
from testkit.models import model_path


def _conv_then_thin(shape: tuple[int, ...], protect: tuple[int, ...], elem_type: int) -> tuple[onnx.ModelProto, list[str]]:
    """x → Conv(1×1, identity weights) → t, thinned by ``thin_in_graph``; outputs: the thinned tensor."""
    channels = shape[1]
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["t"], name="conv")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))], [],
                              [numpy_helper.from_array(np.eye(channels, dtype=np.float32).reshape(channels, channels, 1, 1), "w")])
    out, nodes = sub.thin_in_graph(graph, "t", len(shape), protect, dims=list(shape), elem_type=elem_type)
    graph.node.extend(nodes)
    graph.output.append(helper.make_tensor_value_info(out, TensorProto.FLOAT, None))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, [n.op_type for n in nodes]


@pytest.mark.parametrize("shape,protect", [((1, 16, 70, 33), (1,)), ((1, 32, 100, 90), (1, -1)), ((1, 5, 64, 65), (1,)),
                                           ((2, 16, 40, 7), (1,))])
def test_float_feature_maps_are_thinned_by_pooling_with_the_slices_values(shape, protect):
    model, ops = _conv_then_thin(shape, protect, TensorProto.FLOAT)
    assert ops == ["AveragePool"]
    model.graph.output.append(helper.make_tensor_value_info("t", TensorProto.FLOAT, None))  # the whole map beside it
    x = np.random.default_rng(1).normal(size=shape).astype(np.float32)
    # (0, 0) is always kept; the identity Conv spreads a NaN or Inf over every channel there
    # (0 × NaN), so each goes to a position of its own
    x[0, 1, 0, 0], x[0, 2, 0, -1], x[0, 3, -1, 0] = np.nan, np.inf, -np.inf
    x[0, 4, -1, -1] = np.float32(1e-45)  # a subnormal passes as itself
    step = {ax: shape[ax] // sub.IN_GRAPH_POSITIONS + 1 for ax in range(2, 4) if ax not in {a % 4 for a in protect}}
    index = tuple(slice(None, None, step.get(ax)) for ax in range(4))
    # "all": the calibration session's level, where the pooling runs in the NCHWc layout (16/32
    # channels) or not (5); "basic": the guard's own session
    for level in ("all", "basic"):
        got, whole = open_session(model, optimization=level).run(None, {"x": x})
        want = whole[index]
        assert np.isnan(want).any()  # position (0, 0) is kept
        assert got.shape == want.shape and np.array_equal(got, want, equal_nan=True), (shape, level)


def test_other_tensors_keep_the_slice():
    """Not float32, not NCHW, or the channel axis thinned: the Slice as before."""
    shape = (1, 16, 40, 40)
    assert _conv_then_thin(shape, (1,), TensorProto.FLOAT16)[1] == ["Slice"]
    assert _conv_then_thin(shape, (1,), None)[1] == ["Slice"]
    assert _conv_then_thin(shape, (-1,), TensorProto.FLOAT)[1] == ["Slice"]  # axes 1 and 2 thinned
    graph = helper.make_graph([], "g", [], [])
    assert [n.op_type for n in sub.thin_in_graph(graph, "t", 3, (-1,), dims=[1, 197, 384], elem_type=TensorProto.FLOAT)[1]] == ["Slice"]


def test_real_model_guard_and_file_are_the_slices(monkeypatch):
    """PP-OCR cls MXINT8 (its guarded feature maps thinned by pooling): the same guard decisions and
    the same delivered bytes as with the Slice thinning."""
    path = str(model_path("cls"))
    name = onnx.load(path, load_external_data=False).graph.input[0].name
    rng = np.random.default_rng(0)
    data = [{name: rng.random((1, 3, 48, 192), dtype=np.float32)} for _ in range(4)]
    cfg = get_preset("MXINT8").replace(repair=False)
    pools = []
    real_pool = sub._pool_thinning
    monkeypatch.setattr(sub, "_pool_thinning", lambda *a: pools.append(a[0]) or real_pool(*a))
    pooled = quantize(path, cfg, data=data)
    assert len(pools) >= 10, pools  # the guard's candidates are the model's feature maps
    monkeypatch.setattr(sub, "_pool_thinning", None)  # thin_in_graph would fail if it still pooled
    real_thin = sub.thin_in_graph
    monkeypatch.setattr(sub, "thin_in_graph", lambda *a, **k: real_thin(*a, **{**k, "elem_type": None}))
    monkeypatch.setattr("onnxptq.pipeline.guard.thin_in_graph", sub.thin_in_graph)
    sliced = quantize(path, cfg, data=data)
    digest = lambda r: hashlib.sha256(r.model.SerializeToString(deterministic=True)).hexdigest()  # noqa: E731
    assert pooled.plan.guard == sliced.plan.guard
    assert digest(pooled) == digest(sliced)


@pytest.mark.parametrize("element", sorted(packed._FP_ELEMENTS))
def test_fp_codes_by_cast_are_the_table_searchs(element, monkeypatch):
    code = packed.element_code("mx", {"element_dtype": element})
    table = code.table.astype(np.float64)
    finite = table[np.isfinite(table)]
    rng = np.random.default_rng(2)
    units = np.concatenate([table, -table, table * (1 + 2.0**-20), table / 2, table * 2, rng.normal(size=20000) * 4,
                            rng.choice(finite, 20000), [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-300, -1e-300, 1e300, 5e-324]])
    monkeypatch.setattr(packed, "CAST_FP_CODES", True)
    cast = code.search(units)
    monkeypatch.setattr(packed, "CAST_FP_CODES", False)
    searched = code.search(units)
    assert cast.dtype == searched.dtype == np.uint8
    assert np.array_equal(cast, searched)
    assert np.count_nonzero(cast) > 15000  # the table's own values were found, not all sent to code 0


@pytest.mark.parametrize("preset,pooled", [("MXINT8", True), ("A8W8", False)])
def test_tensors_calibration_reads_whole_keep_the_slice(preset, pooled):
    """The calibration's capture pools a feature map only where nothing else in that session reads
    it: A8W8's statistics reduce every guarded activation (NCHWc converts it back anyway), so its
    thinning stays a Slice; a block format's activations need no statistics."""
    from _box_score_head import box_score_head

    from onnxptq.pipeline.calibrate import calibrate_once
    from onnxptq.pipeline.guard import CalibrationCapture

    rng = np.random.default_rng(0)
    data = [{"x": rng.uniform(0.0, 1.0, size=(1, 4, 8, 8)).astype(np.float32)} for _ in range(4)]
    calibrated = calibrate_once(box_score_head(2, 6, next_channels=3), get_preset(preset), data)
    capture = CalibrationCapture(calibrated.prepared, calibrated.plan, 4)
    ops = {node.op_type for nodes in capture.nodes.values() for node in nodes}
    assert capture.fetched and ops == ({"AveragePool"} if pooled else {"Slice"}), ops


def test_the_guards_block_run_session_runs_at_the_calibrations_level(monkeypatch):
    """The retry of a flagged block-format tensor with blocks along another axis fetches block runs
    from a float session of its own: at level "all" (the calibration's, whose runs seed the single
    positions), so a convolutional model's four runs keep their NCHWc kernels; single positions
    fetched by the guard itself stay at "basic" (its smaller session)."""
    import onnxptq.pipeline.guard as guard
    from _box_score_head import box_score_head

    levels = []
    real = guard.open_session
    monkeypatch.setattr(guard, "open_session", lambda *a, **k: levels.append(k.get("optimization")) or real(*a, **k))
    model = box_score_head(2, 6, hw=64)
    x = np.random.default_rng(0).uniform(0.0, 1.0, size=(1, 4, 64, 64)).astype(np.float32)
    runs = guard._tensor_values(model, ["y"], [{"x": x}], {"y": {1}}, run=sub.RUN)
    points = guard._tensor_values(model, ["y"], [{"x": x}], {"y": {1}})
    assert levels == ["all", "basic"]
    assert runs["y"].shape[1] == points["y"].shape[1] == 8  # every channel, either way


@pytest.mark.parametrize("element", ["fp8_e4m3", "fp8_e5m2", "fp6_e3m2", "fp6_e2m3", "fp4_e2m1"])
def test_half_even_fp_elements_by_cast_are_the_arithmetics(element, monkeypatch):
    """MX fake quantization with FP elements and half-even rounding rounds its float32 quotients by
    a cast to the ml_dtypes type (formats/mx.py ``_half_even_by_cast``): bit for bit the frexp/rint
    arithmetic, on the grid's midpoints (ties) in several binades, saturating and non-finite
    values, for every exponent rule."""
    import onnxptq.formats.mx as mx

    fmt = mx.ELEMENT_FORMATS[element]
    rng = np.random.default_rng(4)
    grid = np.unique(mx.quantize_elements(np.linspace(0, fmt.max_norm, 4001), fmt, 2))
    ties = ((grid[1:] + grid[:-1]) / 2).astype(np.float32)
    x = np.concatenate([rng.normal(size=8192) * rng.choice([1e-6, 1e-2, 1.0, 1e2, 1e5], 8192),
                        ties, -ties, ties * 2.0**-5, ties * 2.0**7, [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, 3e38]])
    x = np.resize(x.astype(np.float32), (len(x) // 32 + 1) * 32).reshape(-1, 32)
    for search in (0, 2, 3):
        got = {}
        for cast in (True, False):
            monkeypatch.setattr(mx, "CAST_HALF_EVEN", cast)
            got[cast] = mx.fake_quantize(x, element_dtype=element, axis=1, block_size=32, rounding_mode=2, scale_search=search)
        assert got[True].tobytes() == got[False].tobytes(), search
    quotients = np.concatenate([ties, -ties]).astype(np.float64)
    assert mx._half_even_by_cast(quotients, fmt).tobytes() == mx.quantize_elements(quotients, fmt, 2).tobytes()
