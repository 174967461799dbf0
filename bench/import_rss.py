"""RSS after each heavy import on A8W8's path, in one fresh process (issue 26 item 4's import floor).

``python bench/import_rss.py`` imports, in order, what a PP-OCR cls/rec A8W8 quantize ends up holding
(numpy+onnx, onnxruntime, onnx_ir — which imports sympy at its top, onnx.reference and its ops list, the
onnxptq modules the quantize loads) and prints ``VmRSS`` after each, with whether ``import onnxptq``
alone pulled in onnx_ir/sympy. Why: the cls peak ratio against ``quantize_static`` is set mostly by
these floors, not by the quantization's own buffers (bench/RESULTS.md, quantcpu4).
"""

from __future__ import annotations

import importlib
import sys


def _rss() -> float:
    """This process's VmRSS in MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise KeyError("VmRSS")


STEPS = [("python", []), ("numpy+onnx", ["numpy", "onnx"]), ("onnxptq", ["onnxptq"]),
         ("onnxruntime", ["onnxruntime"]), ("onnx_ir (+sympy)", ["onnx_ir"]),
         ("onnx.reference", ["onnx.reference"]), ("onnx.reference.ops", ["onnx.reference.ops"]),
         ("onnxptq A8W8 path", ["onnxptq.pipeline.prepare", "onnxptq.calibration.runner", "onnxptq.analysis.floor",
                                "onnxptq.pipeline.build", "onnxptq.onnx_ops.packed"])]


def main() -> None:
    for label, modules in STEPS:
        for m in modules:
            importlib.import_module(m)
        print(f"{label:22s} {_rss():6.1f} MiB")
        if label == "onnxptq":
            print(f"{'':22s} onnx_ir/sympy loaded by `import onnxptq`: {'onnx_ir' in sys.modules}/{'sympy' in sys.modules}")


if __name__ == "__main__":
    main()
