"""``python -m onnxptq.tools.convert_fp16_to_bf16 --input IN --output OUT [--format with_cast]``.

Converts a float16 model to BF16. The model is widened to float32 (exact), converted, and its
float16 inputs/outputs keep their declared type (``--float_io`` makes them float32 instead).
"""

from __future__ import annotations

import sys
from typing import Sequence

from onnxptq.commands.convert import tool_main


def main(argv: Sequence[str] | None = None) -> int:
    return tool_main(argv, source="fp16", prog="python -m onnxptq.tools.convert_fp16_to_bf16")


if __name__ == "__main__":
    sys.exit(main())
