"""``python -m onnxptq.tools.evaluate BASELINE QUANTIZED`` (or ``--baseline_results_folder A
--quantized_results_folder B``): the reference tool's script; the command lives in
:mod:`onnxptq.commands.evaluate` (also ``onnxptq evaluate``).
"""

from __future__ import annotations

import sys
from typing import Sequence

from onnxptq.commands.evaluate import tool_main


def main(argv: Sequence[str] | None = None) -> int:
    return tool_main(argv, prog="python -m onnxptq.tools.evaluate")


if __name__ == "__main__":
    sys.exit(main())
