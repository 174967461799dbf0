"""``onnxptq convert MODEL -o OUT [--format with_cast] [--from auto|fp32|fp16]``: whole-model BF16.

The same conversion as ``python -m onnxptq.tools.convert_fp32_to_bf16`` / ``convert_fp16_to_bf16``
(flags ``--input``/``--output`` accepted too); ``--from auto`` picks the fp16 flow when the model
holds float16 tensors and no float32 ones.
"""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    from onnxptq.conversion.bf16 import ACTIVATION_MODES, FORMATS

    p = sub.add_parser("convert", help="convert a float32/float16 model to bfloat16", description=__doc__)
    p.add_argument("model", nargs="?", help="input ONNX model (or --input)")
    p.add_argument("--input", dest="input_flag", help="input ONNX model")
    p.add_argument("-o", "--output", required=True, help="output ONNX model (never the input)")
    p.add_argument("--format", default="with_cast", choices=FORMATS, help="output layout (default with_cast)")
    p.add_argument("--from", dest="source", default="auto", choices=("auto", "fp32", "fp16"), help="input precision")
    p.add_argument("--save_as_external_data", action="store_true", help="write tensors to <output>.data")
    p.add_argument("--no-optimize", action="store_true", help="skip constant folding, CSE, BN folding, MatMul merge")
    p.add_argument("--no-merge-matmuls", action="store_true", help="keep MatMuls that share an input separate")
    p.add_argument("--activations", default="compute_inputs", choices=ACTIVATION_MODES,
                   help="round activations at matrix-op inputs (default) or after every op (all)")
    p.add_argument("--float-io", action="store_true", help="float32 inputs/outputs for an fp16 model")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from onnxptq.conversion.bf16 import FLOAT, FLOAT16
    from onnxptq.conversion.convert import convert_file
    from onnxptq.conversion.interface import has_type
    from onnxptq.graph.io import load_model

    source_path = args.input_flag or args.model
    if not source_path:
        raise ValueError("convert needs an input MODEL (positional or --input)")
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
    print(f"converted {source_path} ({source}) to bfloat16 ({args.format}): {out}")
    return 0
