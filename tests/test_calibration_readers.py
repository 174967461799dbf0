"""Calibration data readers: every source kind, batching, re-reading, and every error message."""

from __future__ import annotations

import logging

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq.calibration import readers
from onnxptq.calibration.readers import (
    CalibrationDataError,
    EmptyCalibrationDataError,
    FeedDtypeError,
    FeedNameError,
    FeedRankError,
    FeedShapeError,
    ModelInput,
    ModelInputs,
    OneShotSourceError,
    as_feed_iterator,
    check_feed,
)

from _counting_reader import CountingReader


def _model(
    inputs: list[tuple[str, int, list | None]], with_init_input: bool = False, ir_version: int = 8
) -> onnx.ModelProto:
    """A model that passes its inputs through Identity nodes; enough for input inspection."""
    vis = [
        helper.make_tensor_value_info(n, t, s) if s is not None else helper.make_tensor_value_info(n, t, None)
        for n, t, s in inputs
    ]
    nodes = [helper.make_node("Identity", [n], [f"{n}_out"]) for n, _, _ in inputs]
    outs = [helper.make_tensor_value_info(f"{n}_out", t, None) for n, t, _ in inputs]
    inits = []
    if with_init_input:
        inits = [numpy_helper.from_array(np.ones(2, np.float32), "w")]
        vis.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, [2]))
        nodes.append(helper.make_node("Identity", ["w"], ["w_out"]))
        outs.append(helper.make_tensor_value_info("w_out", TensorProto.FLOAT, [2]))
    graph = helper.make_graph(nodes, "g", vis, outs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = ir_version
    return model


@pytest.fixture
def one() -> ModelInputs:
    """Single float32 input x: [N, 3, 4]."""
    return ModelInputs.from_model(_model([("x", TensorProto.FLOAT, ["N", 3, 4])]))


@pytest.fixture
def two() -> ModelInputs:
    """Inputs a: float32 [N, 2] and ids: int64 [N]."""
    return ModelInputs.from_model(_model([("a", TensorProto.FLOAT, ["N", 2]), ("ids", TensorProto.INT64, ["N"])]))


def _x(n: int, start: int = 0) -> np.ndarray:
    return (np.arange(n * 12, dtype=np.float32) + start * 12).reshape(n, 3, 4)


def _two(n: int) -> dict[str, np.ndarray]:
    return {"a": np.arange(2 * n, dtype=np.float32).reshape(n, 2), "ids": np.arange(n, dtype=np.int64)}


class GetNextReader:
    """A plain object with get_next(), as users write them."""

    def __init__(self, feeds):
        self._feeds = list(feeds)
        self._it = iter(self._feeds)

    def get_next(self):
        return next(self._it, None)


class RewindReader(GetNextReader):
    def rewind(self):
        self._it = iter(self._feeds)


def _stack(feeds, name="x"):
    return np.concatenate([f[name] for f in feeds])


# --- ModelInputs ----------------------------------------------------------------------------------


def test_model_inputs_from_model_drops_initializers_and_marks_dynamic_dims():
    model = _model(
        [("x", TensorProto.FLOAT, ["N", 3, -1, 0]), ("h", TensorProto.FLOAT16, [1, 8]), ("s", TensorProto.INT64, None)],
        with_init_input=True,
        ir_version=3,
    )
    inputs = ModelInputs.from_model(model)
    assert inputs.names == ["x", "h", "s"]
    assert inputs[0] == ModelInput("x", np.dtype(np.float32), (None, 3, None, None))
    assert inputs.by_name("h").dtype == np.float16 and inputs.by_name("h").shape == (1, 8)
    assert inputs.by_name("s").shape is None and inputs.by_name("s").rank is None
    assert len(inputs) == 3 and [i.name for i in inputs] == inputs.names
    assert inputs[0].describe() == "x: float32 [?, 3, ?, ?]"


def test_model_inputs_of_the_real_models():
    from testkit.models import model_path

    cls = ModelInputs.from_model(model_path("cls"))  # a path works too; its batch dim is -1
    assert list(cls) == [ModelInput("x", np.dtype(np.float32), (None, 3, None, None))]
    rec = ModelInputs.from_model(onnx.load(str(model_path("rec"))))
    assert rec.names == ["x"] and rec[0].shape == (None, 3, None, None)


# --- sources --------------------------------------------------------------------------------------


def test_get_next_reader(one):
    feeds = list(as_feed_iterator(GetNextReader([{"x": _x(2)}, {"x": _x(3, 2)}]), one))
    assert [f["x"].shape[0] for f in feeds] == [2, 3]
    assert np.array_equal(_stack(feeds), _x(5))


def test_onnxruntime_calibration_data_reader_used_as_is(one):
    from onnxruntime.quantization import CalibrationDataReader

    class OrtReader(CalibrationDataReader):
        def __init__(self):
            self.it = iter([{"x": _x(1, i)} for i in range(4)])

        def get_next(self):
            return next(self.it, None)

    feeds = list(as_feed_iterator(OrtReader(), one))
    assert np.array_equal(_stack(feeds), _x(4))


def test_iterables_of_feeds(one):
    listed = [{"x": _x(1, i)} for i in range(3)]
    assert np.array_equal(_stack(as_feed_iterator(listed, one)), _x(3))
    gen = ({"x": _x(1, i)} for i in range(3))
    assert np.array_equal(_stack(as_feed_iterator(gen, one)), _x(3))
    assert np.array_equal(_stack(as_feed_iterator(tuple(listed), one)), _x(3))


def test_numpy_array_one_sample_per_feed_or_batches(one):
    data = _x(5)
    feeds = list(as_feed_iterator(data, one))
    assert [f["x"].shape for f in feeds] == [(1, 3, 4)] * 5
    feeds = list(as_feed_iterator(data, one, batch_size=2))
    assert [f["x"].shape[0] for f in feeds] == [2, 2, 1]
    assert np.array_equal(_stack(feeds), data)


def test_dict_of_arrays_multi_input(two):
    feeds = list(as_feed_iterator(_two(5), two, batch_size=4))
    assert [(f["a"].shape, f["ids"].shape) for f in feeds] == [((4, 2), (4,)), ((1, 2), (1,))]
    assert np.array_equal(_stack(feeds, "ids"), np.arange(5))


@pytest.mark.parametrize("compressed", [False, True])
def test_single_npz_streamed_in_batches(tmp_path, two, monkeypatch, compressed):
    path = tmp_path / "calib.npz"
    (np.savez_compressed if compressed else np.savez)(path, **_two(7))
    # The members are decoded from the zip stream block by block, never with np.load.
    monkeypatch.setattr(np, "load", lambda *a, **k: pytest.fail("npz must be streamed, not np.load-ed"))
    feeds = list(as_feed_iterator(path, two, batch_size=3))
    assert [f["a"].shape[0] for f in feeds] == [3, 3, 1]
    assert np.array_equal(_stack(feeds, "a"), _two(7)["a"])
    assert np.array_equal(_stack(feeds, "ids"), np.arange(7))
    assert all(f["a"].flags.writeable for f in feeds)
    assert len(list(as_feed_iterator(str(path), two))) == 7  # str paths, one sample per feed


def test_single_npy_file(tmp_path, one):
    np.save(tmp_path / "x.npy", _x(4))
    feeds = list(as_feed_iterator(tmp_path / "x.npy", one, batch_size=3))
    assert [f["x"].shape[0] for f in feeds] == [3, 1]
    assert np.array_equal(_stack(feeds), _x(4))
    assert not isinstance(feeds[0]["x"], np.memmap)  # memory-mapped on disk, copied per batch


def test_folder_of_npy_files_read_file_by_file(tmp_path, one):
    for i in range(3):
        np.save(tmp_path / f"s{i}.npy", _x(2, 2 * i))
    (tmp_path / "README.txt").write_text("not data")
    it = as_feed_iterator(tmp_path, one)
    first = next(it)
    assert np.array_equal(first["x"], _x(2))
    np.save(tmp_path / "s1.npy", _x(2, 100))  # replaced after the first file was read...
    assert np.array_equal(next(it)["x"], _x(2, 100))  # ...and the new content is what comes next
    assert len(list(it)) == 1


def test_folder_per_sample_arrays_get_a_batch_axis(tmp_path, one):
    for i in range(5):
        np.save(tmp_path / f"{i:03d}.npy", _x(1, i)[0])  # [3, 4], one sample per file
    feeds = list(as_feed_iterator(tmp_path, one, batch_size=2))
    assert [f["x"].shape for f in feeds] == [(2, 3, 4), (2, 3, 4), (1, 3, 4)]
    assert np.array_equal(_stack(feeds), _x(5))


def test_folder_of_npz_files_multi_input(tmp_path, two):
    for i in range(2):
        np.savez(tmp_path / f"part{i}.npz", **_two(3))
    feeds = list(as_feed_iterator(tmp_path, two))
    assert len(feeds) == 2 and feeds[0]["ids"].tolist() == [0, 1, 2]


def test_rebatching_a_reader(one):
    reader = GetNextReader([{"x": _x(3)}, {"x": _x(1, 3)}, {"x": _x(4, 4)}])
    feeds = list(as_feed_iterator(reader, one, batch_size=2))
    assert [f["x"].shape[0] for f in feeds] == [2, 2, 2, 2]
    assert np.array_equal(_stack(feeds), _x(8))


def test_fp32_data_is_cast_for_an_fp16_input(tmp_path):
    inputs = ModelInputs.from_model(_model([("h", TensorProto.FLOAT16, ["N", 2])]))
    data = np.full((3, 2), 1 / 3, np.float32)
    for source in ([{"h": data}], data, {"h": data}):
        feeds = list(as_feed_iterator(source, inputs))
        assert all(f["h"].dtype == np.float16 for f in feeds)
    np.savez(tmp_path / "h.npz", h=data)
    assert next(as_feed_iterator(tmp_path / "h.npz", inputs))["h"].dtype == np.float16


def test_fixed_batch_dimension(caplog):
    inputs = ModelInputs.from_model(_model([("x", TensorProto.FLOAT, [2, 3])]))
    data = np.zeros((5, 3), np.float32)
    with caplog.at_level(logging.WARNING, logger="onnxptq.calibration.readers"):
        feeds = list(as_feed_iterator(data, inputs))  # cut to the model's batch of 2
    assert [f["x"].shape[0] for f in feeds] == [2, 2]
    assert "dropping the last 1 sample(s)" in caplog.text
    with pytest.raises(FeedShapeError, match=r"batch_size=4 cannot be used: the model fixes the batch dimension \(axis 0\) at 2"):
        list(as_feed_iterator(data, inputs, batch_size=4))


def test_real_cls_model_runs_on_rendered_npz(tmp_path):
    pytest.importorskip("PIL")
    import onnxruntime as ort

    from testkit import ocr
    from testkit.models import model_path

    images, _ = ocr.render_cls(6, seed=0)
    path = ocr.save_npz(tmp_path / "cls.npz", images)
    inputs = ModelInputs.from_model(model_path("cls"))
    sess = ort.InferenceSession(str(model_path("cls")), providers=["CPUExecutionProvider"])
    outs = [sess.run(None, feed)[0] for feed in as_feed_iterator(path, inputs, batch_size=4)]
    assert [o.shape for o in outs] == [(4, 2), (2, 2)]


# --- errors ---------------------------------------------------------------------------------------


def test_unknown_and_missing_names_are_listed(two):
    with pytest.raises(FeedNameError) as err:
        check_feed({"a": np.zeros((1, 2), np.float32), "idz": np.zeros(1, np.int64)}, two, "reader R, feed #0")
    msg = str(err.value)
    assert msg.startswith("reader R, feed #0: unknown input name(s) ['idz'] and missing input(s) ['ids']")
    assert "the model expects ['a', 'ids'] (a: float32 [?, 2]; ids: int64 [?])" in msg
    with pytest.raises(FeedNameError, match=r"missing input\(s\) \['ids'\]; the model expects \['a', 'ids'\]"):
        list(as_feed_iterator([{"a": np.zeros((1, 2), np.float32)}], two))


def test_wrong_dtype(one, two):
    with pytest.raises(FeedDtypeError, match=r"src: input 'x' has dtype float64, the model expects float32; convert it with \.astype\(np\.float32\)"):
        check_feed({"x": np.zeros((1, 3, 4))}, one, "src")
    with pytest.raises(FeedDtypeError, match="input 'ids' has dtype int32, the model expects int64"):
        check_feed({"a": np.zeros((1, 2), np.float32), "ids": np.zeros(1, np.int32)}, two, "src")
    with pytest.raises(TypeError):  # FeedDtypeError is also a TypeError
        check_feed({"x": np.zeros((1, 3, 4), np.float16)}, one, "src")


def test_wrong_rank(one, tmp_path):
    with pytest.raises(FeedRankError, match=r"src: input 'x' has rank 2 \(shape \[3, 4\]\), the model expects rank 3 \(x: float32 \[\?, 3, 4\]\)"):
        check_feed({"x": np.zeros((3, 4), np.float32)}, one, "src")
    np.savez(tmp_path / "bad.npz", x=np.zeros((2, 1, 3, 4), np.float32))
    with pytest.raises(FeedRankError, match=r"file .*bad\.npz: input 'x' has rank 4"):
        list(as_feed_iterator(tmp_path / "bad.npz", one))
    np.savez(tmp_path / "scalar.npz", x=np.float32(1))
    with pytest.raises(FeedRankError, match="is a scalar; samples must lie along axis 0"):
        list(as_feed_iterator(tmp_path / "scalar.npz", one))


def test_wrong_fixed_dim(one):
    with pytest.raises(FeedShapeError, match=r"input 'x' has shape \[2, 3, 5\], but axis 2 of the model input is fixed at 4"):
        list(as_feed_iterator(np.zeros((2, 3, 5), np.float32), one))


def test_empty_sources_raise_value_error(one, tmp_path):
    for source, where in [
        (GetNextReader([]), "calibration data reader GetNextReader yielded no samples"),
        ([], "iterable of feeds \\(list\\) yielded no samples"),
        (np.zeros((0, 3, 4), np.float32), "numpy array of shape \\[0, 3, 4\\] yielded no samples"),
        (tmp_path, "folder .* holds no .npy or .npz files"),
    ]:
        with pytest.raises(ValueError, match="calibration data is empty: " + where):
            list(as_feed_iterator(source, one))
    np.savez(tmp_path / "empty.npz", x=np.zeros((0, 3, 4), np.float32))
    with pytest.raises(EmptyCalibrationDataError, match="empty.npz yielded no samples"):
        list(as_feed_iterator(tmp_path / "empty.npz", one))


def test_source_kind_errors(one, two, tmp_path):
    with pytest.raises(FeedNameError, match=r"a bare array can only feed a single-input model, but the model has inputs \['a', 'ids'\]"):
        list(as_feed_iterator(np.zeros((2, 2), np.float32), two))
    np.save(tmp_path / "a.npy", np.zeros((2, 2), np.float32))
    with pytest.raises(FeedNameError, match="a bare array can only feed a single-input model"):
        list(as_feed_iterator(tmp_path, two))
    with pytest.raises(TypeError, match="cannot read calibration data from int; pass an object with get_next"):
        as_feed_iterator(3, one)
    (tmp_path / "data.csv").write_text("1,2")
    with pytest.raises(CalibrationDataError, match=r"unsupported file type '\.csv'"):
        as_feed_iterator(tmp_path / "data.csv", one)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        as_feed_iterator(tmp_path / "nope.npz", one)
    (tmp_path / "broken.npz").write_bytes(b"not a zip")
    with pytest.raises(CalibrationDataError, match="not a valid .npz file"):
        list(as_feed_iterator(tmp_path / "broken.npz", one))
    with pytest.raises(CalibrationDataError, match=r"item #1: expected a dict of input name -> array, got list"):
        list(as_feed_iterator([{"x": _x(1)}, [_x(1)]], one))
    with pytest.raises(FeedShapeError, match="arrays hold different numbers of samples on axis 0: a: 3, ids: 2"):
        list(as_feed_iterator({"a": np.zeros((3, 2), np.float32), "ids": np.zeros(2, np.int64)}, two))
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        list(as_feed_iterator(_x(2), one, batch_size=0))


def test_rebatching_needs_a_shared_axis_0(two):
    feed = {"a": np.zeros((2, 2), np.float32), "ids": np.zeros(3, np.int64)}
    with pytest.raises(FeedShapeError, match=r"cannot re-batch a feed whose arrays do not share axis 0: a: \[2, 2\], ids: \[3\]"):
        list(as_feed_iterator([feed], two, batch_size=2))


# --- CountingReader -------------------------------------------------------------------------------


def test_counting_reader_rereads_a_folder(tmp_path, one):
    for i in range(3):
        np.save(tmp_path / f"{i}.npy", _x(2, 2 * i))
    reader = CountingReader(tmp_path, one, batch_size=4)
    assert reader.reiterable and reader.description == f"folder {tmp_path}"
    first = _stack(reader)
    assert (reader.passes, reader.feeds, reader.samples) == (1, 2, 6)
    assert np.array_equal(_stack(reader), first) and reader.passes == 2


def test_counting_reader_get_next_protocol_and_reset(one):
    reader = CountingReader(_x(3), one)
    got = []
    while (feed := reader.get_next()) is not None:
        got.append(feed)
    assert len(got) == 3 and reader.get_next() is None
    reader.reset()
    assert np.array_equal(reader.get_next()["x"], _x(1)) and reader.passes == 2 and reader.samples == 1


def test_counting_reader_rewinds_readers_that_can(one):
    reader = CountingReader(RewindReader([{"x": _x(1)}, {"x": _x(1, 1)}]), one)
    assert reader.reiterable
    assert len(list(reader)) == 2 and len(list(reader)) == 2


@pytest.mark.parametrize("make", [lambda: GetNextReader([{"x": _x(1)}]), lambda: iter([{"x": _x(1)}])])
def test_counting_reader_refuses_a_second_pass_over_one_shot_data(one, make):
    reader = CountingReader(make(), one)
    assert not reader.reiterable
    assert len(list(reader)) == 1
    with pytest.raises(OneShotSourceError, match="can be read only once"):
        list(reader)
    with pytest.raises(OneShotSourceError, match="pass a folder, an .npz file, an array or a list of feeds"):
        reader.reset()


def test_counting_reader_first_pass_of_one_shot_is_fine_via_get_next(one):
    reader = CountingReader(GetNextReader([{"x": _x(2)}]), one, batch_size=1)
    assert reader.get_next()["x"].shape == (1, 3, 4)
    assert reader.get_next()["x"].shape == (1, 3, 4)
    assert reader.get_next() is None
    assert (reader.feeds, reader.samples) == (2, 2)


def test_module_exports():
    for name in ("as_feed_iterator", "check_feed", "ModelInputs", "CASTABLE"):
        assert hasattr(readers, name)
