"""Where a calibration pass's runs spend their time, per op type, under two source trees (issue 26 item 1).

``python bench/calibration_op_cost.py MODEL PRESET TREE_A TREE_B [--rounds N] [--feeds N]``: in a
fresh process per tree, quantizes ``MODEL`` (as bench/quantize_stages.py names models) with
``PRESET`` (repair off) and keeps the calibration session's augmented model (the graph plus its
in-graph statistics: calibration/reductions.py); then profiles each tree's augmented model with
onnxruntime's profiler (one intra-op thread, priority order, as calibration opens it) on the first
``--feeds`` calibration feeds, the trees alternating ``--rounds`` times, and prints the kernel
milliseconds per feed by op type for each tree (best round) and their ratio. Kernel time is the
profiler's own sum of each node's run: other jobs on the machine stretch both trees alike within a
round. A tree is a folder holding ``src/`` (``git archive <commit> src | tar -x -C <folder>``).

    python bench/calibration_op_cost.py new:tinyocr_det A8W8 /work/cache/mxquant/base /work/cache/mxquant/new
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

SAVE = r'''
import dataclasses, logging, pickle, sys
sys.path[:0] = [{src!r}, {root!r}, {bench!r}]
import onnx
import quantize_stages as qs
from onnxptq import quantize
from onnxptq.config.presets import get_preset
from onnxptq.calibration import runner
path, data = qs._data({model!r}, 0)
logging.disable(logging.WARNING)
cfg = get_preset({preset!r})
cfg = cfg.replace(calibration=dataclasses.replace(cfg.calibration, progress=False), repair=False)
opened = runner._session
def keep(model, *a, **k):
    onnx.save(model, {out!r})
    return opened(model, *a, **k)
runner._session = keep
pickle.dump(data[:{feeds}], open({feeds_out!r}, "wb"))
quantize(path, cfg, data, {out!r} + ".q.onnx")
'''

PROFILE = r'''
import collections, json, os, pickle, sys
import numpy as np
import onnxruntime as ort
model, feeds = sys.argv[1], pickle.load(open(sys.argv[2], "rb"))
options = ort.SessionOptions()
options.log_severity_level = 3
options.intra_op_num_threads = 1
options.execution_order = ort.ExecutionOrder.PRIORITY_BASED
options.add_session_config_entry("session.intra_op.allow_spinning", "0")
options.enable_profiling = True
options.profile_file_prefix = sys.argv[3]
session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
names = [o.name for o in session.get_outputs()]
inputs = {i.name for i in session.get_inputs()}
for feed in feeds:
    feed = dict(feed)
    if "__onnxptq_calib_rows" in inputs:
        feed["__onnxptq_calib_rows"] = np.array([1, -1], np.int64)
    session.run(names, feed)
trace = session.end_profiling()
by = collections.Counter()
for e in json.load(open(trace)):
    if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
        by[e["args"]["op_name"]] += e["dur"] / 1000.0 / len(feeds)
os.remove(trace)
print(json.dumps(by))
'''


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("preset")
    ap.add_argument("trees", nargs=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--feeds", type=int, default=4)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="calibration_op_cost_")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    saved = {}
    for i, tree in enumerate(args.trees):
        out = os.path.join(tmp, f"cal{i}.onnx")
        code = SAVE.format(src=os.path.join(tree, "src"), root=ROOT, bench=HERE, model=args.model, preset=args.preset,
                           out=out, feeds=args.feeds, feeds_out=os.path.join(tmp, "feeds.pkl"))
        subprocess.run([sys.executable, "-c", code], check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        saved[tree] = out
    best: dict[str, dict[str, float]] = {}
    for r in range(args.rounds):
        for tree in (args.trees if r % 2 == 0 else args.trees[::-1]):
            got = subprocess.run([sys.executable, "-c", PROFILE, saved[tree], os.path.join(tmp, "feeds.pkl"), os.path.join(tmp, "prof")],
                                 check=True, env=env, capture_output=True, text=True).stdout
            by = json.loads(got.strip().splitlines()[-1])
            if tree not in best or sum(by.values()) < sum(best[tree].values()):
                best[tree] = by
    a, b = (best[t] for t in args.trees)
    print(f"## {args.model} {args.preset}: calibration kernel ms per feed (best of {args.rounds}, {args.feeds} feeds)")
    print(f"| op | {args.trees[0]} | {args.trees[1]} |")
    print("|---|---:|---:|")
    ops = sorted(set(a) | set(b), key=lambda o: -max(a.get(o, 0.0), b.get(o, 0.0)))
    for op in ops[:12]:
        print(f"| {op} | {a.get(op, 0.0):.1f} | {b.get(op, 0.0):.1f} |")
    ta, tb = sum(a.values()), sum(b.values())
    print(f"| **all** | **{ta:.1f}** | **{tb:.1f}** (÷ {tb / ta:.2f}) |")
    with open(os.path.join(tmp, "best.pkl"), "wb") as fh:
        pickle.dump(best, fh)


if __name__ == "__main__":
    main()
