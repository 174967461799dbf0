"""The ``onnxptq`` command. Each subcommand lives in its own module and registers itself here.

A command module exposes ``add_parser(subparsers)``, which adds its parser and sets
``func(args) -> int`` as the parser default. Library code logs; only this layer prints.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from typing import Sequence

from .errors import OnnxptqError
from .memory import share_malloc_arena

#: Modules that provide subcommands, in the order ``--help`` lists them.
COMMAND_MODULES = (
    "onnxptq.commands.quantize",
    "onnxptq.commands.quantize_weights",
    "onnxptq.commands.inspect",
    "onnxptq.commands.convert",
    "onnxptq.commands.dequantize",
    "onnxptq.commands.evaluate",
    "onnxptq.commands.evaluate_lm",
    "onnxptq.commands.infer",
    "onnxptq.commands.report",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="onnxptq", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv for debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMAND_MODULES:
        importlib.import_module(name).add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose + 1, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    # The command owns its process (a batch job): before any session starts a thread, its buffers
    # go to one malloc arena every later stage reuses (onnxptq.memory.share_malloc_arena).
    share_malloc_arena()
    try:
        return int(args.func(args) or 0)
    except (OnnxptqError, ValueError, OSError, NotImplementedError) as exc:
        # Documented errors (onnxptq.errors) and the builtins they stand in for: one line, no
        # traceback. OSError covers a file system refusing a read (disk errors, permissions).
        print(f"onnxptq {args.command}: error: {_one_line(exc)}", file=sys.stderr)
        return 2


def _one_line(exc: BaseException) -> str:
    """The message on one line (checker and onnxruntime messages span several)."""
    return " ".join(str(exc).split()) or type(exc).__name__


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
