"""Two folders of inference results compared: cosine similarity, L2 loss and PSNR per file pair.

``onnxptq evaluate BASELINE QUANTIZED`` and the reference tool's script ``python -m
onnxptq.tools.evaluate`` (also ``--baseline_results_folder A --quantized_results_folder B``) share
the flags and the run defined here. Prints the metrics per file pair (``--per_file``) and their mean
and worst values, for .npy arrays and .png/.jpg images (images need ``pip install
onnxptq[images]``). Definitions: :mod:`onnxptq.analysis.metrics`.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from onnxptq.analysis.metrics import FolderComparison


def add_evaluate_arguments(parser: argparse.ArgumentParser) -> None:
    """Both spellings of the two folders, plus ``--per_file`` and ``--json`` output options."""
    parser.add_argument("baseline", nargs="?", help="folder of baseline (float) results")
    parser.add_argument("quantized", nargs="?", help="folder of quantized results")
    parser.add_argument("--baseline_results_folder", dest="baseline_flag", help="same as the first positional")
    parser.add_argument("--quantized_results_folder", dest="quantized_flag", help="same as the second positional")
    parser.add_argument("--per_file", action="store_true", help="print the metrics of every file pair")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")


def resolve_folders(args: argparse.Namespace, parser: argparse.ArgumentParser) -> tuple[str, str]:
    """Pick the folders from flags or positionals; both forms at once must agree."""
    positionals = [p for p in (args.baseline, args.quantized) if p]
    baseline = args.baseline_flag or (positionals.pop(0) if positionals else None)
    quantized = args.quantized_flag or (positionals.pop(0) if positionals else None)
    if positionals:
        parser.error(f"unexpected extra folder argument: {positionals[0]}")
    if not baseline or not quantized:
        parser.error("give the baseline and quantized results folders (positionally or with the flags)")
    return baseline, quantized


def format_report(result: "FolderComparison", *, per_file: bool) -> str:
    lines = []
    if per_file:
        for pair in result.pairs:
            lines.append(f"{pair.name}: cos similarity {pair.cosine:.6f}, l2 loss {pair.l2:.6g}, psnr {pair.psnr:.4f}")
    lines += [
        f"Pairs compared: {len(result.pairs)}",
        f"Mean cos similarity: {result.mean_cosine:.6f}",
        f"Min cos similarity: {result.min_cosine:.6f}",
        f"Mean l2 loss: {result.mean_l2:.6g}",
        f"Max l2 loss: {result.max_l2:.6g}",
        f"Mean psnr: {result.mean_psnr:.4f}",
        f"Min psnr: {result.min_psnr:.4f}",
    ]
    return "\n".join(lines)


def run_evaluate(baseline: str, quantized: str, *, per_file: bool = False, as_json: bool = False) -> int:
    from onnxptq.analysis.metrics import compare_folders

    result = compare_folders(baseline, quantized)
    if as_json:
        payload = {"summary": result.summary()}
        if per_file:
            payload["pairs"] = [vars(p) for p in result.pairs]
        print(json.dumps(payload, indent=2))
    else:
        print(format_report(result, per_file=per_file))
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("evaluate", help="compare two folders of inference results", description=__doc__.splitlines()[0])
    add_evaluate_arguments(p)
    p.set_defaults(func=run, _parser=p)


def run(args: argparse.Namespace) -> int:
    baseline, quantized = resolve_folders(args, args._parser)
    return run_evaluate(baseline, quantized, per_file=args.per_file, as_json=args.json)


def tool_main(argv: Sequence[str] | None, *, prog: str) -> int:
    """The reference-tool script: parse, compare, map known failures to exit status 2 with one line."""
    from onnxptq.analysis.metrics import EvaluateError

    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    add_evaluate_arguments(parser)
    args = parser.parse_args(argv)
    baseline, quantized = resolve_folders(args, parser)
    try:
        return run_evaluate(baseline, quantized, per_file=args.per_file, as_json=args.json)
    except (EvaluateError, FileNotFoundError, NotADirectoryError, ImportError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
