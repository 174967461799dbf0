"""Repair's work-second estimate against the CPU it stands for, row by row, and the constants fitted to them (issue 27
item 2, issue 26's 60 s; algorithms/repair_cost.py).

``python bench/repair_cost_fit.py run MODEL PRESET TREE [--feeds N] [--jsonl FILE]`` quantizes MODEL with PRESET at its
defaults (floor and repair on) in a fresh process on TREE's ``src/`` and prints (and appends to FILE) one JSON line:

* the graph's work as repair counted it (``work``: MACs, activation elements, weights, nodes), how many calibration
  feeds and judged feeds the plain estimate counted (``calib``, ``judged``: in reference feeds, by input size) and the
  block factor;
* the plain quantization: ``plain_units`` (estimated) against ``plain_cpu`` (``time.process_time`` from calibration to
  repair, the record's ``plain_cpu_seconds``);
* each candidate build: ``build_units`` against ``build_cpu_seconds`` (the record's), and whether it was ``fresh`` (its
  weight formats built the first time: derived from its units);
* the delivered build (``complete``, wrapped): its estimate (``delivery_units``) against its CPU; the ranking's CPU;
* the search's ``spent_units``/``budget_units`` against its CPU (``cpu_seconds``), the call's CPU, the kept nodes,
  the floor's verdict after repair and the file's sha256.

MODEL: a zoo name (testkit/zoo.py, its package's feeds at the zoo's calibration seed, ``--feeds`` of them), ``sbcls``
(PP-OCR cls on same_bytes' 32 rendered lines), ``sbrec`` (PP-OCRv4 rec on tests/test_quantize_ppocr.py's 64 lines in
feeds of 8) or ``new:<name>`` (bench/newmodels.py, ``NEWMODELS<N>_SRC`` set).

``python bench/repair_cost_fit.py runs MODELS`` times one float run of each model (onnxruntime, one thread, CPU s) beside
its MACs and activation elements as counted, and fits the two run terms on the runs alone.

``python bench/repair_cost_fit.py fit FILE`` refits the constants (relative least squares over every plain, build and
delivered row) and prints the table of estimate ÷ CPU per row under the module's constants and under the fit.

    PYTHONPATH=src:.:bench python bench/repair_cost_fit.py run ddddocr_det A8W8 . --feeds 32 --jsonl rows.jsonl
    PYTHONPATH=src:.:bench python bench/repair_cost_fit.py fit rows.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))

CHILD = r'''
import dataclasses, hashlib, json, logging, os, sys, tempfile, time
sys.path[:0] = [{root!r} + "/src", {bench!r}, {repo!r}]
import onnxptq
assert onnxptq.__file__.startswith({root!r}), onnxptq.__file__
from onnxptq import quantize
from onnxptq.algorithms import repair
from onnxptq.config.presets import get_preset
logging.disable(logging.WARNING)
cap = {{"complete_cpu": []}}
_gw, _pu, _ru, _complete = repair.graph_work, repair.plain_units, repair.run_units, repair.complete
def graph_work(model, feed, *a, **k):
    t = time.process_time()
    w = _gw(model, feed, *a, **k)
    cap["graph_work_cpu"] = time.process_time() - t
    cap["work"] = dict(w.to_json(), reference_input=w.reference_input)
    cap["ref"] = w
    if {features!r}:  # the same graph and feed counted by another tree's repair_cost.py (a fit of that tree's terms)
        import importlib.util
        spec = importlib.util.spec_from_file_location("repair_cost_other", {features!r} + "/src/onnxptq/algorithms/repair_cost.py")
        other = importlib.util.module_from_spec(spec)
        sys.modules["repair_cost_other"] = other
        spec.loader.exec_module(other)
        t = time.process_time()
        w2 = other.graph_work(model, feed)
        cap["work_features"] = dict(w2.to_json(), reference_input=w2.reference_input, cpu=time.process_time() - t)
        one = w2.run() or 1e-30
        cap["features_scale"] = {{"judged": None}}
        cap["other"] = (other, w2)
    return w
def plain_units(work, calib, judged, factor=1.0):
    calib, judged = list(calib), list(judged)
    one = work.run() or 1e-30
    cap.update(calib=sum(work.run(f) for f in calib) / one, judged=sum(work.run(f) for f in judged) / one, factor=factor)
    if "other" in cap:  # the feeds in the other tree's reference feeds (a run scales by input size: the same ratios)
        _, w2 = cap["other"]
        one2 = w2.run() or 1e-30
        cap["features_scale"] = {{"calib": sum(w2.run(f) for f in calib) / one2, "judged": sum(w2.run(f) for f in judged) / one2}}
    return _pu(work, calib, judged, factor)
def run_units(work, feeds, factor=1.0):
    u = _ru(work, feeds, factor)
    cap.setdefault("run_units", u)
    return u
def complete(*a, **k):
    t = time.process_time()
    try:
        return _complete(*a, **k)
    finally:
        cap["complete_cpu"].append(time.process_time() - t)
repair.graph_work, repair.plain_units, repair.run_units, repair.complete = graph_work, plain_units, run_units, complete
model, n = {model!r}, {feeds}
from repair_cost_fit import _model_data
path, data = _model_data(model, n)
import onnx
params = sum(int(__import__("numpy").prod(t.dims)) for t in onnx.load(path, load_external_data=False).graph.initializer)
from repair_cost_fit import quantize_once
result, cpu, out = quantize_once(path, data, {preset!r})
rep = result.repair or {{}}
held = len(rep.get("stepped_up") or {{}}) + len(rep.get("kept_float") or {{}})
after = rep.get("after") or {{}}
w = cap.pop("ref", None)
cap.pop("other", None)
if w is not None:
    from onnxptq.algorithms import repair_cost as rc
    base = rc.build_units(w, fresh=False) + cap.get("run_units", 0.0)
    fresh = [u - base > 0.5 * rc.NS_PER_WEIGHT * w.weights * 1e-9 for u in rep.get("build_units", [])]
    cap["base_constants"] = {{k: getattr(rc, k) for k in ("NS_PER_MAC", "NS_PER_ELEMENT", "CALIBRATION_RUNS", "PLAIN_NS_PER_NODE",
                                                         "BUILD_NS_PER_NODE", "NS_PER_WEIGHT", "BLOCK_RUNS")}}
else:
    fresh = []
print(json.dumps({{"model": model, "preset": {preset!r}, "feeds": len(data), "params": params,
                  "sha": hashlib.sha256(open(out, "rb").read()).hexdigest()[:16],
                  "cpu": round(cpu, 3), "plain_cpu": rep.get("plain_cpu_seconds"), "plain_units": rep.get("plain_units"),
                  "budget_units": rep.get("budget_units"), "spent_units": rep.get("spent_units"),
                  "repair_cpu": rep.get("cpu_seconds"), "capped": rep.get("capped"), "finished": rep.get("finished"),
                  "bounded": rep.get("bounded"), "bound_units": rep.get("bound_units"),
                  "evaluations": rep.get("evaluations"), "build_units": rep.get("build_units"),
                  "build_cpu": rep.get("build_cpu_seconds"), "fresh": fresh,
                  "delivery_units": (rc.build_units(w, fresh=True) + cap.get("run_units", 0.0)) if w is not None else None,
                  "ranking_cpu": (rep.get("order") or {{}}).get("cpu_seconds"),
                  "held": held, "verdict_after": None if not after else ("holds" if after.get("ok") else "BROKEN"),
                  "note": rep.get("note"), "bound": rep.get("bound"),
                  "load": round(os.getloadavg()[0], 1), **{{k: v for k, v in cap.items()}}}}))
'''


def run(args: argparse.Namespace) -> None:
    root = os.path.abspath(args.tree)
    code = CHILD.format(root=root, bench=HERE, repo=os.path.dirname(HERE), model=args.model, preset=args.preset,
                        feeds=args.feeds, features=os.path.abspath(args.features) if args.features else "")
    line = json.dumps(dict(_child_row(code), tree=root))
    print(line, flush=True)
    if args.jsonl:
        with open(args.jsonl, "a") as f:
            f.write(line + "\n")


def _child_row(code: str) -> dict:
    """The last JSON line a fresh interpreter running ``code`` prints (one OpenMP thread), with its wall seconds."""
    began = time.time()
    done = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, OMP_NUM_THREADS="1"), capture_output=True,
                          text=True)
    if done.returncode:
        sys.exit(done.stderr[-4000:])
    return dict(json.loads(done.stdout.strip().splitlines()[-1]), wall=round(time.time() - began, 1))


def observations(row: dict, consts: dict[str, float], features: bool = True) -> list[tuple[str, float, float]]:
    """(what, estimate under ``consts``, CPU s) for the row's plain quantization, each build and the delivered build;
    ``features``: the graph as the ``--features`` tree counts it (``work_features``), else as the row's tree did."""
    w, scale = (row.get("work_features"), row.get("features_scale")) if features else (row.get("work"), row)
    if not w or not scale or scale.get("judged") is None:
        return []
    run = (consts["NS_PER_MAC"] * w["macs"] + consts["NS_PER_ELEMENT"] * w["elements"]) * 1e-9
    factor = consts["BLOCK_RUNS"] if row.get("factor", 1.0) > 1.0 else 1.0
    runs = run * scale["judged"] * factor
    weights = consts["NS_PER_WEIGHT"] * w["weights"] * 1e-9
    node_b = consts["BUILD_NS_PER_NODE"] * w["nodes"] * 1e-9
    plain = (consts["CALIBRATION_RUNS"] * run * scale["calib"] + consts["PLAIN_NS_PER_NODE"] * w["nodes"] * 1e-9 + weights
             + runs)
    out = [("plain", plain, row["plain_cpu"])]
    for fresh, cpu in zip(row.get("fresh") or [], row.get("build_cpu") or []):
        out.append(("build*" if fresh else "build", node_b + (weights if fresh else 0.0) + runs, cpu))
    if row.get("complete_cpu") and row["complete_cpu"][-1] > 0.3 * (row.get("delivery_units") or 0.0):
        # (a delivered build that took a judged candidate's verdict, pipeline/verify.py, is no build: left out)
        out.append(("delivered", node_b + weights + runs, row["complete_cpu"][-1]))
    return out


def fit(args: argparse.Namespace) -> None:
    import numpy as np
    from scipy.optimize import least_squares

    from onnxptq.algorithms import repair_cost as rc

    rows = [json.loads(line) for line in open(args.jsonl) if line.strip()]
    rows = [r for r in rows if r.get("work_features")]
    names = ["NS_PER_MAC", "NS_PER_ELEMENT", "PLAIN_NS_PER_NODE", "NS_PER_WEIGHT", "BUILD_NS_PER_NODE", "BLOCK_RUNS"]
    fixed = {"CALIBRATION_RUNS": rc.CALIBRATION_RUNS}
    if args.runs:  # the run terms as ``runs`` fitted them on float runs alone: the rest fitted on the builds
        mac, element = (float(x) for x in args.runs.split(","))
        fixed.update(NS_PER_MAC=mac, NS_PER_ELEMENT=element)
        names = [n for n in names if n not in fixed]
    now = {n: getattr(rc, n) for n in names} | fixed

    def residuals(x: np.ndarray) -> np.ndarray:
        consts = dict(zip(names, np.exp(x))) | fixed
        return np.array([np.log(est / cpu) for r in rows for _, est, cpu in observations(r, consts) if cpu > 0])

    x0 = np.log([now[n] for n in names])
    res = least_squares(residuals, x0, loss="soft_l1", f_scale=0.3)
    fitted = dict(zip(names, np.exp(res.x))) | fixed
    print("constants: " + ", ".join(f"{n} {now[n]:g} -> {fitted[n]:.4g}" for n in names) + f" (fixed: {fixed})")
    base = rows[0].get("base_constants") or now
    print("| row | what | CPU s | the row's tree (its count, its constants) | ÷ CPU | this tree's count, fitted | ÷ CPU |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        for (what, est, cpu), (_, est2, _) in zip(observations(r, base, features=False), observations(r, fitted)):
            print(f"| {r['model']} {r['preset']} | {what} | {cpu:.2f} | {est:.2f} | {est / cpu:.2f} | {est2:.2f} | {est2 / cpu:.2f} |")
    for label, consts, feats in (("row's tree", base, False), ("this count, old constants", now, True), ("fitted", fitted, True)):
        ratios = np.array([est / cpu for r in rows for _, est, cpu in observations(r, consts, feats) if cpu > 0])
        print(f"{label}: {len(ratios)} observations, estimate/CPU median {np.median(ratios):.2f}, "
              f"range {ratios.min():.2f}-{ratios.max():.2f}, |log| mean {np.mean(np.abs(np.log(ratios))):.3f}")


def runs(args: argparse.Namespace) -> None:
    """CPU s of one float run of each model (onnxruntime, one thread, as a candidate's session runs) beside the run's
    MACs and activation elements as repair_cost.py counts them on the same feed: the run terms' fit, on runs alone."""
    import numpy as np
    import onnx
    import onnxruntime as ort

    from onnxptq.algorithms import repair_cost as rc

    rows = []
    for model in args.models.split(","):
        path, data = _model_data(model, 8)
        proto = onnx.load(path)
        feed = data[0]
        work = rc.graph_work(proto, feed)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        names = {i.name for i in sess.get_inputs()}
        feed = {k: v for k, v in feed.items() if k in names}
        sess.run(None, feed)
        t = time.process_time()
        n = 0
        while time.process_time() - t < args.seconds or n < 3:
            sess.run(None, feed)
            n += 1
        cpu = (time.process_time() - t) / n
        rows.append((model, work.macs, work.elements, work.nodes, cpu))
        print(json.dumps({"model": model, "macs": work.macs, "elements": work.elements, "nodes": work.nodes, "run_cpu": cpu, "runs": n,
                          "load": round(os.getloadavg()[0], 1)}), flush=True)
    a = np.array([[m, e, k] for _, m, e, k, _ in rows]) * 1e-9
    y = np.array([c for *_, c in rows])
    # relative least squares: each run weighed by its own size; two terms (MACs, elements) and three (with nodes)
    for cols, names in (([0, 1], "NS_PER_MAC NS_PER_ELEMENT"), ([0, 1, 2], "NS_PER_MAC NS_PER_ELEMENT NS_PER_RUN_NODE")):
        coef, *_ = np.linalg.lstsq(a[:, cols] / y[:, None], np.ones(len(y)), rcond=None)
        print(", ".join(f"{n} {c:.4g}" for n, c in zip(names.split(), coef)))
        for (model, m, e, k, c), row in zip(rows, a[:, cols]):
            print(f"| {model} | {m / 1e9:.3f} G | {e / 1e6:.2f} M | {k} | {1e3 * c:.2f} ms | {float(row @ coef) / c:.2f} |")


def quantize_once(path: str, data: list[dict], preset: str) -> tuple[Any, float, str]:
    """``preset`` at its defaults (progress off) on ``path`` and ``data``, saved to a fresh folder: the result, the
    call's CPU s (``time.process_time``) and the file's path."""
    import dataclasses
    import tempfile

    from onnxptq import quantize
    from onnxptq.config.presets import get_preset

    out = os.path.join(tempfile.mkdtemp(prefix="costfit_"), "q.onnx")
    cfg = get_preset(preset)
    cfg = cfg.replace(calibration=dataclasses.replace(cfg.calibration, progress=False))
    started = time.process_time()
    result = quantize(path, cfg, data, out)
    return result, time.process_time() - started, out


def _model_data(model: str, n: int) -> tuple[str, list[dict]]:
    """A row's model file and feeds, as the child makes them (the first ``n``)."""
    sys.path[:0] = [HERE, os.path.dirname(HERE)]
    if model in ("sbcls", "sbrec"):
        from testkit import ocr, ocr_reference
        from testkit.models import model_path
        if model == "sbcls":
            calib, _ = ocr.render_cls(n, seed=1)
            return str(model_path("cls")), [{"x": calib[i:i + 1]} for i in range(len(calib))]
        path = str(model_path("rec"))
        calib = ocr_reference.rec_reference(path, 64, 1, 200, 3)["calib"]
        return path, [{"x": calib[i:i + 8]} for i in range(0, len(calib), 8)]
    if model.startswith("new:"):
        import _common  # noqa: F401
        from quantize_stages import _data
        path, data = _data(model, n)
        return str(path), data
    from testkit import zoo
    member = zoo.get(model)
    return str(member.path()), member.make(member.root(), n, zoo.CALIBRATION_SEED)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("model")
    r.add_argument("preset")
    r.add_argument("tree")
    r.add_argument("--feeds", type=int, default=32)
    r.add_argument("--jsonl")
    r.add_argument("--features", help="a tree whose repair_cost.py counts the same graph too (work_features: the fit's terms)")
    f = sub.add_parser("fit")
    f.add_argument("jsonl")
    f.add_argument("--runs", help="NS_PER_MAC,NS_PER_ELEMENT as ``runs`` fitted them (the rest fitted on the builds)")
    u = sub.add_parser("runs")
    u.add_argument("models")
    u.add_argument("--seconds", type=float, default=2.0)
    args = ap.parse_args()
    {"run": run, "fit": fit, "runs": runs}[args.cmd](args)


if __name__ == "__main__":
    main()
