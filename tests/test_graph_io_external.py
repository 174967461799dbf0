"""Models past protobuf's 2 GB limit: how the size is asked, and a by-path copy that leaves the
model intact (the >2 GB round trip itself is measured by bench/large_model.py: too slow here)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from google.protobuf.message import EncodeError

from conftest import make_small_cnn
from onnxptq.graph import io


class _TooLarge:
    """Stands for a >2 GB ModelProto: upb's ByteSize raises instead of returning the size."""

    def ByteSize(self) -> int:
        raise EncodeError("Failed to serialize proto")


def test_exceeds_protobuf_limit_when_byte_size_raises():
    assert io.exceeds_protobuf_limit(_TooLarge()) is True  # type: ignore[arg-type]
    model = make_small_cnn()
    assert io.exceeds_protobuf_limit(model) is False
    assert io.exceeds_protobuf_limit(model, limit=16) is True


def test_write_externalized_leaves_the_model_intact_and_loads_by_path(tmp_path):
    model = make_small_cnn()
    before = model.SerializeToString()
    path = io.write_externalized(model, tmp_path, threshold=64)
    assert model.SerializeToString() == before
    on_disk = onnx.load(str(path), load_external_data=False)
    external = [t.name for t in on_disk.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    assert "W2" in external and (tmp_path / "model.onnx.data").stat().st_size > 0
    onnx.checker.check_model(str(path))
    x = np.random.default_rng(0).normal(size=(1, 3, 16, 16)).astype(np.float32)
    by_path = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    in_memory = ort.InferenceSession(before, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(by_path, in_memory)


def test_write_externalized_keeps_an_input_typed_that_is_also_an_untyped_output(tmp_path):
    """Calibration fetches a graph input as an extra, untyped output (calibration/runner.py): past protobuf's limit
    that model is written by path, and onnx-ir (one value per name) took the input's type from the untyped output,
    so onnxruntime refused the file ("Model input (x) does not have type information")."""
    model = make_small_cnn()
    model.graph.output.append(onnx.helper.make_empty_tensor_value_info("x"))
    before = model.SerializeToString()
    path = io.write_externalized(model, tmp_path, threshold=64)
    assert model.SerializeToString() == before
    assert onnx.load(str(path), load_external_data=False).graph.input[0].type == model.graph.input[0].type
    x = np.random.default_rng(0).normal(size=(1, 3, 16, 16)).astype(np.float32)
    by_path = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    in_memory = ort.InferenceSession(before, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_array_equal(by_path[-1], x)
    np.testing.assert_array_equal(by_path[0], in_memory[0])


def test_save_model_with_external_data_leaves_the_model_intact(tmp_path):
    """The saved copy points at ``<name>.data`` (the final name, not the temporary one) and the
    caller's model keeps its bytes (onnx's save_as_external_data would have stripped them)."""
    model = make_small_cnn()
    before = model.SerializeToString()
    out = io.save_model(model, tmp_path / "m.onnx", external_data=True)
    assert model.SerializeToString() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "m.onnx.data"]
    on_disk = onnx.load(str(out), load_external_data=False)
    locations = {e.value for t in on_disk.graph.initializer for e in t.external_data if e.key == "location"}
    assert locations == {"m.onnx.data"}
    loaded = onnx.load(str(out))
    for a, b in zip(model.graph.initializer, loaded.graph.initializer):
        np.testing.assert_array_equal(onnx.numpy_helper.to_array(a), onnx.numpy_helper.to_array(b))


def test_save_model_with_external_data_writes_no_empty_data_file(tmp_path):
    model = make_small_cnn()
    for init in model.graph.initializer:  # all below the 1024-byte threshold
        init.CopyFrom(onnx.numpy_helper.from_array(np.zeros([1] * len(init.dims), np.float32), init.name))
    io.save_model(model, tmp_path / "m.onnx", external_data=True)
    assert [p.name for p in tmp_path.iterdir()] == ["m.onnx"]


def test_save_model_refuses_one_file_past_the_limit(tmp_path, monkeypatch):
    from onnxptq.errors import SaveError

    monkeypatch.setattr(io, "exceeds_protobuf_limit", lambda model, limit=io.PROTOBUF_LIMIT: True)
    with pytest.raises(SaveError, match="2 GB limit"):
        io.save_model(make_small_cnn(), tmp_path / "m.onnx", external_data=False)
    assert list(tmp_path.iterdir()) == []


_CAPPED = """
import resource, sys, tempfile
import numpy as np
import onnx_ir  # noqa: F401 - imported before the cap, as the pipeline has it
from onnx import helper, numpy_helper
from onnxptq.graph.io import write_externalized

dim, layers = 2048, 3  # 48 MiB of weights
inits = [numpy_helper.from_array(np.full((dim, dim), i, np.float32), f"W{i}") for i in range(layers)]
nodes = [helper.make_node("MatMul", ["x" if i == 0 else f"m{i - 1}", f"W{i}"], [f"m{i}"]) for i in range(layers)]
graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, [1, dim])],
                          [helper.make_tensor_value_info(f"m{layers - 1}", 1, [1, dim])], initializer=inits)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
del inits
size = [int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmSize")][0] * 1024
cap = size + 32 * 2**20  # less headroom than the weights: no second copy of them fits
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
with tempfile.TemporaryDirectory() as folder:
    write_externalized(model, folder)
print("ok")
"""


def test_write_externalized_needs_no_second_copy_of_the_weights():
    """Under an address-space cap with less headroom than the weights (48 MiB model, 32 MiB left)
    the by-path copy is written. The former way, moving each tensor's bytes out of the message
    and back, allocated them again in upb's arena, and upb answers a failed allocation with
    SIGSEGV: the 4th >2 GB run of bench/large_model.py, reproduced here (exit -11 at commit
    bafda26)."""
    import subprocess
    import sys
    from pathlib import Path

    src = Path(io.__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", _CAPPED], capture_output=True, text=True, timeout=120,
                          env={**__import__("os").environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", (proc.returncode, proc.stderr[-2000:])
