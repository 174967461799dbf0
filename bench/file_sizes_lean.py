"""Two sets of delivered files (two source trees' ``file_sizes.py --keep`` runs, or one tree with
``lean_file.LEAN_CALLS`` off and on) compared per (model, preset): outputs as bytes on held-out
feeds, the ONNX checker, file bytes, and onnxruntime's CPU per run and per session creation on one
thread, the two forms alternated (issue 26 item 2, branch blockfile7).

Why: lean_file.py writes the calls' shared attributes on their functions, short call outputs and
nameless decode chains; the file must compute what the old file computed, bit for bit, and load
and run no slower.

    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/file_sizes_lean.py --rows after.json \
        --old before_files/ --new after_files/ --models shipped:cls,nm:dnsmos_p808 --runs 10 [--float]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import _common  # noqa: F401 - the repository root on sys.path
import numpy as np
import onnx
import onnxruntime as ort

import file_sizes as fs


def _session(data: bytes) -> tuple[ort.InferenceSession, float]:
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    c0 = time.process_time()
    s = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    return s, time.process_time() - c0


def optimized_ops(data: bytes) -> list[str]:
    """The op types of the graph onnxruntime runs after its optimisations (extended level, one
    thread), sorted: two files that fold to the same graph give the same list (packed18: attributes
    the spec implies, 16-bit + Cast biases)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        so = ort.SessionOptions()
        so.intra_op_num_threads = so.inter_op_num_threads = 1
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        so.optimized_model_filepath = str(Path(tmp) / "opt.onnx")
        ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
        return sorted(n.op_type for n in onnx.load(so.optimized_model_filepath).graph.node)


OPTIMIZED = False  # --optimized: also compare the optimised graphs' op types


def compare(old: Path, new: Path, feeds: list[dict], runs: int, float_model: bytes | None = None) -> dict:
    """Outputs as bytes, checker, sizes, and alternated CPU (median per run, per session; the
    order of the forms flips every round).
    ``float_model``: the fp32 source, timed in the same rounds (its run CPU after the two
    files'), so that each file's latency ÷ float is a ratio of one run under one load."""
    a, b = old.read_bytes(), new.read_bytes()
    onnx.checker.check_model(onnx.ModelProto.FromString(b))
    row: dict = {"old_bytes": len(a), "new_bytes": len(b)}
    sa, sb = _session(a)[0], _session(b)[0]
    names = {i.name for i in sa.get_inputs()}
    feeds = [{k: v for k, v in f.items() if k in names} for f in feeds]
    row["identical"] = all(np.asarray(x).tobytes() == np.asarray(y).tobytes()
                           for f in feeds for x, y in zip(sa.run(None, f), sb.run(None, f)))
    if OPTIMIZED:
        row["same_optimized_ops"] = optimized_ops(a) == optimized_ops(b)
    timed = [("old", sa), ("new", sb)] + ([("float", _session(float_model)[0])] if float_model else [])
    t: dict[str, list[float]] = {k: [] for k, _ in timed}
    load = {"old": [], "new": []}
    for r in range(runs):
        # ABBA: the order flips every round (whichever runs first in a round ran 5-10 % slower
        # on sub-ms models: blockfile10's old-first rounds favoured the new file)
        for key, sess in (timed if r % 2 == 0 else timed[::-1]):
            c0 = time.process_time()
            for f in feeds:
                sess.run(None, f)
            t[key].append((time.process_time() - c0) / len(feeds) * 1e3)
        for key, data in (("old", a), ("new", b)):
            load[key].append(_session(data)[1])
    for key in t:
        row[f"{key}_run_ms"] = round(float(np.median(t[key])), 3)
    for key in load:
        row[f"{key}_load_s"] = round(float(np.median(load[key])), 4)
    if float_model:
        row["old_x_float"] = round(row["old_run_ms"] / max(row["float_run_ms"], 1e-6), 3)
        row["new_x_float"] = round(row["new_run_ms"] / max(row["float_run_ms"], 1e-6), 3)
    return row


def _float_bytes(spec: str) -> bytes:
    """The fp32 source model of ``spec`` as one message (external data, if any, loaded in)."""
    return onnx.load(fs.model_source(spec)[0]).SerializeToString()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", required=True, help="file_sizes.py JSON (the models and presets to compare)")
    ap.add_argument("--old", required=True)
    ap.add_argument("--new", required=True)
    ap.add_argument("--models", default="", help="only these (comma-separated); default all")
    ap.add_argument("--presets", default="")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--feeds", type=int, default=4, help="held-out feeds (seed 1000)")
    ap.add_argument("--optimized", action="store_true", help="also compare onnxruntime's optimised graphs' op types")
    ap.add_argument("--float", action="store_true", help="also time the fp32 source: latency ÷ float, old and new")
    args = ap.parse_args(argv)
    global OPTIMIZED
    OPTIMIZED = args.optimized
    rows = json.loads(Path(args.rows).read_text())
    models = set(filter(None, args.models.split(",")))
    presets = set(filter(None, args.presets.split(",")))
    feeds_of: dict[str, list[dict]] = {}
    for r in rows:
        if "ratio" not in r or (models and r["model"] not in models) or (presets and r["preset"] not in presets):
            continue
        name = f"{r['model'].replace(':', '_')}.{r['preset']}.onnx"
        if r["model"] not in feeds_of:
            feeds_of[r["model"]] = fs.model_source(r["model"])[1](args.feeds, 1000)
        src = _float_bytes(r["model"]) if args.float else None
        out = compare(Path(args.old) / name, Path(args.new) / name, feeds_of[r["model"]], args.runs, src)
        print(json.dumps({"model": r["model"], "preset": r["preset"], **out}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
