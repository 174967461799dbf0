"""Load cost of two sets of delivered files (two trees' ``file_sizes.py --keep`` runs): per (model,
preset) the peak resident memory a fresh process adds while onnxruntime creates the session, the
creation's CPU seconds (one thread), and whether every packed stream was folded away (issue 26 item 2, branch blockfile11).

Why: a smaller file must not cost more at load: each decode step onnxruntime folds keeps a copy of
its output until the optimisation ends (onnx_ops/packed.py), so a new decode form (exponents by
frequency and escape: Equal, CumSum, Where; the small weights' float16 stream) is checked for the
memory and time of loading, not only for its bytes. Each file loads in its own subprocess (peaks
do not mix; the folding check is ``bench/packed_load.py --one``'s), old and new alternating, the
order flipped every round; medians of ``--rounds``.

    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/file_sizes_load.py --rows after.json \\
        --old before_files/ --new after_files/ [--models shipped:cls,...] [--presets BFP16,...] --rounds 5
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

_LOADER = str(Path(__file__).with_name("packed_load.py"))


def _one(path: str) -> dict:
    """In this (fresh) process: one session as users open it (default optimisation, one thread):
    the CPU seconds of its creation and the peak RSS it added; then the folding check of
    ``packed_load.py`` (ORT_ENABLE_BASIC, the optimised graph saved: streams left, nodes)."""
    import resource
    import time

    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    so.log_severity_level = 3
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    c0 = time.process_time()
    ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    cpu = time.process_time() - c0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = subprocess.run([sys.executable, _LOADER, "--one", path], capture_output=True, text=True, check=True)
    fold = json.loads(out.stdout.strip().splitlines()[-1])
    return {"load_cpu_s": cpu, "load_peak_rss_MB": peak / 1024, "rss_before_MB": before / 1024,
            "packed_inits_left": fold["packed_inits_left"], "nodes_optimized": fold["nodes_optimized"]}


def _load(path: Path) -> dict:
    out = subprocess.run([sys.executable, __file__, "--one", str(path)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def compare(old: Path, new: Path, rounds: int) -> dict:
    """Median peak RSS growth (MB over the process before the session) and creation wall seconds of
    each file, and the packed streams left unfolded in either (0: all folded)."""
    got: dict[str, list[dict]] = {"old": [], "new": []}
    for r in range(rounds):
        for key, path in ((("old", old), ("new", new)) if r % 2 == 0 else (("new", new), ("old", old))):
            got[key].append(_load(path))
    row: dict = {}
    for key, runs in got.items():
        row[f"{key}_rss_MB"] = round(float(np.median([x["load_peak_rss_MB"] - x["rss_before_MB"] for x in runs])), 2)
        row[f"{key}_load_cpu_s"] = round(float(np.median([x["load_cpu_s"] for x in runs])), 4)
        row[f"{key}_unfolded"] = max(x["packed_inits_left"] for x in runs)
        row[f"{key}_nodes_optimized"] = runs[0]["nodes_optimized"]
    return row


def main(argv: list[str] | None = None) -> int:
    if argv is None and len(sys.argv) == 3 and sys.argv[1] == "--one":
        print(json.dumps(_one(sys.argv[2])))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", required=True, help="file_sizes.py JSON (the models and presets to compare)")
    ap.add_argument("--old", required=True)
    ap.add_argument("--new", required=True)
    ap.add_argument("--models", default="", help="only these (comma-separated); default all")
    ap.add_argument("--presets", default="")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    rows = json.loads(Path(args.rows).read_text())
    models = set(filter(None, args.models.split(",")))
    presets = set(filter(None, args.presets.split(",")))
    for r in rows:
        if "ratio" not in r or (models and r["model"] not in models) or (presets and r["preset"] not in presets):
            continue
        name = f"{r['model'].replace(':', '_')}.{r['preset']}.onnx"
        out = compare(Path(args.old) / name, Path(args.new) / name, args.rounds)
        print(json.dumps({"model": r["model"], "preset": r["preset"], **out}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
