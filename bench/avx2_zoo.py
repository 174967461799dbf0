"""A8W8 on a CPU without VNNI, across the zoo and the outside models: the saturation guard on and off.

Why: every zoo and outside-model verdict before the U8S8 saturation guard (bench/RESULTS.md, "The U8S8
saturation guard") came from a VNNI machine, where onnxruntime's integer GEMMs sum in int32. Here
(x86 AVX2, no VNNI) its U8S8 kernels add uint8 × int8 pairs in int16 and saturate. Two modes, each
(model) in a forked child with a wall-clock limit:

* ``screen``: one A8W8 build with the guard off and repair off (``saturation_guard="off", repair=False``);
  the same bytes with ``graph/passes/unsigned_gemm_weights`` applied are what the guard delivers (the
  pass is the build's last step, so they are the guarded build's bytes, repair off). The task metric
  vs float on held-out feeds three ways: guard off as onnxruntime runs it (fused kernels), guard on as
  run, and guard off with no graph optimisation (the Q/DQ model computed in float: what int32 sums
  give, up to requantization rounding). A row whose "on, as run" misses "no opt" by more than a
  few reads is a saturation (or other kernel) gap the guard does not cover.
* ``full``: the user's call with defaults (repair on): A8W8 guard "auto", A8W8 guard "off", and A16W8
  (the control: 16-bit activations have no integer kernels): agreement, output cosine, the floor's
  verdict as delivered (``result.floor``), what repair kept, quantize wall seconds and the 1-thread
  latency of the delivered model over float's (interleaved, best of 2 passes, as bench/zoo.py).

    PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 nice -n 5 python bench/avx2_zoo.py full --models magika,lac --json OUT.json
    PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 nice -n 5 python bench/avx2_zoo.py screen --models nsfw,isbnx_yolo --json OUT.json

Model names: a zoo name (testkit.zoo) or an outside model (bench/newmodels.py MODELS, its feed makers
with --calib / --held feeds, seeds 1 and 1000 as bench/floor_verdicts.py record uses).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import multiprocessing as mp
import os
import sys
import time
import traceback
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402,F401 - the repository root on sys.path
from zoo import verdict_state as _verdict_state  # noqa: E402 - the zoo table's words for the floor as delivered

FLOORS = {"A8W8": 0.95, "A16W8": 0.97}


@dataclasses.dataclass
class Case:
    """One model with its feeds, its task metric and where it lives."""

    name: str
    path: Path
    calib: list
    held: list
    metric_name: str
    metric: object  # (ref, test, feeds, root) -> float
    root: object = None


def load_case(name: str, calib: int, held: int) -> Case:
    from testkit import zoo

    if name in {m.name for m in zoo.ZOO}:
        m = zoo.get(name)
        return Case(name, m.path(), list(m.samples("calibration")), list(m.samples("heldout")), m.metric_name,
                    m.metric, m.root())
    import newmodels as nm

    rel, make, metric_name, metric = nm.MODELS[name]
    return Case(name, nm.SRC / rel, make(calib, 1), make(held, 1000), metric_name, metric)


def _runner(model, optimization: str = "all"):
    """A 1-thread CPU runner of a path or ModelProto; ``optimization="none"``: no graph optimisation."""
    import onnx

    src = model if isinstance(model, onnx.ModelProto) else str(model)
    sess = _common.session(src, threads=1, inter_op_threads=1, optimization=optimization)
    names = {i.name for i in sess.get_inputs()}
    return lambda feed: sess.run(None, {k: v for k, v in feed.items() if k in names})


def _memo(run, feeds):
    cache: dict[int, list] = {}

    def memo(feed):
        key = id(feed)
        if key not in cache:
            cache[key] = run(feed)
        return cache[key]

    return memo


def _agreement(case: Case, ref, model, optimization: str = "all") -> tuple[float, float, object]:
    from testkit import zoo

    test = _memo(_runner(model, optimization), case.held)
    agr = float(case.metric(ref, test, case.held, case.root))
    return round(agr, 4), round(float(zoo.output_cosine(ref, test, case.held)), 6), test


def _rewritten_weights(model) -> int:
    from onnxptq.graph.passes.unsigned_gemm_weights import unsigned_gemm_weights

    return unsigned_gemm_weights(model)


def screen(case: Case) -> dict:
    import onnxptq
    from onnxptq.config.presets import get_preset

    ref = _memo(_runner(case.path), case.held)
    cfg = dataclasses.replace(get_preset("A8W8"), saturation_guard="off", repair=False)
    t0 = time.perf_counter()
    result = onnxptq.quantize(str(case.path), cfg, data=list(case.calib))
    row: dict = {"model": case.name, "metric": case.metric_name, "quantize_s": round(time.perf_counter() - t0, 1),
                 "floor_off_norepair": _verdict_state(result.floor)}
    off = result.model
    on = copy.deepcopy(off)
    row["weights_rewritten"] = _rewritten_weights(on)
    row["off_run"], row["off_run_cos"], _ = _agreement(case, ref, off)
    if row["weights_rewritten"]:
        row["on_run"], row["on_run_cos"], _ = _agreement(case, ref, on)
    else:
        row["on_run"], row["on_run_cos"] = row["off_run"], row["off_run_cos"]
    row["off_noopt"], row["off_noopt_cos"], _ = _agreement(case, ref, off, "none")
    return row


CONFIGS = {"A8W8 guard auto": ("A8W8", "auto"), "A8W8 guard off": ("A8W8", "off"), "A16W8": ("A16W8", "auto")}


def full(case: Case, out_dir: Path, labels: list[str]) -> list[dict]:
    import onnxptq
    from onnxptq.config.presets import get_preset

    from zoo import _repair_kept

    ref_run = _runner(case.path)
    ref = _memo(ref_run, case.held)
    rows = []
    for label in labels:
        preset, guard = CONFIGS[label]
        row: dict = {"model": case.name, "metric": case.metric_name, "config": label, "floor": FLOORS[preset]}
        cfg = dataclasses.replace(get_preset(preset), saturation_guard=guard)
        output = out_dir / f"{case.name}.{preset}.{guard}.onnx"
        t0 = time.perf_counter()
        try:
            result = onnxptq.quantize(str(case.path), cfg, data=list(case.calib), output=str(output))
        except Exception as exc:  # noqa: BLE001 - recorded, never fatal
            row.update(status="exception", error=f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
            rows.append(row)
            continue
        row["quantize_s"] = round(time.perf_counter() - t0, 1)
        row["verdict"] = _verdict_state(result.floor)
        row["repair"] = _repair_kept(result)
        rep = getattr(result, "repair", None)
        if isinstance(rep, dict) and rep.get("stepped_up"):  # zoo._repair_kept names float nodes only
            row["repair"] = f"{len(rep['stepped_up'])} stepped up ({next(iter(rep['stepped_up'].values()))[:60]}); " + row["repair"]
        if isinstance(rep, dict) and rep.get("before_text"):
            row["before"] = str(rep["before_text"])[:200]
        row["agreement"], row["cosine"], test = _agreement(case, ref, output)
        row["latency_ratio"] = round(_common.interleaved_ratio(ref_run, _runner(output), case.held[:4], 2), 3)
        row["status"] = "ok" if row["agreement"] >= FLOORS[preset] else "below floor"
        if row["status"] != "ok" and row["verdict"].startswith("holds"):
            row["status"] = "SILENT"
        rows.append(row)
        for f in out_dir.glob(f"{output.name}*"):
            f.unlink()
    return rows


def _child(mode: str, name: str, calib: int, held: int, out_dir: str, queue, label: str = "") -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import logging

    logging.basicConfig(level=logging.ERROR)
    try:
        case = load_case(name, calib, held)
        queue.put(screen(case) if mode == "screen" else full(case, Path(out_dir), [label]))
    except BaseException as exc:  # noqa: BLE001 - the parent always gets a row
        queue.put({"model": name, "config": label, "status": "exception", "error": f"{type(exc).__name__}: {str(exc)[:200]}",
                   "trace": traceback.format_exc()[-1500:]})


def isolated(mode: str, name: str, calib: int, held: int, out_dir: Path, timeout: float, label: str = ""):
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(mode, name, calib, held, str(out_dir), queue, label))
    t0 = time.perf_counter()
    proc.start()
    while time.perf_counter() - t0 < timeout:
        try:
            got = queue.get(timeout=1.0)
            proc.join(timeout=30)
            return got
        except Exception:  # noqa: BLE001 - queue.Empty: still running
            if not proc.is_alive():
                try:
                    return queue.get(timeout=2.0)
                except Exception:  # noqa: BLE001
                    return {"model": name, "config": label, "status": "crashed", "error": f"child exit {proc.exitcode}"}
    proc.kill()
    proc.join()
    return {"model": name, "config": label, "status": "timeout", "error": f"no result within {timeout:.0f} s"}


def _cell(v, spec: str = ".3f") -> str:
    return "-" if v is None else format(v, spec) if isinstance(v, (int, float)) else str(v)


def table(rows: list[dict], mode: str) -> str:
    """The rows of a ``full`` or ``screen`` JSON as one Markdown table (bench/RESULTS.md)."""
    if mode == "screen":
        out = ["| model | metric | fused weights stored u8 | guard off, as run | guard on, as run | guard off, no graph opt. "
               "(int32 sums) | off − on | floor (off, repair off) | quantize s | load |",
               "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for r in rows:
            if "off_run" not in r:
                out.append(f"| {r['model']} | - | - | - | - | - | - | - | - | {r.get('load', '-')} | {r.get('error', r.get('status'))} |")
                continue
            diff = r["off_run"] - r["on_run"]
            out.append(f"| {r['model']} | {r['metric']} | {r['weights_rewritten']} | {r['off_run']:.3f} (cos {r['off_run_cos']:.4f}) | "
                       f"{r['on_run']:.3f} (cos {r['on_run_cos']:.4f}) | {r['off_noopt']:.3f} (cos {r['off_noopt_cos']:.4f}) | "
                       f"{'**' if abs(diff) > 0.02 else ''}{diff:+.3f}{'**' if abs(diff) > 0.02 else ''} | {r['floor_off_norepair'][:60]} | "
                       f"{r['quantize_s']} | {r.get('load', '-')} |")
        return "\n".join(out) + "\n"
    out = ["| model | metric | config | agreement | cosine | floor's verdict (as delivered) | repair kept | quantize s | "
           "latency × float (1 thread, loaded) | status | load |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        agr = _cell(r.get("agreement"))
        if r.get("agreement") is not None and r["agreement"] < r["floor"]:
            agr = f"**{agr}**"
        status = r.get("status", "-")
        if status == "SILENT" and "not judged" in r.get("verdict", ""):
            status = "below floor, not judged (said)"
        repair = (r.get("repair") or "-").replace("|", "/")[:70]
        out.append(f"| {r['model']} | {r.get('metric', '')} | {r.get('config', '')} | {agr} | {_cell(r.get('cosine'), '.4f')} | "
                   f"{r.get('verdict', r.get('error', '-'))[:70]} | {repair} | {_cell(r.get('quantize_s'), '.1f')} | "
                   f"{_cell(r.get('latency_ratio'), '.2f')} | {status} | {r.get('load', '-')} |")
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=("screen", "full", "table-screen", "table-full"),
                    help="run a mode, or print a JSON's rows as a table")
    ap.add_argument("--models", default="", help="zoo or outside-model names, comma-separated")
    ap.add_argument("--json", required=True, help="rows (read first: models already in it are skipped)")
    for flag, kind, default, text in (("--calib", int, 12, "calibration feeds (outside models)"),
                                      ("--held", int, 32, "held-out feeds (outside models)"),
                                      ("--timeout", float, 300, "seconds per child"),
                                      ("--out-dir", str, "/tmp", "where delivered models are written, then removed")):
        ap.add_argument(flag, type=kind, default=default, help=text)
    args = ap.parse_args()
    path = Path(args.json)
    rows = json.loads(path.read_text())["rows"] if path.exists() else []
    if args.mode.startswith("table-"):
        print(table(rows, args.mode[len("table-"):]), end="")
        return
    done = {(r["model"], r.get("config", "")) for r in rows}
    labels = list(CONFIGS) if args.mode == "full" else [""]
    load = os.getloadavg()[0]
    # configs outermost: a time-limited run has both guard settings of every model before any control
    for name, label in [(n, c) for c in labels for n in args.models.split(",") if n if (n, c) not in done]:
        got = isolated(args.mode, name, args.calib, args.held, Path(args.out_dir), args.timeout, label)
        for row in got if isinstance(got, list) else [got]:
            row["load"] = round(load, 1)
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "trace"}), flush=True)
        load = os.getloadavg()[0]
        tmp = path.with_suffix(".part")
        tmp.write_text(json.dumps({"command": " ".join(sys.argv), "rows": rows}, indent=1))
        os.replace(tmp, path)


if __name__ == "__main__":
    main()
