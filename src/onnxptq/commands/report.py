"""``onnxptq report FLOAT QUANT --data PATH -o report.html``: per-tensor error, worst first.

Writes a self-contained HTML page (inline SVG charts, no network) and the same figures as JSON
beside it (``report.json``), and prints the worst tensors.
"""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="per-tensor error of a quantized model against its float model", description=__doc__)
    p.add_argument("float_model", metavar="FLOAT", help="the float ONNX model that was quantized")
    p.add_argument("quant_model", metavar="QUANT", help="the quantized ONNX model")
    p.add_argument("--data", required=True, help="samples: a folder of .npy/.npz, or one .npz keyed by input name (samples on axis 0)")
    p.add_argument("-o", "--output", required=True, help="HTML report to write; the JSON goes beside it")
    p.add_argument("--samples", type=int, default=None, help="use at most this many samples (feeds)")
    p.add_argument("--sort", choices=("local", "model"), default="local",
                   help="rank by the tensor's own quantizer error (local, default) or by the error vs the float model")
    p.add_argument("--no-prepare", action="store_true",
                   help="compare with FLOAT as it is (default: prepare it as onnxptq does before quantizing)")
    p.add_argument("--top", type=int, default=15, help="tensors to print (default 15)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ..report import report_files

    report = report_files(args.float_model, args.quant_model, args.data, args.output,
                          prepare_float=not args.no_prepare, sort=args.sort, max_samples=args.samples)
    print(f"{len(report.tensors)} quantized tensors over {report.samples} samples, worst first:")
    print(report.table(args.top))
    for name, m in report.outputs.items():
        print(f"output {name}: cosine {m['cosine']:.6f}  SQNR {m['sqnr_db']:.2f} dB  PSNR {m['psnr_db']:.2f} dB")
    if report.unmatched:
        print(f"not found: {', '.join(report.unmatched)}")
    print(f"wrote {args.output} and {Path(args.output).with_suffix('.json')}")
    return 0
