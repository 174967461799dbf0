"""Histograms of subnormal values: a grid a few 1e-43 wide (calibration/collectors.grid_positions).

PP-OCRv4 rec with ``weight_minmse=True`` raised "'list' argument must have no negative elements"
from ``np.bincount``: a weight row whose values are all subnormal got a grid whose factor
``n / (2 · threshold)`` overflowed float32, so ``0 · inf`` was NaN and its bins negative. The bins
are checked against ``np.histogram`` in float64 on the collector's own edges (an independent
reference), the float32 path is unchanged where its factor fits, and a built Conv model with such a
row quantizes with ``weight_minmse`` (on the earlier code it raised).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import onnxptq
from onnxptq.calibration import methods
from onnxptq.calibration.collectors import HistogramCollector, grid_positions
from onnxptq.config.presets import get_preset


def _reference_counts(x: np.ndarray, c: HistogramCollector) -> np.ndarray:
    """np.histogram of ``x`` on the collector's edges, in float64 (the right edge counted in the last bin)."""
    counts, _ = np.histogram(x.astype(np.float64), bins=c.hist.edges)
    return counts


def test_subnormal_values_land_in_their_bins():
    x = np.array([1e-40, -1e-40, 5e-41, 0.0, 2e-40, -2e-40, 3e-42], np.float32)
    c = HistogramCollector(num_bins=64)
    c.update(x)
    assert c.hist.counts.sum() == x.size
    np.testing.assert_array_equal(c.hist.counts, _reference_counts(x, c))
    lo, hi = methods.compute_range(c, "minmse", symmetric=True, qmin=-127, qmax=127)
    assert 0 < hi <= 2.1e-40 and lo == -hi


def test_the_float32_grid_is_kept_where_its_factor_fits():
    x = np.random.default_rng(0).standard_normal(10_000).astype(np.float32)
    n, t = 4096, 4.5
    expected = x * np.float32(n / (2 * t)) + np.float32(n / 2)
    got = grid_positions(x, n, t)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, expected)
    c = HistogramCollector(num_bins=256)
    c.update(x)
    np.testing.assert_array_equal(c.hist.counts, _reference_counts(x, c))


def _conv_with_a_subnormal_row() -> onnx.ModelProto:
    rng = np.random.default_rng(1)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    w[2] = np.float32(1e-40) * np.sign(w[2])  # one output channel of subnormal weights
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["y"], ["z"], name="relu")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4, 8, 8])], [numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def test_weight_minmse_quantizes_a_conv_with_a_subnormal_weight_row():
    cfg = get_preset("A8W8")
    cfg = cfg.replace(weight_minmse=True, repair=False, calibration=dataclasses.replace(cfg.calibration, progress=False))
    data = [{"x": np.random.default_rng(i).standard_normal((1, 3, 8, 8)).astype(np.float32)} for i in range(4)]
    result = onnxptq.quantize(_conv_with_a_subnormal_row(), cfg, data)
    assert "conv" in result.plan.nodes
    scale = result.params["w"].scale
    assert np.all(np.isfinite(scale)) and np.all(scale > 0)
