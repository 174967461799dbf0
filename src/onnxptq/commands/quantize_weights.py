"""``onnxptq quantize-weights MODEL -o OUT --preset W4A16 [--data PATH]``: weight-only LLM quantization."""

from __future__ import annotations

import argparse
import logging

from ._args import positive_int


def add_parser(sub: argparse._SubParsersAction) -> None:
    from ..weight_only.options import FORMS, LM_HEAD, METHODS, PRESETS

    p = sub.add_parser("quantize-weights", help="weight-only int4/int8 block quantization of an LLM (MatMul/Gemm weights)",
                       description=__doc__)
    p.add_argument("model", help="float ONNX model (external data is read beside it)")
    p.add_argument("-o", "--output", required=True, help="quantized model to write (never the input)")
    p.add_argument("--preset", default="W4A16", help=f"settings preset: {', '.join(PRESETS)} (default W4A16)")
    p.add_argument("--bits", type=int, default=None, help="2, 3, 4 or 8 (overrides the preset)")
    p.add_argument("--block-size", type=int, default=None, help="16..256, a power of two (overrides the preset)")
    sym = p.add_mutually_exclusive_group()
    sym.add_argument("--symmetric", dest="symmetric", action="store_const", const=True, default=None, help="no zero point")
    sym.add_argument("--asymmetric", dest="symmetric", action="store_const", const=False, help="a zero point per block")
    p.add_argument("--method", choices=METHODS, default=None, help="rtn, hqq, gptq or awq (overrides the preset)")
    p.add_argument("--data", help="calibration data (gptq/awq/--mixed): a folder of .npy/.npz or one .npz keyed by input name")
    p.add_argument("--calib-size", type=positive_int, default=None, help="use at most this many calibration feeds")
    p.add_argument("--lm-head", choices=LM_HEAD, default="int8", help="lm_head precision (default int8)")
    p.add_argument("--embedding", action="store_true", help="also quantize an untied embedding table")
    p.add_argument("--form", choices=FORMS, default="dq",
                   help="dq: DequantizeLinear(block_size) + MatMul at opset 21, embedding/tied lm_head as "
                        "com.microsoft GatherBlockQuantized/MatMulNBits (default); dq-strict: standard ops only; "
                        "matmulnbits: com.microsoft::MatMulNBits everywhere")
    p.add_argument("--mixed", type=float, default=None, metavar="RATIO", help="share of layers kept at 8 bits, by sensitivity")
    p.add_argument("--accuracy-level", type=int, default=None, help="MatMulNBits accuracy_level attribute (--form matmulnbits)")
    p.add_argument("--act-order", action=argparse.BooleanOptionalAction, default=True,
                   help="GPTQ: quantize the most-used input channels first (default; --no-act-order: K in order)")
    p.add_argument("--calib-memory", type=positive_int, default=None, metavar="MIB",
                   help="MiB the calibration statistics may take at once; past it, calibration runs in several "
                        "passes (default: a quarter of the weights' fp32 size, at least 512)")
    p.add_argument("--damp", type=float, default=0.01, help="GPTQ damping, a fraction of the mean Hessian diagonal (0.01)")
    p.add_argument("--exclude", action="append", default=[], help="node name to leave in float; repeatable")
    p.add_argument("--external-data", action="store_true", help="write the tensors to OUT.data (default: only past 2 GB)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..weight_only.api import quantize_weights

    result = quantize_weights(args.model, args.output, preset=args.preset, bits=args.bits, block_size=args.block_size,
                              symmetric=args.symmetric, method=args.method, data=args.data, lm_head=args.lm_head,
                              embedding=args.embedding, form=args.form, mixed=args.mixed,
                              accuracy_level=args.accuracy_level, act_order=args.act_order, damp=args.damp,
                              calib_feeds=args.calib_size,
                              calib_memory=None if args.calib_memory is None else args.calib_memory << 20, exclude=tuple(args.exclude),
                              external_data=True if args.external_data else None, progress=not args.no_progress)
    print(result.summary())
    print(f"wrote {result.output_path}")
    logging.getLogger(__name__).debug("timings %s", result.timings)
    return 0
