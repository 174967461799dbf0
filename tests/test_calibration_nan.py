"""Calibration of tensors that hold NaN by design (issue 27 item 3).

In-graph ``ReduceMin``/``ReduceMax``/``TopK`` propagate NaN, so a reduced tensor whose feeds all hold
a NaN somewhere had no statistics at all (caustic-nmr's ``pred_mean``, padded with NaN per residue).
The runner now moves such a tensor to the fetched path on its first non-finite run and reads that run
again, so its range is the finite range of every feed: the references here are ``np.nanmin`` /
``np.nanmax`` over the feeds and the collectors of ``minmax_in_graph=False``.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq.calibration import runner
from onnxptq.calibration.collectors import MinMaxCollector, PerChannelMinMaxCollector, TailCollector
from onnxptq.calibration.runner import collect
from onnxptq.errors import NonFiniteStatisticsError

L = 16


def _model(all_nan: bool = False) -> onnx.ModelProto:
    """x[N,4,16] + mask -> m (NaN where the mask is: part of every feed, or all of it) -> Transpose t
    [4,N,16] (samples on axis 1, so grouped runs split the fetched tensor on that axis) -> Relu y."""
    mask = np.zeros((4, L), np.float32)
    if all_nan:
        mask[:] = np.nan
    else:
        mask[0, 3] = mask[2, 11:] = np.nan  # padding: the last positions of one row, one in another
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "mask"], ["m"]),
         helper.make_node("Transpose", ["m"], ["t"], perm=[1, 0, 2]),
         helper.make_node("Relu", ["t"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 4, L])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, None, L])],
        [numpy_helper.from_array(mask, "mask")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _feeds(n: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": (rng.standard_normal((2, 4, L)) * (1 + i)).astype(np.float32)} for i in range(n)]


def _state(c: MinMaxCollector) -> tuple:
    return (c.min, c.max, c.batches, c.skipped_batches, c.nan_count, c.inf_count, c.batch_highs, c.batch_lows,
            c.quietest_peak)


@pytest.fixture(scope="module")
def model() -> onnx.ModelProto:
    return _model()


TENSORS = {"m": MinMaxCollector, "t": MinMaxCollector, "mt": lambda: TailCollector(min_batch_k=8),
           "tt": lambda: TailCollector(min_batch_k=8)}


def _with_tails(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with two Identity copies (``mt`` of m, ``tt`` of t) for tail collectors."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    out.graph.node.extend([helper.make_node("Identity", ["m"], ["mt"]), helper.make_node("Identity", ["t"], ["tt"])])
    return out


@pytest.mark.parametrize("max_group", [1, 8])
def test_nan_in_every_feed_gives_the_finite_range(model, max_group):
    """NaN in part of every feed: the range is nanmin/nanmax over all feeds, and every collector's
    state is the one of the NumPy path (minmax_in_graph=False), single or grouped runs."""
    feeds = _feeds(10)
    m = _with_tails(model)
    got = collect(m, TENSORS, feeds, max_group=max_group)
    ref = collect(m, TENSORS, feeds, minmax_in_graph=False, max_group=max_group)
    mask = _model().graph.initializer[0]
    values = np.stack([f["x"] + numpy_helper.to_array(mask) for f in feeds])
    for name in TENSORS:
        c = got[name]
        assert (c.min, c.max) == (float(np.nanmin(values)), float(np.nanmax(values))), name
        assert c.skipped_batches == 0 and c.batches == len(feeds), name
        assert c.nan_count == int(np.isnan(values).sum()), name
        s, r = _state(c), _state(ref[name])
        assert s[:2] + s[3:] == r[:2] + r[3:], name
        assert c.batch_min_sum == pytest.approx(ref[name].batch_min_sum) and c.batch_max_sum == pytest.approx(ref[name].batch_max_sum)
    for name in ("mt", "tt"):
        assert sorted(got[name].top) == sorted(ref[name].top) and sorted(got[name].bottom) == sorted(ref[name].bottom)
        assert got[name].count == ref[name].count == int(np.isfinite(values).sum())


def test_nan_appearing_in_a_grouped_run_recovers_those_feeds(model):
    """Clean feeds first (grouping decided), NaN from feed 5 on, in the middle of a group: the feeds
    of that group that held NaN are read again, the clean ones are not folded twice."""
    clean = _model(all_nan=False)
    mask = numpy_helper.to_array(clean.graph.initializer[0])
    mask_free = onnx.ModelProto()
    mask_free.CopyFrom(clean)
    mask_free.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.zeros_like(mask), "mask"))
    feeds = _feeds(12, seed=1)
    for f in feeds[5:]:
        f["x"][0, 1, 2] = np.nan  # one NaN in the first sample of each later feed
    got = collect(mask_free, {"m": MinMaxCollector, "t": MinMaxCollector}, feeds, max_group=4)
    ref = collect(mask_free, {"m": MinMaxCollector, "t": MinMaxCollector}, feeds, max_group=4, minmax_in_graph=False)
    values = np.stack([f["x"] for f in feeds])
    for name in ("m", "t"):
        c = got[name]
        assert (c.min, c.max) == (float(np.nanmin(values)), float(np.nanmax(values)))
        assert (c.batches, c.skipped_batches, c.nan_count) == (12, 0, 7)
        s, r = _state(c), _state(ref[name])
        assert s == r
        assert c.batch_min_sum == pytest.approx(ref[name].batch_min_sum)


def test_nan_free_model_builds_one_session(model, monkeypatch):
    """Without NaN nothing moves: one calibration session (besides the shape probe's), as before."""
    built = []
    real = runner._session
    monkeypatch.setattr(runner, "_session", lambda m, *a, **k: built.append(k.get("optimize", True)) or real(m, *a, **k))
    feeds = _feeds(6)
    for f in feeds:
        f["x"] = np.nan_to_num(f["x"])
    free = onnx.ModelProto()
    free.CopyFrom(model)
    free.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.zeros((4, L), np.float32), "mask"))
    collect(free, {"m": MinMaxCollector}, feeds)
    assert built.count(True) == 1
    built.clear()
    collect(model, {"m": MinMaxCollector}, feeds)
    assert built.count(True) == 2  # rebuilt once, on the first feed


def test_per_channel_keeps_only_the_first_feed_skipped(model):
    """A per-channel collector already folded the finite channels of the feed that showed the NaN:
    that feed stays skipped for it, every later feed reaches it whole."""
    feeds = _feeds(5)
    got = collect(model, {"m": lambda: PerChannelMinMaxCollector(axis=1)}, feeds, max_group=1)["m"]
    values = np.stack([f["x"] for f in feeds]) + numpy_helper.to_array(model.graph.initializer[0])
    assert got.skipped_batches == 1
    np.testing.assert_array_equal(got.channel_min, np.nanmin(values, axis=(0, 1, 3)))
    np.testing.assert_array_equal(got.channel_max, np.nanmax(values, axis=(0, 1, 3)))


def test_all_nan_tensor_raises_what_was_seen():
    """A tensor with no finite value at all still raises, saying NaN in every feed, not overflow."""
    with pytest.raises(NonFiniteStatisticsError) as err:
        collect(_model(all_nan=True), {"m": MinMaxCollector}, _feeds(3))
    text = str(err.value)
    assert "'m'" in text and "no finite value in any of the 3 calibration feed(s)" in text
    assert f"{3 * 2 * 4 * L} NaN and 0 Inf values" in text and "overflow" not in text


def test_float16_large_values_are_not_taken_for_nan(monkeypatch):
    """A float16 tensor whose finite values sum past 65504 is not mistaken for one holding NaN (its
    check sums x * 0), and one holding NaN gets its finite range too."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "mask"], ["m"]), helper.make_node("Relu", ["m"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [None, 4, L])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [None, 4, L])],
        [numpy_helper.from_array(np.zeros((4, L), np.float16), "mask")],
    )
    big = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    big.ir_version = 8
    rng = np.random.default_rng(3)
    feeds = [{"x": rng.uniform(3e4, 6e4, (2, 4, L)).astype(np.float16)} for _ in range(4)]
    built = []
    real = runner._session
    monkeypatch.setattr(runner, "_session", lambda m, *a, **k: built.append(k.get("optimize", True)) or real(m, *a, **k))
    got = collect(big, {"m": MinMaxCollector}, feeds)["m"]
    values = np.stack([f["x"] for f in feeds]).astype(np.float32)
    assert built.count(True) == 1 and got.skipped_batches == 0
    assert (got.min, got.max) == (float(values.min()), float(values.max()))
    for f in feeds:
        f["x"][1, 2, 5] = np.nan
    got = collect(big, {"m": MinMaxCollector}, feeds)["m"]
    assert (got.min, got.max) == (float(np.nanmin(values * np.where(np.isnan(np.stack([f["x"] for f in feeds])), np.nan, 1))),
                                  float(np.nanmax(np.stack([f["x"] for f in feeds]).astype(np.float32))))
    assert (got.nan_count, got.skipped_batches, got.batches) == (4, 0, 4)


def test_a_tensor_empty_on_every_feed_is_no_nan(caplog):
    """An empty Slice (RivaGAN's encoder, round 19) reduces in the graph to (+inf, -inf): FP16's range check
    raised NonFiniteStatisticsError ("overflows") on it; it holds no value, so it has no range and no error."""
    import logging

    import onnxptq

    inits = [numpy_helper.from_array(np.array([v], np.int64), n) for n, v in (("s", 4), ("e", 4), ("ax", 1))]
    inits.append(numpy_helper.from_array(np.random.default_rng(0).random((8, 8), np.float32), "W"))
    graph = helper.make_graph(
        [helper.make_node("Slice", ["x", "s", "e", "ax"], ["empty"]),
         helper.make_node("Concat", ["x", "empty"], ["cat"], axis=1),
         helper.make_node("Concat", ["cat", "cat"], ["cat2"], axis=1),
         helper.make_node("MatMul", ["cat2", "W"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    feeds = [{"x": np.random.default_rng(i).random((1, 4), np.float32)} for i in range(12)]
    with caplog.at_level(logging.WARNING):
        result = onnxptq.quantize(model, "FP16", data=feeds)
    assert result.floor is not None and result.floor.ok
    assert not any("overflow" in r.getMessage() for r in caplog.records)
