"""One-thread latency ÷ float, session creation and output identity of two trees' quantized files
(issue 26 item 3), side by side in one process.

Reads the files ``bench/quantize_time.py --keep KEEP`` wrote (``KEEP/<tree>/<model>_<format>.onnx``,
one folder per ``--src`` tree) and, per model: the float model and each format's file from both
trees, one intra-op and one inter-op thread, sequential execution, the default graph
optimisation (as bench/block_latency.py). Printed per model × format:

* **ms** — median thread CPU of one inference over ``--runs`` rounds, the float model and both
  trees' files taken in turn within a round (load moves them alike), and **÷ float** — each
  round's ratio to the float model's time in that round, median;
* **create s** — thread CPU of creating each tree's session (best of two);
* **same outputs** — whether the two trees' files give bit-identical outputs (NaN equal to NaN)
  on ``--feeds`` feeds (the model's held-out feeds for a zoo model, uniform random ones of the
  input shape otherwise), and whether the files are byte-identical.

    python bench/block_files_latency.py --keep /work/cache/blockfunc/keep --trees base,new \
        --models cls,rec,zoo:lac --formats BFP16,MX9 [--runs 30] [--feeds 4] [--workdir DIR]
"""

from __future__ import annotations

import _common  # the repository root on sys.path (testkit)
import argparse
import hashlib
import os
import statistics
import time
from pathlib import Path

import numpy as np

import quantize_time


def feeds_for(model: str, path: Path, n: int) -> list[dict]:
    """``n`` feeds: a zoo model's held-out samples, else uniform [0, 1) of the input shape."""
    if model.startswith("zoo:"):
        from testkit import zoo

        return list(zoo.get(model[4:]).samples("heldout"))[:n]
    import onnx

    name = onnx.load(str(path), load_external_data=False).graph.input[0].name
    rng = np.random.default_rng(1)
    return [{name: rng.random(quantize_time.MODELS[model][0], dtype=np.float32)} for _ in range(n)]


def created(path: Path) -> tuple[object, float]:
    """A 1-thread session on ``path`` and the thread CPU seconds of creating it (best of two)."""
    best, sess = float("inf"), None
    for _ in range(2):
        t = time.thread_time()
        sess = _common.session(str(path), 1, inter_op_threads=1)
        best = min(best, time.thread_time() - t)
    return sess, best


def same_bits(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    for x, y in zip(a, b):
        x, y = np.asarray(x), np.asarray(y)
        if x.shape != y.shape or x.dtype != y.dtype:
            return False
        if x.dtype.kind == "f":
            if not np.array_equal(np.isnan(x), np.isnan(y)):
                return False
            x, y = np.where(np.isnan(x), 0, x), np.where(np.isnan(y), 0, y)
            if not np.array_equal(x.view(np.uint8), y.view(np.uint8)):
                return False
        elif not np.array_equal(x, y):
            return False
    return True


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keep", required=True)
    ap.add_argument("--trees", default="base,new", help="two folder names under --keep: before,after")
    ap.add_argument("--models", required=True)
    ap.add_argument("--formats", required=True)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--feeds", type=int, default=4)
    ap.add_argument("--workdir", default=str(quantize_time.DEFAULT_WORKDIR))
    args = ap.parse_args()
    before, after = args.trees.split(",")
    keep = Path(args.keep)
    print(f"<!-- {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC; load {os.getloadavg()[0]:.1f}; "
          f"1 thread, median of {args.runs} rounds -->")
    print(f"| model | format | float ms | {before} ms (÷ float) | {after} ms (÷ float) | create s {before} → {after} "
          "| same outputs | same file |")
    print("|---|---|---:|---:|---:|---|---|---|")
    for model in args.models.split(","):
        path = quantize_time.model_file(model, Path(args.workdir))
        feeds = feeds_for(model, path, args.feeds)
        float_sess, _ = created(path)
        for fmt in args.formats.split(","):
            files = [keep / t / f"{model.replace(':', '_')}_{fmt}.onnx" for t in (before, after)]
            if not all(f.is_file() for f in files):
                print(f"| {model} | {fmt} | missing: {', '.join(str(f) for f in files if not f.is_file())} |")
                continue
            (s0, c0), (s1, c1) = created(files[0]), created(files[1])
            same = all(same_bits(s0.run(None, f), s1.run(None, f)) for f in feeds)
            cpu = _common.cpu_round_robin({"float": float_sess, before: s0, after: s1}, feeds[:1], args.runs)
            med = {k: statistics.median(v) for k, v in cpu.items()}
            ratio = {k: statistics.median(a / b for a, b in zip(cpu[k], cpu["float"])) for k in (before, after)}
            print(f"| {model} | {fmt} | {med['float']:.2f} | {med[before]:.2f} ({ratio[before]:.2f}) | "
                  f"{med[after]:.2f} ({ratio[after]:.2f}) | {c0:.2f} → {c1:.2f} | {'yes' if same else 'NO'} | "
                  f"{'yes' if sha(files[0]) == sha(files[1]) else 'no'} |", flush=True)


if __name__ == "__main__":
    main()
