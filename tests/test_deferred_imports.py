"""sympy is imported only where something reads it (onnxptq/deferred.py, issue 26 item 4).

onnx-ir 1.1 imports sympy (~34 MiB resident, ~0.25 s) at its top for symbolic-dimension arithmetic a
quantization never does. Each check runs in a fresh interpreter: the test process may hold sympy already.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import onnxptq

ROOT = Path(__file__).resolve().parents[1]


def _run(code: str) -> str:
    env_path = f"{Path(onnxptq.__file__).resolve().parents[1]}:{ROOT}"  # the onnxptq this test imported
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": env_path, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_a_quantization_does_not_import_sympy() -> None:
    """A8W8 on a small opset-11 Conv model (the converter, the passes, calibration, the floor): no sympy."""
    out = _run("""
        import sys
        import numpy as np
        import onnx
        from onnx import TensorProto, helper, numpy_helper
        import onnxptq

        rng = np.random.default_rng(0)
        w = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w")
        nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
                 helper.make_node("ReduceMean", ["r"], ["y"], axes=[2, 3], keepdims=0)]
        graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])], [w])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)], ir_version=7)
        feeds = [{"x": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)} for _ in range(16)]
        result = onnxptq.quantize(model, "A8W8", feeds)
        assert any(n.op_type == "QuantizeLinear" for n in result.model.graph.node)
        print("loaded", sorted(m for m in sys.modules if m == "sympy.core" or m.startswith("mpmath"))[:3])
        """)
    assert "loaded []" in out, out


def test_sympy_still_answers_when_read() -> None:
    """A stand-in answers for the real module: sympy itself, its submodules, onnx-ir's symbolic dims."""
    out = _run("""
        import sys
        import onnxptq.api
        import onnx_ir as ir
        assert "sympy.core" not in sys.modules
        print(ir.SymbolicDim("N") * 2 + 1)
        import sympy
        from sympy import Symbol
        import sympy.core.numbers
        print(sympy.Integer(2) + Symbol("x"), type(sys.modules["sympy"]).__name__, sympy.core.numbers.Integer(3))
        """)
    assert out.split() == ["2*N", "+", "1", "x", "+", "2", "module", "3"], out
