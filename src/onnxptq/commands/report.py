"""``onnxptq report FLOAT QUANT --data PATH -o report.html``: per-tensor error, worst first.

Writes a self-contained HTML page (inline SVG charts, no network) and the same figures as JSON
beside it (``report.json``), and prints the worst tensors.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..analysis.report import Report

from ._args import positive_int


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="per-tensor error of a quantized model against its float model", description=__doc__)
    p.add_argument("float_model", metavar="FLOAT", help="the float ONNX model that was quantized")
    p.add_argument("quant_model", metavar="QUANT", help="the quantized ONNX model")
    p.add_argument("--data", required=True, help="samples: a folder of .npy/.npz, or one .npz keyed by input name (samples on axis 0)")
    p.add_argument("-o", "--output", required=True, help="HTML report to write; the JSON goes beside it")
    p.add_argument("--samples", type=positive_int, default=None, help="use at most this many samples (feeds)")
    p.add_argument("--sort", choices=("local", "model"), default="local",
                   help="rank by the tensor's own quantizer error (local, default) or by the error vs the float model")
    p.add_argument("--no-prepare", action="store_true",
                   help="compare with FLOAT as it is (default: prepare it as onnxptq does before quantizing)")
    p.add_argument("--top", type=positive_int, default=15, help="tensors to print (default 15)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

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


def report_files(
    float_path: str | os.PathLike,
    quant_path: str | os.PathLike,
    data: Any,
    output: str | os.PathLike,
    *,
    prepare_float: bool = True,
    sort: str = "local",
    max_samples: int | None = None,
) -> Report:
    """``onnxptq report FLOAT QUANT --data PATH -o report.html``.

    onnxptq quantizes the *prepared* float model (constants lifted, BatchNorm folded, …), so the
    float model is prepared the same way first (``prepare_float``) for its tensors to line up with
    the quantized model's; turn it off for a float model that a quantizer used as it is.
    """
    from .. import outputs
    from ..analysis.report import compute_report
    from ..analysis.report_html import write_report
    from ..calibration import readers
    from ..graph import io
    from ..graph.naming import node_names
    from ..pipeline.prepare import prepare_for_quantization

    output = Path(output)
    if output.suffix.lower() == ".json":
        raise ValueError(f"{output}: give the HTML path; the JSON is written beside it")
    output.parent.mkdir(parents=True, exist_ok=True)  # a report folder is made, as write_report does
    outputs.check_io({"report": output, "report JSON": output.with_suffix(".json")},
                     models={"the float model": float_path, "the quantized model": quant_path},
                     data={"the data": data})
    fmodel = io.load_model(float_path)
    qmodel = io.load_model(quant_path)
    inputs = readers.ModelInputs.from_model(fmodel)
    if prepare_float:
        fmodel = prepare_for_quantization(fmodel)
        node_names(fmodel)
    feeds = readers.as_feed_iterator(data, inputs)
    report = compute_report(fmodel, qmodel, feeds, sort=sort, max_samples=max_samples,
                            float_label=str(float_path), quant_label=str(quant_path))
    if not report.tensors:
        raise ValueError(f"{quant_path}: no quantized tensor of {float_path} found (is it a quantized form of that model? "
                         "try --no-prepare if the float model was quantized as it is)")
    write_report(report, output)
    return report
