"""Argument handling shared by ``convert_fp32_to_bf16`` and ``convert_fp16_to_bf16``.

The flags are the reference tool's (spec §6.4/§6.5): ``--input``, ``--output``, ``--format``,
``--save_as_external_data``; plus ours: ``--activations``, ``--no_optimize``, ``--no_merge_matmuls`` and, for fp16
models, ``--float_io``. The reference silently ignores unknown arguments; we warn about them, so a
typo in a flag is seen but scripts written for the reference keep working.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Sequence

from .bf16 import ACTIVATION_MODES, FORMATS
from .convert import convert_file


def add_convert_arguments(parser: argparse.ArgumentParser, *, fp16_flag: bool) -> None:
    """Add the conversion flags to ``parser`` (also used by ``onnxptq convert``)."""
    parser.add_argument("--input", required=True, help="input ONNX model")
    parser.add_argument("--output", required=True, help="output ONNX model (never the input)")
    parser.add_argument(
        "--format",
        default="with_cast",
        help=f"output layout, one of {', '.join(FORMATS)} (default with_cast)",
    )
    parser.add_argument("--save_as_external_data", action="store_true", help="write tensors to <output>.data")
    parser.add_argument(
        "--no_optimize",
        action="store_true",
        help="skip constant folding, CSE, BatchNorm folding and MatMul merging",
    )
    parser.add_argument(
        "--no_merge_matmuls", action="store_true", help="keep MatMuls that share an input separate"
    )
    parser.add_argument(
        "--activations",
        default="compute_inputs",
        choices=ACTIVATION_MODES,
        help="with_cast/customqdq: round activations where Conv/MatMul/Gemm read them (compute_inputs, "
        "default, about float speed) or after every op as the reference tool does (all, slower)",
    )
    if fp16_flag:
        parser.add_argument(
            "--float_io",
            action="store_true",
            help="give the converted model float32 inputs/outputs instead of the declared float16 ones",
        )


def run_conversion(args: argparse.Namespace, source: str) -> int:
    """Run the conversion described by parsed ``args``; print where the result went."""
    if args.format not in FORMATS:
        raise ValueError(f"--format {args.format!r} is not one of {', '.join(FORMATS)}")
    out = convert_file(
        args.input,
        args.output,
        args.format,
        source=source,
        save_as_external_data=args.save_as_external_data,
        keep_io_types=not getattr(args, "float_io", False),
        optimize=not args.no_optimize,
        merge_matmuls=not args.no_merge_matmuls,
        activations=args.activations,
    )
    print(f"Converted {args.input} ({source}) to bfloat16 ({args.format}): {out}")
    return 0


def main(argv: Sequence[str] | None, *, source: str, prog: str) -> int:
    """Entry point of both tools: parse, convert, map known failures to exit status 2."""
    parser = argparse.ArgumentParser(prog=prog, description=f"Convert a {source} ONNX model to bfloat16.")
    add_convert_arguments(parser, fp16_flag=source == "fp16")
    args, unknown = parser.parse_known_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if unknown:
        print(f"{prog}: warning: ignoring unknown arguments: {' '.join(unknown)}", file=sys.stderr)
    try:
        return run_conversion(args, source)
    except (FileNotFoundError, ValueError, PermissionError, IsADirectoryError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
