"""``onnxptq quantize MODEL -o OUT --preset A8W8 --data PATH``."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging

from ._args import positive_int


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("quantize", help="quantize a float ONNX model", description=__doc__)
    p.add_argument("model", help="float ONNX model (fp32 or fp16)")
    p.add_argument("-o", "--output", required=True, help="quantized model to write (never the input)")
    p.add_argument("--preset", default="A8W8", help="configuration preset (default A8W8; see `onnxptq inspect --presets`)")
    p.add_argument("--data", help="calibration data: a folder of .npy/.npz, or one .npz keyed by input name (samples on axis 0)")
    p.add_argument("--calib-size", type=positive_int, default=None, help="use at most this many calibration samples")
    p.add_argument("--batch-size", type=positive_int, default=None, help="samples per onnxruntime run during calibration (default: as the data comes)")
    p.add_argument("--exclude", action="append", default=[], help="node name (or ^regex.*) to leave in float; repeatable")
    p.add_argument("--custom-op-library", action="append", default=[], metavar="PATH",
                   help="onnxruntime custom-op library for models with custom-domain nodes, registered in every session; repeatable")
    p.add_argument("--plan", help="also write the quantization plan (JSON) here")
    p.add_argument("--runtime", choices=("cpu", "npu"), default="cpu",
                   help="where the model will run: cpu (onnxruntime's CPU provider: integer kernels, uint8 activations; "
                        "default) or npu (Q/DQ on every quantizable op, per-channel depthwise inputs)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--quantize-postprocessing", action="store_true",
                   help="also quantize the decode arithmetic after the last weighted layer (Sigmoid, Softmax, "
                        "Concat, Mul/Add by constants, ...), which stays float by default")
    p.add_argument("--pack-weights", action=argparse.BooleanOptionalAction, default=None,
                   help="store folded weights in their format's bytes, decoded by ops onnxruntime folds at load "
                        "(default on); --no-pack-weights keeps one plain fp32 initializer per weight")
    p.add_argument("--weight-runtime", choices=("exact", "matmulnbits"), default=None,
                   help="matmulnbits: MXINT8 MatMul weights as blocked int8 DequantizeLinear, fused by onnxruntime into "
                        "MatMulNBits (int8 activation arithmetic; session.qdq_matmulnbits_accuracy_level=1 for float)")
    p.add_argument("--saturation-guard", choices=("auto", "on", "off"), default=None,
                   help="int8 weights of fused Conv/MatMul/Gemm stored as uint8 (same values) where onnxruntime's "
                        "integer GEMM saturates (x86 without VNNI): auto (a probe of this machine; default), on "
                        "(a model for such CPUs made elsewhere), off")
    p.add_argument("--range-guard", action=argparse.BooleanOptionalAction, default=None,
                   help="stop sharing one scale (or one block exponent) where it would flush whole channels: split at "
                        "the Concat, move the block axis, or keep the tensor float (the plan and report say which); "
                        "on by default, --no-range-guard turns it off")
    p.add_argument("--repair", action=argparse.BooleanOptionalAction, default=None,
                   help="accuracy floor: where the quantized model breaks its format family's floor on held-out samples, "
                        "keep the responsible nodes float (named in a warning, the summary and the plan); on by default, "
                        "--no-repair only reports the broken floor (docs/accuracy.md)")
    p.add_argument("--repair-step-up", action=argparse.BooleanOptionalAction, default=None,
                   help="repair of an integer plan first tries 16-bit activations, then 16-bit weights, on the "
                        "responsible nodes before keeping any float (a block plan: the next wider block format, "
                        "MX4 → MX6 → MX9, MXFP4 → MXFP6_E2M3 → MXFP8_E4M3) (default on); --no-repair-step-up keeps them float")
    p.add_argument("--repair-uncertain", action="store_true",
                   help="repair a verdict the floor could not confirm (it holds on the held-out figures, but on so few "
                        "reads that the share's 90%% bound reaches below the floor) as if it were broken; without it such a "
                        "verdict is only named in a warning, the summary and the plan (docs/accuracy.md)")
    p.add_argument("--strict", action="store_true",
                   help="fail (exit 2, nothing written) when the accuracy floor breaks, instead of repairing")
    p.add_argument("--floor-cosine", type=float, default=None, metavar="C",
                   help="output-cosine floor in place of the format family's default")
    p.add_argument("--floor-reading", action="append", default=[], metavar="OUTPUT=KIND",
                   help="how the floor reads OUTPUT, in place of what it finds by structure: values (or embedding: its "
                        "cosine only, never an arg-max), picture or picture:LOW,HIGH (its 8-bit values, any shape: a "
                        "grey picture), logits (its sigmoid's decisions), topk:K (each row's top K: a decoder step "
                        "a beam search of width K calls), points, points:TOL or points:TOL,D (landmarks: K points of D=2 or 3 "
                        "coordinates on the last axis, [.., K*D] flat with D declared, D=2 on x,y,z reads x,y; a sample "
                        "holds when its points' mean move is <= TOL (default 0.02) of float's point set's RMS radius), peaks or "
                        "peaks:SCORE (a centre-point heat map [.., H, W], logits or, all in [0, 1], probabilities: its 3x3 "
                        "peaks at sigmoid score >= SCORE, default a band 0.1-0.5, matched within one cell, their F1 held; "
                        "a tied neighbour is one more peak), waveform (a signal per batch row: its log-power spectrum's bins "
                        "within 1 dB of float's); repeatable (docs/accuracy.md)")
    sq = p.add_mutually_exclusive_group()
    sq.add_argument("--smooth-quant", dest="smooth_quant", action="store_const", const=True, default=None,
                    help="SmoothQuant: move activation outlier channels into the MatMul/Gemm weights before calibration "
                         "(default: automatic, on for integer activations with per-tensor weights on transformer graphs)")
    sq.add_argument("--no-smooth-quant", dest="smooth_quant", action="store_const", const=False, help="never SmoothQuant")
    p.add_argument("--smooth-alpha", type=float, default=None, metavar="A",
                   help="SmoothQuant migration strength in [0, 1] (default 0.5)")
    wf = p.add_mutually_exclusive_group()
    wf.add_argument("--widen-fp16", dest="widen_fp16", action="store_const", const=True, default=None,
                    help="a float16 model computes in float32 inside, its float16 inputs/outputs kept, under FP16 formats "
                         "too (default: automatic, every preset but FP16 alone; docs/subgraphs.md)")
    wf.add_argument("--no-widen-fp16", dest="widen_fp16", action="store_const", const=False,
                    help="quantize a float16 model in float16 as it is (the behaviour before widening)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from .. import outputs
    from ..api import quantize
    from ..config.presets import get_preset

    config = get_preset(args.preset)
    calibration = dataclasses.replace(config.calibration, data_size=args.calib_size, batch_size=args.batch_size,
                                      progress=not args.no_progress, custom_op_libraries=tuple(args.custom_op_library))
    config = config.replace(runtime=args.runtime, calibration=calibration)
    if args.quantize_postprocessing:
        config = config.replace(quantize_postprocessing=True)
    if args.pack_weights is not None:
        config = config.replace(pack_weights=args.pack_weights)
    if args.weight_runtime is not None:
        config = config.replace(weight_runtime=args.weight_runtime)
    if args.saturation_guard is not None:
        config = config.replace(saturation_guard=args.saturation_guard)
    if args.range_guard is not None:
        config = config.replace(range_guard=args.range_guard)
    if args.repair is not None:
        config = config.replace(repair=args.repair)
    if args.repair_step_up is not None:
        config = config.replace(repair_step_up=args.repair_step_up)
    if args.repair_uncertain:
        config = config.replace(repair_uncertain=True)
    if args.strict:
        config = config.replace(strict=True)
    if args.floor_cosine is not None:
        config = config.replace(floor_cosine=args.floor_cosine)
    if args.floor_reading:
        config = config.replace(floor_output_reading=_floor_readings(args.floor_reading))
    if args.smooth_quant is not None:
        config = config.replace(smooth_quant=args.smooth_quant)
    if args.smooth_alpha is not None:
        config = config.replace(smooth_alpha=args.smooth_alpha)
    if args.widen_fp16 is not None:
        config = config.replace(widen_fp16=args.widen_fp16)
    if args.exclude:
        config = config.replace(nodes_to_exclude=tuple(config.nodes_to_exclude) + tuple(args.exclude))
    # Every output against every input and each other, before any work: a --plan equal to -o,
    # to the model or to a data file, or into a missing folder, fails now, not after calibrating.
    outputs.check_io({"-o": args.output, "--plan": args.plan},
                     models={"the input model": args.model},
                     data={"the calibration data": args.data} if args.data else {})
    result = quantize(args.model, config, data=args.data, output=args.output)
    if args.plan:
        outputs.write_text(args.plan, json.dumps(result.plan.to_json(), indent=1), label="plan")
    print(result.summary())
    print(f"wrote {result.output_path}")
    logging.getLogger(__name__).debug("timings %s", result.timings)
    return 0


def _floor_readings(items: list[str]) -> dict[str, str]:
    """``--floor-reading OUTPUT=KIND`` items as ``QuantConfig.floor_output_reading`` (the kinds are
    checked by the configuration, which names the option)."""
    from ..errors import UsageError

    readings: dict[str, str] = {}
    for item in items:
        name, sep, kind = item.rpartition("=")
        if not sep or not name or not kind:
            raise UsageError(f"--floor-reading {item!r}: write OUTPUT=KIND, e.g. embedding=values or mask=picture")
        readings[name] = kind
    return readings
