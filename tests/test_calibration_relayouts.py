"""A relayout of a calibrated tensor takes its source's statistics, with no reduction of its own
(calibration/relayouts.py), and the calibration graph's constants are shared initializers
(reductions.SharedConstants): the same statistics, a smaller calibration graph."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq.calibration import runner
from onnxptq.calibration.relayouts import relayout_sources
from onnxptq.calibration.reductions import SharedConstants, plan_reduction
from onnxptq.calibration.collectors import TailCollector
from onnxptq.config.presets import get_preset
from onnxptq.pipeline.calibrate import calibrate_once
from testkit import ocr
from testkit.models import model_path


def _state(c) -> dict:
    """Everything a collector holds that a range is computed from (tails as multisets)."""
    out = {k: getattr(c, k) for k in ("min", "max", "count", "batches", "batch_min_sum", "batch_max_sum",
                                       "batch_highs", "batch_lows", "quietest_peak", "nan_count", "inf_count",
                                       "skipped_batches", "top_floor", "bottom_ceiling") if hasattr(c, k)}
    for side in ("top", "bottom"):
        if hasattr(c, side):
            out[side] = np.sort(getattr(c, side)).tolist()
    for grid in ("grid", "hist"):
        if hasattr(c, grid):
            g = getattr(c, grid)
            out[grid] = (g.width, g.counts.tolist(), g.pending_zeros)
    return out


@pytest.fixture(scope="module")
def rec_lines() -> list[dict[str, np.ndarray]]:
    images, _ = ocr.render_lines(4, 11, characters=ocr.load_characters(model_path("rec")))
    return [{"x": img[None]} for img in images]


def test_rec_relayouts_take_their_sources_statistics_without_reductions(rec_lines, monkeypatch):
    """PP-OCRv4 rec A8W8: its attention's Transpose/Squeeze/Reshape outputs are calibrated with the same
    percentile tails as their sources. The runner is asked for the sources only, and each relayout's
    collector equals the one a reduction of its own gives (runner.collect on that tensor directly)."""
    asked: list[set[str]] = []
    real = runner.collect

    def spy(model, tensors, feeds, **kw):
        asked.append(set(tensors))
        return real(model, tensors, feeds, **kw)

    monkeypatch.setattr(runner, "collect", spy)
    cal = calibrate_once(str(model_path("rec")), get_preset("A8W8").replace(repair=False), rec_lines, eval_samples=2)
    producer = {o: n for n in cal.prepared.graph.node for o in n.output}
    spec = {n: cal.plan.tensors[n].collector_spec(cal.config.calibration.num_bins) for n in cal.stats}
    relayouts = {n: producer[n].input[0] for n in cal.stats if n in producer
                 and producer[n].op_type in ("Transpose", "Squeeze", "Reshape") and producer[n].input[0] in cal.stats
                 and spec[n] == spec[producer[n].input[0]]}
    assert len(relayouts) >= 8, relayouts  # the attention blocks' token views
    roots = set()
    for src in relayouts.values():
        while src in relayouts:  # a relayout of a relayout: the chain's first tensor is reduced
            src = relayouts[src]
        roots.add(src)
    assert len(asked) == 1 and not set(relayouts) & asked[0] and roots <= asked[0]
    monkeypatch.setattr(runner, "collect", real)
    own = real(cal.prepared, {n: spec[n] for n in relayouts}, rec_lines)  # each relayout reduced in the graph itself (main's way)
    for name in relayouts:
        assert type(own[name]) is type(cal.stats[name]) and cal.stats[name].name == name
        assert _state(own[name]) == _state(cal.stats[name]), name


def _chain() -> onnx.GraphProto:
    """x -> Relu -> a -> Reshape -> b -> Transpose -> c -> Identity -> d;  a -> Slice -> e."""
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Reshape", ["a", "shape"], ["b"]),
             helper.make_node("Transpose", ["b"], ["c"], perm=[1, 0]), helper.make_node("Identity", ["c"], ["d"]),
             helper.make_node("Slice", ["a", "starts", "ends"], ["e"])]
    inits = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
             (("shape", [4, -1]), ("starts", [0]), ("ends", [1]))]
    return helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4096])],
                             [helper.make_tensor_value_info("d", TensorProto.FLOAT, None)], inits)


def test_relayout_sources_walk_chains_to_the_first_calibrated_tensor_of_the_same_spec():
    p = {"method": "percentile", "percentile": 99.999}
    m = {"method": "minmax"}
    graph = _chain()
    # b is not calibrated: d walks through c (calibrated, same spec) to its root a
    assert relayout_sources(graph, {"a": p, "c": p, "d": p, "e": p}) == {"c": "a", "d": "a"}
    # a spec that differs stops the walk: c is its own source, d shares c's
    assert relayout_sources(graph, {"a": m, "c": p, "d": p}) == {"d": "c"}
    # a selection (Slice) is not a relayout; x (a graph input) is no tensor's relayout source here
    assert relayout_sources(graph, {"x": p, "e": p}) == {}


def test_shared_constants_give_the_same_reductions_with_fewer_nodes():
    """Two tail reductions lifted together: one initializer per distinct constant, no Constant node left,
    and onnxruntime computes the same outputs as with the reductions' own Constant nodes."""
    graph = _chain()
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    # sizes not declared: the chunked tails, the reduction with the most constants
    reds = {n: plan_reduction(n, TailCollector(name=n), 18, TensorProto.FLOAT) for n in ("a", "c")}
    plain, names = runner.augment_model(model, [], reductions=reds)
    shared = SharedConstants()
    lifted = [shared.lift(r.nodes) for r in reds.values()]
    constants = sum(n.op_type == "Constant" for r in reds.values() for n in r.nodes)
    assert constants >= 10 and not any(n.op_type == "Constant" for nodes in lifted for n in nodes)
    assert 0 < len(shared.initializers) < constants
    assert not any(n.op_type == "Constant" for n in plain.graph.node)  # augment_model lifts them itself
    import onnxruntime as ort

    feed = {"x": np.random.default_rng(0).standard_normal((2, 4096)).astype(np.float32),
            runner.ROWS_INPUT: np.array([1, -1], np.int64)}
    got = ort.InferenceSession(plain.SerializeToString(), providers=["CPUExecutionProvider"]).run(names, feed)
    own = onnx.ModelProto()
    own.CopyFrom(model)
    for r in reds.values():
        own.graph.node.extend(r.nodes)
        own.graph.output.extend([onnx.ValueInfoProto(name=o) for o in r.outputs])
    own.graph.input.append(helper.make_tensor_value_info(runner.ROWS_INPUT, TensorProto.INT64, [2]))
    want = ort.InferenceSession(own.SerializeToString(), providers=["CPUExecutionProvider"]).run(names, feed)
    for a, b in zip(got, want):
        assert np.array_equal(a, b)


def _relu_model(declared: list, actual_batch_symbolic: bool = False) -> onnx.ModelProto:
    """x -> Relu -> y with ``y``'s shape declared as ``declared`` (value_info, possibly wrong)."""
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["y"], ["z"])], "relu",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64, 40, 40])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
                              value_info=[helper.make_tensor_value_info("y", TensorProto.FLOAT, declared)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("declared, batch", [([1, 64, 40, 40], 1), ([2, 64, 40, 40], 2),
                                             ([1, 64, 20, 20], 1)])  # the last one lies: recovered
def test_tails_of_declared_sizes_equal_the_numpy_path(declared, batch, caplog):
    """A tail tensor whose declared shape fixes its size gets constant k and chunk counts (fewer nodes);
    its statistics equal NumPy's over the whole tensor (``minmax_in_graph=False``), with feeds of one
    sample or two, and where the declared shape is wrong (the feed is read again whole)."""
    model = _relu_model(declared)
    rng = np.random.default_rng(3)
    feeds = [{"x": rng.standard_normal((batch, 64, 40, 40)).astype(np.float32) * (1 + i)} for i in range(3)]
    spec = {"y": lambda: TailCollector(name="y")}
    got = runner.collect(model, spec, feeds, max_group=1)["y"]
    want = runner.collect(model, spec, feeds, minmax_in_graph=False)["y"]
    assert _state(got) == _state(want)
    static = plan_reduction("y", TailCollector(name="y"), 18, TensorProto.FLOAT, dims=declared)
    # a symbolic sample axis (it may hold more than a feed's samples) or size: computed in the graph
    for dims in (["N", 64, 40, 40], ["N", 64, None, None]):
        dynamic = plan_reduction("y", TailCollector(name="y"), 18, TensorProto.FLOAT, dims=dims)
        assert len(static.nodes) < len(dynamic.nodes) - 3
    assert ("read whole from now on" in caplog.text) == (declared[-1] == 20)
