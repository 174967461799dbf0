"""Peak memory of a quantization, second round: what the process kept that nothing needed (issue 26 item 4).

Held by the property that lowered PP-OCRv4 rec A8W8's peak (measured by bench/quantize.py, not here):

1. a session opened on the CPU provider keeps no copy of the serialized model (onnxruntime's
   ``InferenceSession`` held its bytes for a provider fallback the CPU provider never makes: the
   calibration session's augmented rec, 10.6 MiB, through every run); a session asked for another
   provider keeps them, so its fallback still works;
2. in the ``onnxptq`` command's process, threads share glibc's main malloc arena (what a
   session's threads allocated was freed into arenas of their own that no later stage reused:
   rec's repair peak 345-360 MiB, 307 with one arena), unless the user set ``MALLOC_ARENA_MAX``;
   the library called from a user's script leaves the allocator as it is (a process-wide choice
   is the process owner's).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import tracemalloc
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq.sessions import open_session

ROOT = Path(__file__).resolve().parents[1]
GLIBC = sys.platform.startswith("linux") and os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc")


def _matmul_model(rows: int = 1024, cols: int = 1024) -> onnx.ModelProto:
    """x[1, rows] @ W[rows, cols]: a model whose serialized form is its 4 MiB weight."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((rows, cols)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, rows])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, cols])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def test_a_cpu_session_keeps_no_copy_of_the_serialized_model():
    model = _matmul_model()
    size = model.ByteSize()
    x = {"x": np.ones((1, 1024), np.float32)}
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        session = open_session(model)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # the serialized model (a Python bytes object, traced) is gone once the session exists
    assert held < size / 4, f"the session holds {held} Python bytes for a {size}-byte model"
    # and the session still runs, with the model's values
    np.testing.assert_allclose(session.run(None, x)[0], x["x"] @ numpy_helper.to_array(model.graph.initializer[0]),
                               rtol=1e-4, atol=1e-3)


def test_a_session_that_may_fall_back_keeps_its_bytes():
    from onnxptq.sessions import _without_model_bytes

    class Fake:  # a session as onnxruntime's wrapper made it, bytes and all
        _model_bytes = b"model"

    assert _without_model_bytes(Fake(), ["CPUExecutionProvider"])._model_bytes is None
    kept = _without_model_bytes(Fake(), [("CUDAExecutionProvider", {}), "CPUExecutionProvider"])
    assert kept._model_bytes == b"model"  # the CUDA provider may fail and fall back: it needs them


#: run in a fresh interpreter: quantize a small built model, then count glibc's arenas once
#: threads have allocated (``malloc_info``'s ``<heap nr=...>`` entries)
_CHILD = textwrap.dedent("""
    import ctypes, os, sys, tempfile, threading
    import numpy as np
    sys.path.insert(0, {tests!r})
    from test_quantize_memory_arena import _matmul_model
    import onnxptq
    model = _matmul_model(64, 32)
    if {command!r}:  # the onnxptq command on the saved model (it owns its process)
        import onnx, onnxptq.cli
        path = os.path.join(tempfile.mkdtemp(), "m.onnx")
        onnx.save(model, path)
        assert onnxptq.cli.main(["inspect", path]) == 0
    else:  # the library, from a user's script
        data = [{{"x": np.random.default_rng(i).standard_normal((1, 64)).astype(np.float32)}} for i in range(12)]
        onnxptq.quantize(model, "A8W8", data)
    barrier, keep = threading.Barrier(4), []
    def work():
        keep.append([np.ones(4096) for _ in range(8)])  # 32 KiB each: malloc, below the mmap threshold
        barrier.wait()
    threads = [threading.Thread(target=work) for _ in range(4)]
    [t.start() for t in threads]; [t.join() for t in threads]
    libc = ctypes.CDLL("libc.so.6")
    libc.fopen.restype = ctypes.c_void_p
    path = tempfile.mktemp()
    fp = libc.fopen(path.encode(), b"w")
    libc.malloc_info(0, ctypes.c_void_p(fp)); libc.fclose(ctypes.c_void_p(fp))
    print(open(path).read().count("<heap nr="))
""")


def _arenas_after(command: bool) -> int:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT), env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", _CHILD.format(tests=str(ROOT / "tests"), command=command)],
                         capture_output=True, text=True, env=env, timeout=120, check=True)
    return int(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not GLIBC, reason="glibc's malloc arenas")
def test_the_command_has_its_threads_share_one_malloc_arena():
    assert _arenas_after(command=True) == 1


@pytest.mark.skipif(not GLIBC, reason="glibc's malloc arenas")
def test_the_library_leaves_the_applications_allocator_alone():
    # four threads allocating at once each get an arena of their own under glibc's defaults
    assert _arenas_after(command=False) > 1


def test_the_users_malloc_arena_max_stands(monkeypatch):
    from onnxptq import memory

    monkeypatch.setenv("MALLOC_ARENA_MAX", "8")
    assert memory.share_malloc_arena.__wrapped__() is False
