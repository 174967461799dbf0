"""The chunked in-graph tails (calibration/reductions.py ``_chunked_tails``) give a tail collector
exactly what a ``TopK`` over the whole tensor gave it: same values, same extremes, same batches
skipped, on the shapes that strain the argument (ties at the k-th value, a row not a multiple of
the chunk, rows shorter than a chunk, several feeds in one run, a NaN in one feed)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq.calibration import reductions
from onnxptq.calibration.collectors import TailCollector
from onnxptq.calibration.runner import augment_model, collect

#: per feed: (channels, height, width) of the calibrated tensors' input, from 11 values up
SHAPES = [(4, 128, 130), (3, 97, 229), (1, 1, 11), (2, 5, 7)]


def _model(declared: str, shape: tuple[int, int, int] = (1, 1, 1)) -> onnx.ModelProto:
    """x → Relu (ties at zero) and x → Round(x·4)/4 (ties everywhere) and x itself. ``declared``:
    the shapes the outputs declare, which pick the chunks: "none" (chunks of 64 and a rest sliced
    off), "symbolic" (the last axis read in the graph), "last" (the last axis known: a chunk that
    divides it), "static" (every axis known: a chunk that divides the row, or a rest)."""
    dims = {"none": None, "symbolic": ["n", "c", "h", "w"], "last": ["n", "c", "h", shape[2]],
            "static": [1, *shape]}[declared]
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Mul", ["x", "four"], ["x4"]), helper.make_node("Round", ["x4"], ["rd"]),
             helper.make_node("Div", ["rd", "four"], ["q"]), helper.make_node("Identity", ["x"], ["i"])]
    outs = [helper.make_tensor_value_info(t, TensorProto.FLOAT, dims) for t in ("r", "q", "i")]
    graph = helper.make_graph(nodes, "tails", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", "c", "h", "w"])], outs,
                              initializer=[helper.make_tensor("four", TensorProto.FLOAT, [], [4.0])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def _feeds(shape: tuple[int, int, int], count: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        x = rng.standard_cauchy((1, *shape)).astype(np.float32)
        x[..., ::3] = np.float32(2.5)  # a third of the values tie at one level inside the top tail
        if i == 1:
            x.flat[x.size // 3] = np.float32(1e4)  # one spike
        out.append({"x": x})
    return out


def _factory() -> TailCollector:
    return TailCollector(num_bins=4096, tail_fraction=1e-5, min_batch_k=64, capacity=300)


def _collect(model: onnx.ModelProto, feeds: list[dict[str, np.ndarray]], chunk_from: int) -> dict[str, TailCollector]:
    old = reductions.CHUNKED_TAILS_MIN
    reductions.CHUNKED_TAILS_MIN = chunk_from
    try:
        return collect(model, {t: _factory for t in ("r", "q", "i")}, feeds)
    finally:
        reductions.CHUNKED_TAILS_MIN = old


def _state(c: TailCollector) -> tuple:
    return (c.count, c.skipped_batches, c.min, c.max, c.top_floor, c.bottom_ceiling,
            np.sort(c.top).tobytes(), np.sort(c.bottom).tobytes(), np.signbit(np.sort(c.bottom)).tobytes())


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("declared", ["none", "symbolic", "last", "static"])
def test_chunked_tails_equal_whole_topk(shape, declared):
    feeds = _feeds(shape, 3, seed=sum(shape) + len(declared))
    model = _model(declared, shape)
    chunked = _collect(model, feeds, 0)  # every tensor chunked, whatever its size
    whole = _collect(model, feeds, 1 << 62)  # every tensor of known size: one TopK over it
    for name in ("r", "q", "i"):
        assert _state(chunked[name]) == _state(whole[name]), name
        n = int(np.prod(shape))
        k = min(n, max(64, n // chunked[name].batch_divisor))
        # the tails are the values themselves, not something near them
        fn = {"r": lambda x: np.maximum(x, 0), "q": lambda x: np.round(x * 4) / 4, "i": lambda x: x}[name]
        expected = np.sort(np.concatenate([np.sort(fn(f["x"]).ravel())[n - k:] for f in feeds]))
        assert np.array_equal(np.sort(chunked[name].top), expected[-chunked[name].top.size:])


def test_chunked_tails_chosen_by_size_and_run_grouped():
    """A tensor of declared size below CHUNKED_TAILS_MIN keeps the one TopK; above it (or of unknown
    size) the whole-row TopK is gone; grouped feeds (two per run) fold as single ones."""
    model = _model("static", (4, 128, 130))
    for dims, chunked, sliced in (([1, 4, 128, 130], True, False), ([1, 2, 5, 7], False, False), ([None, 4, 128, None], True, False),
                                  ([None, 3, 97, 229], True, False), ([1, 1, 65537], True, True), (None, True, True)):
        tail = _factory()
        aug, _ = augment_model(model, [], reductions={"r": reductions.plan_reduction("r", tail, 21, TensorProto.FLOAT, 0, None, dims)})
        ops = [(n.op_type, n.input[0]) for n in aug.graph.node if n.input]
        assert (("TopK", "r__onnxptq_rows") in ops) is not chunked, dims
        assert (("TopK", "r__onnxptq_tail_top_cand") in ops) is chunked, dims
        assert (("Slice", "r__onnxptq_rows") in ops) is sliced, dims
    feeds = _feeds((4, 128, 130), 4, seed=7)
    grouped = collect(_model("symbolic"), {t: _factory for t in ("r", "q", "i")}, feeds, max_group=2)
    single = collect(_model("symbolic"), {t: _factory for t in ("r", "q", "i")}, feeds, max_group=1)
    for name in ("r", "q", "i"):
        assert _state(grouped[name]) == _state(single[name])


def test_chunked_tails_see_a_feed_with_nan():
    """ReduceMax drops a NaN; the row's sum still says it: the tensor is read whole from that feed on
    (that feed read again, its NaN dropped alone), so the statistics are those of the NumPy path."""
    feeds = _feeds((4, 128, 130), 3, seed=3)
    feeds[1]["x"].flat[12345] = np.nan
    got = _collect(_model("symbolic"), feeds, 0)["i"]
    whole = collect(_model("symbolic"), {"i": _factory}, feeds, minmax_in_graph=False)["i"]
    assert got.skipped_batches == 0 and got.nan_count == 1 and got.count == 3 * 4 * 128 * 130 - 1
    assert _state(got) == _state(whole)


def test_symbolic_shapes_chunk_by_the_first_feed():
    """Where the declared shape leaves axes symbolic, the first feed's size (shape inference on its
    shapes) decides whether chunking pays: small maps keep the one TopK, large ones are chunked."""
    from onnxptq.calibration.runner import _first_feed_sizes

    model = _model("symbolic")
    small, big = _feeds((2, 5, 7), 1, seed=1)[0], _feeds((4, 128, 130), 1, seed=2)[0]
    assert _first_feed_sizes(model, small, ["r", "q"]) == {"r": 70, "q": 70}
    assert _first_feed_sizes(model, big, ["i"]) == {"i": 4 * 128 * 130}
    for hint, chunked in ((70, False), (4 * 128 * 130, True), (None, True)):
        red = reductions.plan_reduction("r", _factory(), 21, TensorProto.FLOAT, 0, None, [None, None, None, None], size_hint=hint)
        assert any(n.op_type == "ReduceMax" for n in red.nodes) is chunked, hint


def test_shape_probe_holds_no_large_weight_and_infers_the_same_sizes():
    """The first feed's sizes come from a probe without the large initializers (each becomes a typed
    graph input): the same sizes as with the weights, a fraction of the memory."""
    from onnx import helper
    from onnxptq.calibration.runner import _first_feed_sizes, shape_probe

    w = np.random.default_rng(0).standard_normal((130, 96)).astype(np.float32)
    model = helper.make_model(helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Reshape", ["y", "shape"], ["z"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "t", 130])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array([0, -1, 8], np.int64), "shape")]),
        opset_imports=[helper.make_opsetid("", 21)])
    probe = shape_probe(model)
    assert [i.name for i in probe.graph.initializer] == ["shape"]
    assert "w" in {i.name for i in probe.graph.input}
    assert probe.ByteSize() < w.nbytes // 10
    feed = {"x": np.zeros((2, 5, 130), np.float32)}
    assert _first_feed_sizes(model, feed, ["y", "z"]) == {"y": 5 * 96, "z": 5 * 96}
