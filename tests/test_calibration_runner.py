"""The streaming runner: augmented model, tensor selection, feeds, and a run on PP-OCRv4 rec."""

from __future__ import annotations

import logging

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq.calibration.collectors import HistogramCollector, MinMaxCollector
from onnxptq.calibration.methods import compute_range, make_collector
from onnxptq.calibration.runner import augment_model, collect


def small_model(opset: int) -> onnx.ModelProto:
    """x -> Relu -> r -> Mul(w) -> m -> If(cond){ inner = Neg(m) } else { inner2 = Abs(m) } -> y.

    ``r``/``m`` have no value_info (intermediate, untyped), ``w`` is an initializer, ``cond`` a
    graph input that is not float, the If bodies hold tensors that only extra outputs can pass out.
    """
    then_g = helper.make_graph(
        [helper.make_node("Neg", ["m"], ["inner"])], "then", [], [helper.make_tensor_value_info("inner", TensorProto.FLOAT, None)]
    )
    else_g = helper.make_graph(
        [helper.make_node("Abs", ["m"], ["inner2"])], "else", [], [helper.make_tensor_value_info("inner2", TensorProto.FLOAT, None)]
    )
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Mul", ["r", "w"], ["m"]),
        helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g),
    ]
    graph = helper.make_graph(
        nodes,
        "small",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 4]),
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 4])],
        [numpy_helper.from_array(np.array([1.0, -2.0, 0.5, 3.0], np.float32), "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def make_feeds(n: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [
        {"x": rng.normal(0, 1 + i, (3, 4)).astype(np.float32), "cond": np.array(i % 2 == 0)} for i in range(n)
    ]


def expected(feeds):
    w = np.array([1.0, -2.0, 0.5, 3.0], np.float32)
    xs = np.concatenate([f["x"] for f in feeds])
    r = np.maximum(xs, 0)
    m = r * w
    ys = [-(np.maximum(f["x"], 0) * w) if f["cond"] else np.abs(np.maximum(f["x"], 0) * w) for f in feeds]
    return {"x": xs, "r": r, "m": m, "y": np.concatenate(ys), "w": w}


@pytest.mark.parametrize("opset", [11, 13, 18, 21])
@pytest.mark.parametrize("in_graph", [True, False])
def test_small_model_ranges_exact(opset, in_graph):
    model = small_model(opset)
    feeds = make_feeds(5)
    specs = {"x": "minmax", "r": MinMaxCollector, "m": "percentile", "y": {"method": "entropy"}, "w": "minmax"}
    out = collect(model, specs, feeds, minmax_in_graph=in_graph)
    assert set(out) == set(specs)
    ref = expected(feeds)
    for name, values in ref.items():
        assert (out[name].min, out[name].max) == (float(values.min()), float(values.max())), name
    assert isinstance(out["m"], HistogramCollector) and out["m"].hist.counts.sum() == ref["m"].size
    assert out["y"].name == "y" and out["r"].name == "r"
    # moving average = mean of per-feed extremes
    per_feed = [np.maximum(f["x"], 0) for f in feeds]
    ma = compute_range(out["r"], "minmax", moving_average=True)
    assert ma == pytest.approx((np.mean([p.min() for p in per_feed]), np.mean([p.max() for p in per_feed])))
    assert compute_range(out["m"], "percentile", percentile=100.0) == pytest.approx(
        (float(ref["m"].min()), float(ref["m"].max())), abs=out["m"].hist.width
    )


def test_augment_model_exposes_exactly_requested():
    model = small_model(13)
    aug, names = augment_model(model, ["r", "y"], ["m"])
    assert [o.name for o in aug.graph.output] == names == ["r", "y", "m__onnxptq_calib_min", "m__onnxptq_calib_max"]
    assert [o.name for o in model.graph.output] == ["y"]  # input model untouched
    ops = [n.op_type for n in aug.graph.node]
    assert ops == ["Relu", "Mul", "ReduceMin", "ReduceMax", "If"]  # reductions right after the producer


def test_if_branch_tensors_are_collected_and_a_branch_never_taken_stays_empty():
    """Body tensors leave their branch as extra outputs; the other branch yields an empty one."""
    model = small_model(13)
    feeds = make_feeds(4)  # cond alternates: True, False, True, False
    stats = collect(model, {"inner": "minmax", "inner2": "minmax"}, feeds)
    w = np.array([1.0, -2.0, 0.5, 3.0], np.float32)
    ms = [np.maximum(f["x"], 0) * w for f in feeds]
    assert stats["inner"].min == pytest.approx(float(min((-m).min() for m in ms[0::2])))
    assert stats["inner"].max == pytest.approx(float(max((-m).max() for m in ms[0::2])))
    assert stats["inner2"].max == pytest.approx(float(max(np.abs(m).max() for m in ms[1::2])))
    only_then = collect(model, {"inner2": "minmax"}, feeds[0::2])
    assert only_then["inner2"].empty  # never computed: no range is made up


def test_errors_name_the_tensor_or_feed():
    model = small_model(13)
    with pytest.raises(KeyError, match="'nope'"):
        collect(model, {"nope": "minmax"}, make_feeds(1))
    with pytest.raises(ValueError, match="lacks model input.*cond"):
        collect(model, {"r": "minmax"}, [{"x": np.ones((1, 4), np.float32)}])
    with pytest.raises(ValueError, match="no feed"):
        collect(model, {"r": "minmax"}, [])
    with pytest.raises(ValueError, match="without 'method'"):
        collect(model, {"r": {"num_bins": 10}}, make_feeds(1))
    with pytest.raises(TypeError, match="'cond'.*floating"):
        collect(model, {"cond": "minmax"}, make_feeds(1))


def test_reader_with_get_next_progress_and_max_batches(caplog):
    model = small_model(13)

    class Reader:
        def __init__(self) -> None:
            self.items = iter(make_feeds(6))

        def get_next(self):
            return next(self.items, None)

    with caplog.at_level(logging.INFO, logger="onnxptq.calibration.runner"):
        out = collect(model, {"r": "minmax"}, Reader(), log_every=2, max_batches=4)
    assert out["r"].batches == 4
    assert sum("calibration: 2 batches" in r.message or "calibration: 4 batches" in r.message for r in caplog.records) >= 2
    out = collect(model, {"r": "percentile"}, make_feeds(3), progress=True)
    assert out["r"].hist.counts.sum() == 9 * 4 - 0  # 3 feeds x 3 rows x 4 values


def test_collectors_continue_across_calls():
    model = small_model(13)
    first = collect(model, {"m": "percentile"}, make_feeds(2, seed=1))
    size = first["m"].hist.counts.size
    again = collect(model, {"m": first["m"]}, make_feeds(2, seed=1))
    assert again["m"] is first["m"]
    assert first["m"].hist.counts.sum() == 2 * 2 * 12 and first["m"].hist.counts.size >= size


@pytest.mark.slow
def test_pp_ocr_rec_ranges_finite_and_memory_flat():
    from testkit.models import model_path

    model = onnx.load(model_path("rec"))
    inferred = onnx.shape_inference.infer_shapes(model)
    float_out = {vi.name for vi in list(inferred.graph.value_info) + list(inferred.graph.output)
                 if vi.type.tensor_type.elem_type == TensorProto.FLOAT}
    names = [o for n in model.graph.node if n.op_type != "Constant" for o in n.output if o in float_out]
    assert len(names) > 300
    hist_names = names[::20]  # a spread of histogram tensors keeps the test fast
    specs = {n: ("percentile" if n in hist_names else "minmax") for n in names}
    specs["x"] = "minmax"
    rng = np.random.default_rng(0)

    def feeds(k: int):
        for _ in range(k):
            yield {"x": rng.uniform(-1, 1, (1, 3, 48, 320)).astype(np.float32)}

    out = collect(model, specs, feeds(3), intra_op_num_threads=1)
    for name in names:
        lo, hi = compute_range(out[name], "percentile" if name in hist_names else "minmax")
        assert np.isfinite(lo) and np.isfinite(hi) and lo <= hi, name
        assert not out[name].empty, name
    sizes = {n: out[n].hist.counts.size for n in hist_names}
    assert all(s <= out[n].hist.max_bins for n, s in sizes.items())
    # 50 more batches into the same collectors: histogram arrays stay within their bound and
    # (random inputs of the same distribution) keep their size.
    more = collect(model, {n: out[n] for n in hist_names}, feeds(50), intra_op_num_threads=1)
    for n in hist_names:
        assert more[n].hist.counts.size <= more[n].hist.max_bins
        assert more[n].hist.counts.size <= 2 * sizes[n], (n, sizes[n], more[n].hist.counts.size)
        assert more[n].batches == 53
