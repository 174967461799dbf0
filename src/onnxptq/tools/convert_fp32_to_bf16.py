"""``python -m onnxptq.tools.convert_fp32_to_bf16 --input IN --output OUT [--format with_cast]``.

Converts a float32 model to BF16 without calibration data (see :mod:`onnxptq.conversion.bf16` for the formats).
"""

from __future__ import annotations

import sys
from typing import Sequence

from onnxptq.commands.convert import tool_main


def main(argv: Sequence[str] | None = None) -> int:
    return tool_main(argv, source="fp32", prog="python -m onnxptq.tools.convert_fp32_to_bf16")


if __name__ == "__main__":
    sys.exit(main())
