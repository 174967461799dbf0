"""``onnxptq infer MODEL --data PATH -o FOLDER``: run a model and save each output as ``.npy``.

``--data`` is a ``.npz`` keyed by input name (samples on axis 0) or a folder of ``.npy``/``.npz``
files. Run it on the float and on the converted model, then ``onnxptq evaluate`` the two folders.
"""

from __future__ import annotations

import argparse

from ._args import positive_int


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("infer", help="run a model over data and save the outputs as .npy", description=__doc__)
    p.add_argument("model", help="ONNX model")
    p.add_argument("--data", required=True, help=".npz keyed by input name, or a folder of .npy/.npz")
    p.add_argument("-o", "--output", required=True, help="folder for the .npy results")
    p.add_argument("--batch-size", type=positive_int, default=None, help="samples per run (default: one per sample/file)")
    p.add_argument("--threads", type=positive_int, default=None, help="onnxruntime intra-op threads")
    p.add_argument("--overwrite", action="store_true", help="write into a folder that already holds .npy files")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from onnxptq.analysis.infer import run_and_save

    written = run_and_save(
        args.model, args.data, args.output, batch_size=args.batch_size, threads=args.threads, overwrite=args.overwrite
    )
    print(f"wrote {len(written)} output file(s) to {args.output}")
    return 0
