"""``onnxptq dequantize MODEL -o OUT``: the float model under onnxruntime's dynamic int8 quantization.

For a package that ships only its ``quantize_dynamic`` file (MatMulInteger, DynamicQuantizeLSTM):
the result holds the int8 weights times their scales and float activations, and ``onnxptq quantize``
takes it (it refuses the int8 file). See :mod:`onnxptq.conversion.dequantize`.
"""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("dequantize", help="recover the float model from an onnxruntime dynamic-int8 model", description=__doc__)
    p.add_argument("model", help="ONNX model quantized by onnxruntime's quantize_dynamic")
    p.add_argument("-o", "--output", required=True, help="output ONNX model (never the input)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from onnxptq.conversion.dequantize import dequantize_dynamic
    from onnxptq.graph.io import check_output_path, load_model, save_model

    out = check_output_path(args.output, (args.model,))
    saved = save_model(dequantize_dynamic(load_model(args.model), str(args.model)), out)
    print(f"wrote the float model of {args.model} to {saved}")
    return 0
