"""The streaming path for models whose weights live in external data (issue 13: models over 2 GB).

A small model behaves like a large one once ``external.STREAM_THRESHOLD`` is lowered: the weights
stay in their file from load to save, emit writes the quantized ones straight into the output's
data file, and both files appear together (atomically). The >2 GB round trip and its peak RSS are
measured by ``bench/large_model.py`` (too slow and too large for the suite).
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import onnxptq
from onnxptq.errors import OnnxptqError
from onnxptq.graph import external
from onnxptq.pipeline import complete as complete_stage

DIM = 256
LAYERS = 12
WEIGHT_BYTES = DIM * DIM * 4


def _chain(folder: Path) -> Path:
    """``x -> MatMul(W0) -> Relu -> ... -> MatMul(W7) -> Add(C)``, every tensor in one external file
    (C, a float constant the integer presets leave float, is copied unchanged)."""
    rng = np.random.default_rng(0)
    inits, nodes, offset = [], [], 0
    arrays = [(f"W{i}", (rng.standard_normal((DIM, DIM)) / np.sqrt(DIM)).astype(np.float32)) for i in range(LAYERS)]
    arrays.append(("C", rng.standard_normal((DIM,)).astype(np.float32)))
    with open(folder / "weights.bin", "wb") as data:
        for name, array in arrays:
            data.write(array.tobytes())
            tensor = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=list(array.shape))
            tensor.data_location = TensorProto.EXTERNAL
            for key, value in (("location", "weights.bin"), ("offset", str(offset)), ("length", str(array.nbytes))):
                entry = tensor.external_data.add()
                entry.key, entry.value = key, value
            offset += array.nbytes
            inits.append(tensor)
    for i in range(LAYERS):
        src = "x" if i == 0 else f"r{i - 1}"
        nodes.append(helper.make_node("MatMul", [src, f"W{i}"], [f"m{i}"], name=f"matmul{i}"))
        if i < LAYERS - 1:
            nodes.append(helper.make_node("Relu", [f"m{i}"], [f"r{i}"], name=f"relu{i}"))
    nodes.append(helper.make_node("Add", [f"m{LAYERS - 1}", "C"], ["y"], name="add"))
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", DIM])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", DIM])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = folder / "chain.onnx"
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="module")
def chain(tmp_path_factory) -> Path:
    return _chain(tmp_path_factory.mktemp("streaming-input"))


def _feeds() -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(1)
    return [{"x": rng.standard_normal((2, DIM)).astype(np.float32)} for _ in range(4)]


def _run(path: Path, feed: dict[str, np.ndarray]) -> np.ndarray:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feed)[0]


def _values(path: Path) -> dict[str, np.ndarray]:
    model = onnx.load(str(path))
    return {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}


@pytest.mark.parametrize("preset", ["BF16", "A8W8", "A8W4", "MX9"])
def test_streaming_matches_the_in_memory_path_bit_for_bit(chain, tmp_path, monkeypatch, preset):
    in_memory = tmp_path / "memory" / "q.onnx"
    streamed = tmp_path / "stream" / "q.onnx"
    in_memory.parent.mkdir(), streamed.parent.mkdir()
    onnxptq.quantize(str(chain), preset, _feeds(), output=in_memory, eval_samples=1)
    assert not (in_memory.parent / "q.onnx.data").exists()  # small: the in-memory path, one file

    monkeypatch.setattr(external, "STREAM_THRESHOLD", 0)
    sinks = []
    real_sink = external.sink

    def spy(path):
        sinks.append(Path(path))
        return real_sink(path)

    monkeypatch.setattr(external, "sink", spy)
    result = onnxptq.quantize(str(chain), preset, _feeds(), output=streamed, eval_samples=1)

    # The streaming path was taken: emit wrote into a temporary data file beside the output, and
    # the result points at the final one; the message holds no weight bytes.
    assert len(sinks) == 1 and sinks[0].parent == streamed.parent and sinks[0].name.endswith(".tmp")
    assert sorted(p.name for p in streamed.parent.iterdir()) == ["q.onnx", "q.onnx.data"]
    big = [t for t in result.model.graph.initializer if int(np.prod(t.dims)) >= DIM * DIM]
    # One initializer per weight, or (packed block formats) one code stream all weights of a layout
    # share: either way every weight element is in the external file, none in the message.
    assert sum(int(np.prod(t.dims)) for t in big) >= LAYERS * DIM * DIM
    assert all(external.is_external(t) and not t.raw_data for t in big)
    assert {e.value for t in big for e in t.external_data if e.key == "location"} == {"q.onnx.data"}
    assert len(result.model.SerializeToString()) < WEIGHT_BYTES  # far below one weight: no bytes held

    # Same model: every initializer and the outputs equal, bit for bit.
    want, got = _values(in_memory), _values(streamed)
    assert want.keys() == got.keys()
    for name in want:
        assert want[name].dtype == got[name].dtype and np.array_equal(want[name], got[name]), name
    feed = _feeds()[0]
    np.testing.assert_array_equal(_run(in_memory, feed), _run(streamed, feed))
    assert result.metrics["y"]["cosine"] > 0.99


def test_streaming_holds_no_copy_of_the_weights(chain, tmp_path, monkeypatch):
    """Python-side allocations at their peak stay a few tensors' worth (the float reference's
    temporaries while one weight is fake-quantized), whatever the number of layers; the in-memory
    path reads the whole file into bytes and serializes the model for each session."""
    monkeypatch.setattr(external, "STREAM_THRESHOLD", 0)
    weights = LAYERS * WEIGHT_BYTES
    tracemalloc.start()
    try:
        onnxptq.quantize(str(chain), "BF16", _feeds(), output=tmp_path / "q.onnx", eval_samples=1)
        _, streamed_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        monkeypatch.setattr(external, "STREAM_THRESHOLD", 2**62)
        onnxptq.quantize(str(chain), "BF16", _feeds(), output=tmp_path / "m.onnx", eval_samples=1)
        _, memory_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert memory_peak > weights > 2 * 6 * WEIGHT_BYTES - 1  # the bound below tells the two paths apart
    assert streamed_peak < 6 * WEIGHT_BYTES, (streamed_peak, WEIGHT_BYTES, memory_peak)


def test_a_failed_streaming_quantization_leaves_nothing(chain, tmp_path, monkeypatch):
    monkeypatch.setattr(external, "STREAM_THRESHOLD", 0)

    def broken(model, path, source, *_):
        assert Path(path).exists() and any(p.name.startswith(".q.onnx.data.") for p in tmp_path.iterdir())
        raise RuntimeError(f"{source}: simulated failure after the data file was written")

    monkeypatch.setattr(complete_stage, "finish_saved", broken)
    with pytest.raises(RuntimeError, match="simulated failure"):
        onnxptq.quantize(str(chain), "BF16", _feeds(), output=tmp_path / "q.onnx", eval_samples=1)
    assert list(tmp_path.iterdir()) == []


def test_streaming_refuses_the_report_by_name(chain, tmp_path, monkeypatch):
    monkeypatch.setattr(external, "STREAM_THRESHOLD", 0)
    with pytest.raises(OnnxptqError, match="streaming path"):
        onnxptq.quantize(str(chain), "BF16", _feeds(), output=tmp_path / "q.onnx", report_path=tmp_path / "r.html")
    assert list(tmp_path.iterdir()) == []


def test_tensor_values_maps_the_file_and_names_a_short_one(chain, tmp_path):
    model = onnx.load(str(chain), load_external_data=False)
    w0 = model.graph.initializer[0]
    with pytest.raises(external.ExternalDataError, match="W0"):
        external.tensor_values(w0)  # no folder set: off the streaming path
    with external.streaming(chain.parent):
        values = external.tensor_values(w0)
        assert isinstance(values, np.memmap) and not values.flags.writeable
        np.testing.assert_array_equal(values, onnx.numpy_helper.to_array(onnx.load(str(chain)).graph.initializer[0]))
    (tmp_path / "weights.bin").write_bytes(b"\0" * 16)
    with external.streaming(tmp_path), pytest.raises(external.ExternalDataError, match="W0.*16 bytes"):
        external.tensor_values(w0)


def test_external_bytes_counts_the_data_and_skips_damaged_entries(chain, tmp_path):
    assert external.external_bytes(chain) == LAYERS * WEIGHT_BYTES + DIM * 4
    model = onnx.load(str(chain), load_external_data=False)
    for entry in model.graph.initializer[0].external_data:
        if entry.key == "length":
            entry.value = "not a number"
    onnx.save(model, str(tmp_path / "damaged.onnx"))
    assert external.external_bytes(tmp_path / "damaged.onnx") == (LAYERS - 1) * WEIGHT_BYTES + DIM * 4
    (tmp_path / "junk.onnx").write_bytes(b"\x00\xff not a model")
    assert external.external_bytes(tmp_path / "junk.onnx") == 0
    assert not external.should_stream(str(chain), None)  # no output: nothing to stream into


@pytest.mark.parametrize("preset", ["BFP16", "MX9", "MX4", "MXINT8", "MXFP4", "MXFP6_E3M2"])
@pytest.mark.parametrize("axis", [0, 1])
def test_weights_fake_quantized_in_slices_are_bit_identical(monkeypatch, preset, axis):
    """Emit fake-quantizes a large weight slice by slice (the references' temporaries were 3.9x the
    weights for MX9 on the >2 GB model); blocks never straddle slices, so nothing changes."""
    from onnxptq.config.presets import resolve_config
    from onnxptq.formats import fake_quantize
    from onnxptq.pipeline import emit

    monkeypatch.setattr(emit, "SLICE_BYTES", 4096)
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((96, 80)) * np.exp(rng.standard_normal((96, 80)) * 3)).astype(np.float32)
    quant = resolve_config(preset).weight
    attrs = {**quant.attr_dict, "axis": axis}
    want = fake_quantize(x, quant.format, **attrs)
    got = emit.fake_quantize_in_slices(x, quant.format, attrs)
    assert got.dtype == want.dtype and np.array_equal(got, want, equal_nan=True)
    for fmt in ("bf16", "fp16", "fp8_e4m3", "fp8_e5m2"):
        assert np.array_equal(emit.fake_quantize_in_slices(x, fmt, {}), fake_quantize(x, fmt), equal_nan=True), fmt


def test_tensor_values_reads_packed_int4_and_sink_writes_it_back(tmp_path):
    """int4 is stored two values a byte: the sink packs it, tensor_values unpacks it (a memory map
    of one byte per value would read garbage and the wrong length)."""
    import ml_dtypes

    values = np.arange(-8, 7, dtype=np.int8).reshape(3, 5).astype(ml_dtypes.int4)
    with external.sink(tmp_path / "w.data") as target:
        tensor = external.store(np.tile(values, (40, 40)), "W")  # 9600 bytes unpacked: stored
    assert external.is_external(tensor) and target.bytes == 120 * 200 // 2
    with external.streaming(tmp_path):
        np.testing.assert_array_equal(external.tensor_values(tensor), np.tile(values, (40, 40)))
