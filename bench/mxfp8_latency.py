"""1-thread latency of MXFP8 builds from two trees against float, alternating (issue 27 item 5, mxfp8qk19).

``--files`` lists the float model, then the builds; each is timed on the same feed (the first fresh feed of a
``--source`` row of bench/mxfp8_attention.py) in turns, ``--rounds`` times, and the best CPU time (``time.process_time``; one onnxruntime thread) of each is kept:
on a shared machine the best of interleaved runs is the least disturbed reading of each.

    PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 python bench/mxfp8_latency.py --source new:minilm_l3 \\
        --files float.onnx,main.onnx,branch.onnx --rounds 20
"""

from __future__ import annotations

import argparse
import os
import time

import _common  # noqa: F401  (the repository root on sys.path)

from mxfp8_attention import load_row
from testkit import zoo


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", required=True)
    ap.add_argument("--files", required=True, help="float, then the builds, comma-separated")
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args(argv)
    row = load_row(args.source, 1, 1)
    feed = row.fresh[0]
    files = args.files.split(",")
    runs = [zoo.session_runner(f) for f in files]
    best = [float("inf")] * len(files)
    for _ in range(args.rounds):
        for i, run in enumerate(runs):
            t0 = time.process_time()
            run(feed)
            best[i] = min(best[i], time.process_time() - t0)
    print(f"## {row.name} (load {os.getloadavg()[0]:.1f}): best of {args.rounds}, 1 thread")
    for f, b in zip(files, best):
        print(f"{f}: {b * 1e3:.2f} ms, {b / best[0]:.2f}x float")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
