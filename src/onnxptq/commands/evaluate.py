"""``onnxptq evaluate BASELINE QUANTIZED``: cosine / L2 / PSNR of two folders of results.

Same as ``python -m onnxptq.tools.evaluate`` (both the positional and the flag form).
"""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    from onnxptq.tools.evaluate import add_evaluate_arguments

    p = sub.add_parser("evaluate", help="compare two folders of inference results", description=__doc__)
    add_evaluate_arguments(p)
    p.set_defaults(func=run, _parser=p)


def run(args: argparse.Namespace) -> int:
    from onnxptq.tools.evaluate import resolve_folders, run_evaluate

    baseline, quantized = resolve_folders(args, args._parser)
    return run_evaluate(baseline, quantized, per_file=args.per_file, as_json=args.json)
