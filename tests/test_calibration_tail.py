"""The tail collector for high percentiles and the in-graph reductions that feed collectors.

The tail collector must give the range the full histogram gives (the histogram is the reference
semantics, checked against onnxruntime in test_calibration_collectors), and must say so when the
tail it kept is too shallow for the percentile asked.
"""

from __future__ import annotations

import functools
import logging

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnxptq.calibration.collectors import HistogramCollector, PerChannelMinMaxCollector, TailCollector
from onnxptq.calibration.methods import compute_range, make_collector
from onnxptq.calibration.runner import collect


def _batches(kind: int, rng: np.random.Generator, count: int) -> list[np.ndarray]:
    out = []
    for b in range(count):
        n = int(rng.integers(1, 120_000))
        scale = float(rng.choice([1e-3, 1.0, 50.0])) * (1 + b * rng.random())
        if kind == 0:
            x = rng.normal(0, scale, n)
        elif kind == 1:  # one-signed (post-ReLU)
            x = np.maximum(rng.normal(0, scale, n), 0)
        elif kind == 2:  # heavy tails
            x = rng.standard_cauchy(n) * scale
        elif kind == 3:  # values on bin edges
            x = np.round(rng.normal(0, 4, n)) * 0.25
        else:  # zeros first (grid not yet started), then one-signed negative
            x = np.zeros(n) if b < 2 else -np.abs(rng.laplace(0, scale, n))
        out.append(x.astype(np.float32))
    return out


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("percentile", [99.999, 99.9999])
def test_tail_collector_reproduces_histogram_percentile(symmetric, percentile):
    rng = np.random.default_rng(int(percentile * 10) + symmetric)
    exact = 0
    trials = 60
    for trial in range(trials):
        hist = make_collector("percentile", symmetric=symmetric)
        tail = make_collector("percentile", symmetric=symmetric, percentile=percentile)
        assert isinstance(hist, HistogramCollector) and isinstance(tail, TailCollector)
        for x in _batches(trial % 5, rng, int(rng.integers(1, 25))):
            hist.update(x)
            tail.update(x)
        ref = compute_range(hist, "percentile", percentile=percentile, symmetric=symmetric)
        got = compute_range(tail, "percentile", percentile=percentile, symmetric=symmetric)
        # Same grid, same bins: equal, except where the float CDF of the histogram rounds at an
        # integer rank (values on bin edges), which moves the answer by one bin.
        assert np.allclose(got, ref, rtol=0, atol=hist.hist.width * (1 + 1e-6)), (trial, ref, got)
        exact += got == ref
        assert (tail.min, tail.max, tail.count) == (hist.min, hist.max, hist.count)
        assert tail.top.size <= 2 * tail.capacity and tail.bottom.size <= 2 * tail.capacity
    assert exact >= 0.9 * trials


def test_lower_percentiles_keep_the_histogram():
    assert isinstance(make_collector("percentile", percentile=99.99), HistogramCollector)
    assert isinstance(make_collector("percentile", percentile=99.999, symmetric=True), TailCollector)
    # asymmetric: the cut is split over both sides
    assert isinstance(make_collector("percentile", percentile=99.998, symmetric=False), TailCollector)
    assert isinstance(make_collector("percentile"), HistogramCollector)  # no percentile given
    with pytest.raises(TypeError, match="needs a histogram"):
        compute_range(make_collector("percentile", percentile=99.999), "entropy")


def test_shallow_tail_is_detected_and_bounded(caplog):
    rng = np.random.default_rng(5)
    batches = [rng.normal(0, 1, 50_000).astype(np.float32) for _ in range(20)]
    hist = make_collector("percentile")
    for x in batches:
        hist.update(x)
    ref = compute_range(hist, "percentile", percentile=99.9)
    # 99.9 needs 1000 values per side; keep 64 per batch and 200 per side: too shallow.
    shallow = TailCollector(num_bins=4096, tail_fraction=1e-3, min_batch_k=64, capacity=100, name="deep")
    shallow.grid = type(hist.hist)(4096, 4 * 4096)
    for x in batches:
        n = x.size
        shallow.update_tails(np.sort(x)[-64:], np.sort(x)[:64], n, float(x.min()), float(x.max()))
    with caplog.at_level(logging.WARNING, logger="onnxptq.calibration.methods"):
        got = compute_range(shallow, "percentile", percentile=99.9)
    assert any("'deep'" in r.message and "deeper" in r.message for r in caplog.records)
    assert got[1] >= ref[1] - 1e-12  # never below the true threshold: the nearest supported bound
    # A shallower percentile with the same small buffers: exact, no warning (rank 1.5 of 1e6
    # values: not an integer rank, where the histogram's float CDF would decide the tie).
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="onnxptq.calibration.methods"):
        got = compute_range(shallow, "percentile", percentile=99.99985)
    assert got == compute_range(hist, "percentile", percentile=99.99985)
    assert not caplog.records


def test_tail_collector_edge_cases():
    zeros = make_collector("percentile", percentile=99.999, name="z")
    zeros.update(np.zeros(100, np.float32))
    assert compute_range(zeros, "percentile", percentile=99.999) == (0.0, 0.0)
    c = make_collector("percentile", percentile=99.999, symmetric=False)
    h = make_collector("percentile", symmetric=False)
    for col in (c, h):
        col.update(np.array([np.nan, np.inf, -1.0, 2.0, 0.5], np.float32))
    assert (c.nan_count, c.inf_count, c.count) == (1, 1, 3)
    assert compute_range(c, "percentile", percentile=99.999, symmetric=False) == compute_range(
        h, "percentile", percentile=99.999, symmetric=False)
    c.update_tails(np.array([np.inf]), np.array([1.0]), 10, 0.0, np.inf)  # in-graph: NaN/Inf batch skipped
    assert c.skipped_batches == 1 and c.count == 3
    a, b = (make_collector("percentile", percentile=99.999) for _ in range(2))
    rng = np.random.default_rng(0)
    xs = [rng.normal(0, 3, 10_000).astype(np.float32) for _ in range(4)]
    a.update(xs[0]); a.update(xs[1]); b.update(xs[2]); b.update(xs[3])
    a.merge(b)
    whole = make_collector("percentile", percentile=99.999)
    for x in xs:
        whole.update(x)
    assert compute_range(a, "percentile", percentile=99.999) == compute_range(whole, "percentile", percentile=99.999)
    with pytest.raises(TypeError, match="cannot merge"):
        a.merge(make_collector("minmax"))


def _conv_model(opset: int, dtype: int = TensorProto.FLOAT) -> onnx.ModelProto:
    """x[N,4,H,W] -> Relu -> r -> Mul(-1.5) -> m -> Transpose -> y[N,H,W,4]."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Constant", [], ["k"], value=helper.make_tensor("k", dtype, [], [-1.5])),
        helper.make_node("Mul", ["r", "k"], ["m"]),
        helper.make_node("Transpose", ["m"], ["y"], perm=[0, 2, 3, 1]),
    ]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", dtype, [None, 4, None, None])],
                              [helper.make_tensor_value_info("y", dtype, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


@pytest.mark.parametrize("opset", [13, 18, 21])
@pytest.mark.parametrize("dtype", [TensorProto.FLOAT, TensorProto.FLOAT16])
def test_in_graph_reductions_equal_numpy_path(opset, dtype, caplog):
    rng = np.random.default_rng(opset)
    np_dtype = np.float32 if dtype == TensorProto.FLOAT else np.float16
    feeds = [{"x": np.clip(rng.standard_cauchy((2, 4, 5 + i, 7)) * (1 + i), -6e4, 6e4).astype(np_dtype)} for i in range(6)]
    specs = {
        "r": {"method": "percentile", "percentile": 99.999, "symmetric": False},
        "m": {"method": "percentile", "percentile": 99.9999, "symmetric": True},
        "y": functools.partial(PerChannelMinMaxCollector, 3),
        "x": functools.partial(PerChannelMinMaxCollector, 1),
    }
    # Batches of 280-560 values are cut to their 64 largest/smallest in the graph.
    with caplog.at_level(logging.WARNING):
        graph_out = collect(_conv_model(opset, dtype), specs, feeds, minmax_in_graph=True)
    numpy_out = collect(_conv_model(opset, dtype), specs, feeds, minmax_in_graph=False)
    # float16: onnxruntime's CPU runs float16 Mul in float32 and drops the Cast pair around it when
    # the reduction casts back, so in-graph values may skip one float16 rounding of the producer.
    tol = 0 if dtype == TensorProto.FLOAT else 2.0**-10
    for name in ("r", "m"):
        g, n = graph_out[name], numpy_out[name]
        assert isinstance(g, TailCollector)
        assert g.count == n.count
        np.testing.assert_allclose([g.min, g.max], [n.min, n.max], rtol=tol, atol=0)
        np.testing.assert_allclose(np.sort(g.top), np.sort(n.top), rtol=tol, atol=0)
        np.testing.assert_allclose(np.sort(g.bottom), np.sort(n.bottom), rtol=tol, atol=0)
        sym = name == "m"
        p = 99.9999 if sym else 99.999
        got = compute_range(g, "percentile", percentile=p, symmetric=sym)
        ref = compute_range(n, "percentile", percentile=p, symmetric=sym)
        np.testing.assert_allclose(got, ref, rtol=tol, atol=g.grid.width * (tol > 0))
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]  # batches were cut, yet exact
    for name in ("x", "y"):
        g, n = graph_out[name], numpy_out[name]
        assert np.array_equal(g.channel_min, n.channel_min) and np.array_equal(g.channel_max, n.channel_max)
        assert g.channel_min.shape == (4,) and (g.min, g.max) == (n.min, n.max)


def test_in_graph_tail_cut_per_batch_matches_numpy():
    """Batches larger than k are cut to their top-k inside the graph: same values as NumPy's cut."""
    rng = np.random.default_rng(1)
    feeds = [{"x": rng.normal(0, 1, (1, 4, 100, 100)).astype(np.float32)} for _ in range(3)]
    def factory():
        return TailCollector(num_bins=4096, tail_fraction=1e-5, min_batch_k=16, capacity=40)

    out = collect(_conv_model(18), {"m": factory}, feeds)
    c = out["m"]
    assert c.top_floor > -np.inf and c.bottom_ceiling < np.inf
    m = [np.maximum(f["x"], 0) * np.float32(-1.5) for f in feeds]
    expected_top = np.sort(np.concatenate([np.sort(v.ravel())[-16:] for v in m]))
    assert np.array_equal(np.sort(c.top), expected_top)
    ref = make_collector("percentile", num_bins=2048)
    for v in m:
        ref.update(v)
    assert compute_range(c, "percentile", percentile=99.9999) == compute_range(ref, "percentile", percentile=99.9999)
