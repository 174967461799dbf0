"""Whole-model BF16 conversion from the command line, both spellings, with one set of flags.

``onnxptq convert MODEL -o OUT [--format with_cast] [--from auto|fp32|fp16]`` and the reference
tool's scripts ``python -m onnxptq.tools.convert_fp32_to_bf16`` / ``convert_fp16_to_bf16 --input IN
--output OUT`` (spec §6.4/§6.5) parse the flags defined once here (:func:`add_convert_arguments`)
and run :func:`run`. Every flag takes the reference tool's underscore spelling and the dashed one
(``--save_as_external_data``, ``--no_optimize`` / ``--no-optimize``, ``--no_merge_matmuls``,
``--activations``, ``--float_io`` / ``--float-io``). ``--from auto`` (the subcommand's default)
picks the fp16 flow when the model holds float16 tensors and no float32 ones. The reference tool
silently ignores unknown arguments; its scripts here warn about them, so a typo in a flag is seen
but scripts written for the reference keep working.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Sequence

SOURCES = ("auto", "fp32", "fp16")


def add_convert_arguments(parser: argparse.ArgumentParser, *, source: str | None = None) -> None:
    """The conversion flags. ``source`` None: the ``onnxptq convert`` subcommand (input positional
    or ``--input``, ``--from``); ``"fp32"``/``"fp16"``: a reference-tool script (``--input`` required,
    the source fixed, ``--float_io`` only for fp16)."""
    from onnxptq.conversion.bf16 import ACTIVATION_MODES, FORMATS

    if source is None:
        parser.add_argument("model", nargs="?", help="input ONNX model (or --input)")
        parser.add_argument("--input", dest="input_flag", help="input ONNX model")
        parser.add_argument("--from", dest="source", default="auto", choices=SOURCES, help="input precision (default auto)")
    else:
        parser.add_argument("--input", dest="input_flag", required=True, help="input ONNX model")
        parser.set_defaults(model=None, source=source)
    parser.add_argument("-o", "--output", required=True, help="output ONNX model (never the input)")
    parser.add_argument("--format", default="with_cast", help=f"output layout, one of {', '.join(FORMATS)} (default with_cast)")
    parser.add_argument("--save_as_external_data", "--save-as-external-data", dest="save_as_external_data", action="store_true",
                        help="write tensors to <output>.data")
    parser.add_argument("--no_optimize", "--no-optimize", dest="no_optimize", action="store_true",
                        help="skip constant folding, CSE, BatchNorm folding and MatMul merging")
    parser.add_argument("--no_merge_matmuls", "--no-merge-matmuls", dest="no_merge_matmuls", action="store_true",
                        help="keep MatMuls that share an input separate")
    parser.add_argument("--activations", default="compute_inputs", choices=ACTIVATION_MODES,
                        help="with_cast/customqdq: round activations where Conv/MatMul/Gemm read them (compute_inputs, "
                             "default, about float speed) or after every op as the reference tool does (all, slower)")
    if source != "fp32":
        parser.add_argument("--float_io", "--float-io", dest="float_io", action="store_true",
                            help="give an fp16 model's converted form float32 inputs/outputs instead of the declared float16 ones")
    else:
        parser.set_defaults(float_io=False)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("convert", help="convert a float32/float16 model to bfloat16", description=__doc__.splitlines()[0])
    add_convert_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Convert as the parsed ``args`` say; print where the result went."""
    from onnxptq.conversion.bf16 import FLOAT, FLOAT16, FORMATS
    from onnxptq.conversion.convert import convert_file
    from onnxptq.conversion.interface import has_type
    from onnxptq.graph.io import load_model

    source_path = args.input_flag or args.model
    if not source_path:
        raise ValueError("convert needs an input MODEL (positional or --input)")
    if args.format not in FORMATS:
        raise ValueError(f"--format {args.format!r} is not one of {', '.join(FORMATS)}")
    source = args.source
    if source == "auto":
        model = load_model(source_path, load_external_data=False)
        source = "fp16" if has_type(model, FLOAT16) and not has_type(model, FLOAT) else "fp32"
    out = convert_file(
        source_path,
        args.output,
        args.format,
        source=source,
        save_as_external_data=args.save_as_external_data,
        keep_io_types=not args.float_io,
        optimize=not args.no_optimize,
        merge_matmuls=not args.no_merge_matmuls,
        activations=args.activations,
    )
    print(f"Converted {source_path} ({source}) to bfloat16 ({args.format}): {out}")
    return 0


def tool_main(argv: Sequence[str] | None, *, source: str, prog: str) -> int:
    """A reference-tool script (``python -m onnxptq.tools.convert_<source>_to_bf16``): parse, warn
    about unknown arguments, convert, map known failures to exit status 2 with one line."""
    parser = argparse.ArgumentParser(prog=prog, description=f"Convert a {source} ONNX model to bfloat16.")
    add_convert_arguments(parser, source=source)
    args, unknown = parser.parse_known_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if unknown:
        print(f"{prog}: warning: ignoring unknown arguments: {' '.join(unknown)}", file=sys.stderr)
    try:
        return run(args)
    except (FileNotFoundError, ValueError, PermissionError, IsADirectoryError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
