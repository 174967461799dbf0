"""The issue-27 zoo: every preset, with its defaults, on every zoo model (``testkit.zoo``).

For each (model, preset) pair, in a forked child process with a wall-clock limit
(``--timeout``, default 600 s):

* ``onnxptq.quantize(model, preset, data=<calibration feeds>, output=<tmp>.onnx)`` with no
  other option (a new user's call); **quantize s** is its wall time;
* the saved model and the float model are run on HELD-OUT feeds (another seed: other images,
  clips, files, sentences) with onnxruntime CPU sessions of 1 thread;
* **agreement**: the model's task metric vs float (``ZooModel.metric_name``; a model's further
  metrics, ``ZooModel.also``, follow in brackets); **floor**: 0.97 for
  BF16/FP16/A16W8/BFP16/MX9/MXINT8, 0.95 for A8W8/MXFP8_E4M3 (issue 27's "Must show");
* **cosine**: the worst graph output's cosine vs float, all held-out feeds pooled;
* **latency ×**: the quantized model's 1-thread CPU time per run / the float model's over the first 4 held-out
  feeds: each feed run many times, the two alternately, the fastest run of each kept (:func:`_latency_ratio`; a
  quiet machine's figure within ~15 % at load 20, where wall-clock passes were off by 25×);
* **size ×**: the saved file (plus external data) / the float model's;
* ``interface_kept`` (JSON rows only): every graph input and output keeps its element type
  (an fp16 model stays fp16 at its interface);
* **repair kept**: what the accuracy-floor repair kept at higher precision, read from the result
  (``result.repair`` / ``result.plan.repair`` when the library has them), else "-";
* exceptions are caught in the child and recorded as ``Type: first line``; a child that passes
  the limit is killed and recorded as ``timeout``; a child that dies is recorded with its exit code.

Results go to ``bench/RESULTS_zoo.json`` (rewritten after every pair, so a partial run keeps
what it measured) and, as one table, to the "Zoo (issue 27)" section of ``bench/RESULTS.md``.

    PYTHONPATH=src:. python bench/zoo.py                       # everything
    PYTHONPATH=src:. python bench/zoo.py --models magika,lac --presets A8W8,BF16
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing as mp
import os
import platform
import shlex
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

import _common  # noqa: F401,E402 - the repository root (testkit/) on sys.path

from testkit import zoo  # noqa: E402
from onnxptq.pipeline.runtime import integer_gemm_saturates  # noqa: E402

HERE = Path(__file__).resolve().parent

PRESETS = ("BF16", "FP16", "A16W8", "A8W8", "BFP16", "MX9", "MXINT8", "MXFP8_E4M3")
FLOORS = {"BF16": 0.97, "FP16": 0.97, "A16W8": 0.97, "BFP16": 0.97, "MX9": 0.97, "MXINT8": 0.97,
          "A8W8": 0.95, "MXFP8_E4M3": 0.95}
SECTION = "## Zoo (issue 27)"


def floor(preset: str) -> float:
    return FLOORS.get(preset, 0.95)


def _file_size(path: Path) -> int:
    """The model file plus any external-data files beside it that it names."""
    import onnx

    size = path.stat().st_size
    model = onnx.load(str(path), load_external_data=False)
    seen = set()
    for t in model.graph.initializer:
        for e in t.external_data:
            if e.key == "location" and e.value not in seen:
                seen.add(e.value)
                size += (path.parent / e.value).stat().st_size
    return size


def _interface(path: Path) -> dict[str, str]:
    """Each graph input's and output's element type: a quantized fp16 model must still take and
    give fp16 (recorded in the JSON rows as ``interface_kept``)."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    return {v.name: onnx.TensorProto.DataType.Name(v.type.tensor_type.elem_type) for v in list(graph.input) + list(graph.output)}


def _memo(run, feeds):
    """``run`` with its outputs on the held-out feeds kept: the metric, the cosine and nothing
    else then share one inference per feed (other inputs, e.g. a streaming state, still run)."""
    index = {id(f): i for i, f in enumerate(feeds)}
    cache: dict[int, list] = {}

    def memo(feed):
        i = index.get(id(feed))
        if i is None or feeds[i] is not feed:
            return run(feed)
        if i not in cache:
            cache[i] = run(feed)
        return cache[i]

    return memo


#: the latency column's rounds: at least LATENCY_MIN_ROUNDS, then more until the float side has spent
#: LATENCY_CPU_S CPU seconds, never more than LATENCY_MAX_ROUNDS or LATENCY_WALL_S wall seconds
LATENCY_MIN_ROUNDS, LATENCY_MAX_ROUNDS, LATENCY_CPU_S, LATENCY_WALL_S = 3, 1000, 1.0, 120.0


def _latency_ratio(ref, test, feeds, *, min_rounds: int = LATENCY_MIN_ROUNDS, max_rounds: int = LATENCY_MAX_ROUNDS,
                   cpu_s: float = LATENCY_CPU_S, wall_s: float = LATENCY_WALL_S, clock=time.process_time) -> float:
    """The quantized model's 1-thread time per run ÷ the float model's, as a quiet machine gives it.

    Each run is timed by the process's CPU clock, not the wall clock: on the shared machine at load 20 a wall-clock
    run that was preempted counted the other processes' time (romanizer_encoder BF16 25.4×, A16W8 0.07× in zoo19's
    table, from two passes over 4 feeds). A 1-thread onnxruntime session computes on the calling thread, so the CPU
    clock counts its work alone. Preemption still costs a run some CPU (cold caches after a switch), so every feed
    is run many times, the two models alternately and in alternating order (a run that follows the other model's
    sees the caches that model left), and each feed's *fastest* run of each model is kept: the quiet figure is the
    least a run costs. The ratio is of the sums of those minima over the feeds (each feed weighed by its own cost)."""
    best_ref, best_test = [float("inf")] * len(feeds), [float("inf")] * len(feeds)
    spent, rounds, t0 = 0.0, 0, time.perf_counter()
    while rounds < min_rounds or (spent < cpu_s and rounds < max_rounds and time.perf_counter() - t0 < wall_s):
        for i, feed in enumerate(feeds):
            for side in ((0, 1) if (rounds + i) % 2 == 0 else (1, 0)):
                c = clock()
                (ref if side == 0 else test)(feed)
                took = clock() - c
                if side == 0:
                    best_ref[i], spent = min(best_ref[i], took), spent + took
                else:
                    best_test[i] = min(best_test[i], took)
        rounds += 1
    return sum(best_test) / max(sum(best_ref), 1e-9)


def _repair_kept(result) -> str:
    """What the accuracy-floor repair kept, if this version of the library reports it."""
    rep = getattr(result, "repair", None)
    if isinstance(rep, dict) and rep.get("unjudged") and "kept_float" not in rep:
        if rep.get("note"):  # the floor's own words (a mask's IoU bound, a share's interval), not a row count
            return f"not judged: {rep['note']}"[:300]
        outs = rep.get("before", {}).get("outputs", {})
        def _count(o: dict) -> str:
            pos = o.get("positions")
            return f"{pos['reads']} reads" if pos else f"{o.get('rows', '?')} rows"
        return "; ".join(f"not judged: {o}: {_count(outs.get(o, {}))}, needs {outs.get(o, {}).get('needed', '?')}"
                         for o in rep["unjudged"])
    if isinstance(rep, dict) and "kept_float" in rep:
        # Repair keeps nodes float or steps them up to the next format of the family (algorithms/step_up.py);
        # both are what repair kept. Reading ``kept_float`` alone printed "nothing kept" where it had stepped
        # every node of ddddocr_ocr MXFP8_E4M3 to MXINT8 (bench/RESULTS.md, zoodata17).
        ops = rep.get("op_types", {})
        parts = []
        for names, what in ((list(rep["kept_float"]), "float"), (list(rep.get("stepped_up") or {}), "stepped up")):
            if names:
                shown = ", ".join(f"{n} ({ops.get(n, '?')})" for n in names[:5])
                how = ""
                if what == "stepped up":  # "<reason>: <from> → <to>" is the same for every stepped node
                    how = f" ({str(rep['stepped_up'][names[0]]).split(': ', 1)[-1]})"
                parts.append(f"{len(names)} {what}{how}: {shown}{' …' if len(names) > 5 else ''}")
        return "; ".join(parts) or "nothing kept"
    for owner in (result, getattr(result, "plan", None)):
        for attr in ("repair", "repaired", "repair_kept", "kept_nodes"):
            value = getattr(owner, attr, None) if owner is not None else None
            if value:
                if isinstance(value, dict):
                    return "; ".join(f"{k}: {v}" for k, v in value.items())[:300]
                if isinstance(value, (list, tuple, set)):
                    return ", ".join(map(str, value))[:300]
                return str(value)[:300]
    return "-"


def verdict_state(verdict) -> str:
    """The library's floor as delivered (``result.floor``), in the words its summary uses: "holds",
    "holds (warned)", "holds (not judged)", "could not confirm", "broken: …" or "no verdict". A row below
    the bench's floor whose state is a bare "holds" is SILENT: the summary said nothing of the break."""
    if verdict is None:
        return "no verdict"
    if not verdict.ok:
        return "broken: " + verdict.describe(only_broken=True)[:160].replace("\n", " ")
    if getattr(verdict, "unconfirmed", None):
        return "could not confirm"
    if verdict.unjudged:
        return "holds (not judged)"
    return "holds (warned)" if verdict.advisories else "holds"


def row_status(agreement: float, preset: str, verdict: str | None) -> str:
    """"ok" at or above the preset's floor; below it, "below floor, SILENT" where the library's floor said a
    bare "holds" (:func:`verdict_state`; rows measured before it was recorded carry no verdict: "below floor")."""
    if agreement >= floor(preset):
        return "ok"
    return "below floor, SILENT" if verdict == "holds" else "below floor"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:400]


def _isa() -> str:
    """The widest x86 vector extensions /proc/cpuinfo lists that onnxruntime's kernels dispatch on ("" elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            flags = next((line.split(":", 1)[1].split() for line in fh if line.startswith("flags")), [])
    except OSError:
        return ""
    wanted = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_int8")
    return ",".join(f for f in wanted if f in flags)


def run_pair(model: zoo.ZooModel, preset: str, calib, heldout, out_dir: Path) -> dict:
    """Quantize one model with one preset and measure it (runs in the child)."""
    import logging

    import onnxptq

    logging.basicConfig(level=logging.WARNING)
    row: dict = {"model": model.name, "preset": preset, "metric": model.metric_name, "floor": floor(preset),
                 "library": os.environ.get("ZOO_LIBRARY", ""),
                 # the 1-minute load average as the pair starts: on the shared machine wall seconds and latency
                 # ratios are read beside it (the CPU s and the agreements do not depend on it)
                 "load": round(os.getloadavg()[0], 1),
                 # the machine's integer kernels: A8W8 figures and float's near-tie reads move with them alone
                 # (zoo22: the same code read 0.9901 on AVX2 and 0.9851 on AVX-512 VNNI for ddddocr_det A8W8)
                 "isa": _isa(), "int8_sums_saturate": integer_gemm_saturates()}
    root = model.root()
    ref_run = zoo.session_runner(model.path())
    ref = _memo(ref_run, heldout)
    output = out_dir / f"{model.name}.{preset}.onnx"
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        result = onnxptq.quantize(str(model.path()), preset, data=list(calib), output=str(output))
    except Exception as exc:  # recorded, never fatal
        # A documented refusal that names its reason (nothing left to quantize once the structure
        # rules kept what would break the model float) is not a raw exception; it still counts
        # as below the floor (no model delivered).
        refused = type(exc).__name__ == "NothingToQuantizeError"
        row.update(status="refused" if refused else "exception", error=_first_line(exc) if not refused else
                   f"refused (NothingToQuantizeError, documented): {str(exc)[:600]}",
                   quantize_s=round(time.perf_counter() - t0, 2), trace=traceback.format_exc()[-2000:])
        return row
    row["quantize_s"], row["quantize_cpu_s"] = round(time.perf_counter() - t0, 2), round(time.process_time() - c0, 2)
    row["repair"] = _repair_kept(result)
    row["verdict"] = verdict_state(getattr(result, "floor", None))
    rep = getattr(result, "repair", None)
    if isinstance(rep, dict) and "kept_float" in rep:  # the search's cost: builds, nodes, wall s, stopped by its budget?
        row["repair_search"] = {k: rep.get(k) for k in ("evaluations", "candidates", "seconds", "budget_units", "finished", "search",
                                                         "cpu_seconds", "plain_cpu_seconds", "below")}
    try:
        row["summary_cosine"] = min((m.get("cosine", float("nan")) for m in result.metrics.values()), default=None)
        test_run = zoo.session_runner(output)
        test = _memo(test_run, heldout)
        row["agreement"] = round(float(model.metric(ref, test, heldout, root)), 4)
        also = getattr(model, "also", ())  # further task metrics (e.g. the package's ROI boxes)
        if also:
            row["also"] = {name: round(float(m(ref, test, heldout, root)), 4) for name, m in also}
        row["cosine"] = round(float(zoo.output_cosine(ref, test, heldout)), 6)
        row["latency_ratio"] = round(_latency_ratio(ref_run, test_run, heldout[: min(len(heldout), 4)]), 3)
        row["size_ratio"] = round(_file_size(output) / _file_size(model.path()), 3)
        row["interface_kept"] = _interface(output) == _interface(model.path())
        row["status"] = row_status(row["agreement"], preset, row["verdict"])
    except Exception as exc:
        row.update(status="exception", error="evaluating: " + _first_line(exc), trace=traceback.format_exc()[-2000:])
    return row


def _child(model_name, preset, calib, heldout, out_dir, queue):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        queue.put(run_pair(zoo.get(model_name), preset, calib, heldout, Path(out_dir)))
    except BaseException as exc:  # noqa: BLE001 - the parent must always get a row
        queue.put({"model": model_name, "preset": preset, "status": "exception", "error": _first_line(exc)})


def run_isolated(model: zoo.ZooModel, preset: str, calib, heldout, out_dir: Path, timeout: float) -> dict:
    ctx = mp.get_context("fork")  # the feeds reach the child without pickling
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(model.name, preset, calib, heldout, str(out_dir), queue))
    t0 = time.perf_counter()
    proc.start()
    row = None
    while proc.is_alive() and time.perf_counter() - t0 < timeout:
        try:
            row = queue.get(timeout=1.0)
            break
        except Exception:
            continue
    if row is None:
        try:
            row = queue.get(timeout=2.0)
        except Exception:
            row = None
    if proc.is_alive() and row is None:
        proc.kill()
        proc.join()
        return {"model": model.name, "preset": preset, "metric": model.metric_name, "floor": floor(preset),
                "status": "timeout", "error": f"timeout: no result within {timeout:.0f} s"}
    proc.join(timeout=30)
    if row is None:
        return {"model": model.name, "preset": preset, "metric": model.metric_name, "floor": floor(preset),
                "status": "crashed", "error": f"child exited with code {proc.exitcode}"}
    return row


def _fmt(v, spec=".3f") -> str:
    return "-" if v is None else format(v, spec) if isinstance(v, (int, float)) else str(v)


def _quantize_cell(row: dict) -> str:
    """quantize's CPU seconds, its wall seconds beside them: on the shared machine the wall time is mostly the
    other processes' (a pair at load 35 ran 46 s wall for 14 CPU s), so the CPU figure is the one to compare."""
    cpu, wall = row.get("quantize_cpu_s"), row.get("quantize_s")
    return _fmt(wall, ".1f") if cpu is None else f"{cpu:.1f} ({_fmt(wall, '.0f')})"


def _said(row: dict) -> str:
    """The "floor said" cell: the verdict, SILENT in bold where the row is below the floor and it said "holds"."""
    said = row.get("verdict") or "-"
    return f"**SILENT** ({said})" if row.get("status") == "below floor, SILENT" else said


def table(rows: list[dict], models: list[zoo.ZooModel], command: str) -> str:
    lines = [SECTION, "",
             f"Measured {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC on {platform.machine()} "
             f"({os.cpu_count()} cores, shared), onnxruntime CPU, with:", "", f"    {command}", "",
             "Every preset with its defaults (`onnxptq.quantize(model, preset, data=calibration feeds, output=...)`); "
             "agreement with the float model on HELD-OUT feeds (other seed) by each model's task metric; "
             "floor 0.97 (BF16, FP16, A16W8, BFP16, MX9, MXINT8) or 0.95 (A8W8, MXFP8_E4M3); "
             "**bold** = below the floor. cosine: worst output, held-out feeds pooled. quantize: CPU s of the call (wall s). latency ×: 1-thread "
             "CPU time per run, quantized/float, each of 4 held-out feeds' fastest of ≥ 3 alternating runs, more until float spent 1 CPU s (rows measured before zoo20: "
             "wall time, best of 2 passes, not a figure at load). size ×: file size ratio. repair kept: what the repair reported (\"-\": none reported). "
             "library: which onnxptq measured the row (\"before repair\": this branch before main's accuracy-floor repair was "
             "merged; \"with repair (main f2d5cff)\": rerun after it; \"zoo 0922df7\": with the floor, repair, corner-case "
             "fixes and structure rules merged, before the log-domain and carried-state rules, which find nothing on that "
             "row's graph unless it is oww_melspectrogram or silero_half; \"zoo <commit>\" after them: set ZOO_LIBRARY). "
             "Raw rows: `bench/RESULTS_zoo.json`; what stays below the floor and why: the findings after the table.", "",
             "floor said: the library's floor as delivered (`verdict_state`; SILENT: below the floor here while it said a "
             "bare \"holds\"; \"-\": a row measured before the verdict was recorded).", "",
             "| model | metric | preset | agreement | cosine | quantize CPU s (wall s) | latency × | size × | repair kept | floor said | library | error |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    order = {m.name: i for i, m in enumerate(models)}
    for r in sorted(rows, key=lambda r: (order.get(r["model"], 99), PRESETS.index(r["preset"]) if r["preset"] in PRESETS else 99)):
        agr = r.get("agreement")
        agr_s = _fmt(agr)
        if agr is None or agr < r.get("floor", 0.95):
            agr_s = f"**{agr_s}**"
        if r.get("also"):  # reported beside the task metric, never instead of it
            agr_s += "".join(f" ({name} {_fmt(v)})" for name, v in r["also"].items())
        err = (r.get("error") or "").replace("|", "\\|")
        lines.append(f"| {r['model']} | {r.get('metric', '')} | {r['preset']} | {agr_s} | {_fmt(r.get('cosine'), '.4f')} | "
                     f"{_quantize_cell(r)} | {_fmt(r.get('latency_ratio'), '.2f')} | {_fmt(r.get('size_ratio'), '.2f')} | "
                     f"{r.get('repair', '-') or '-'} | {_said(r)} | {r.get('library') or 'before repair'} | {err} |")
    have = {(r["model"], r["preset"]) for r in rows}
    for m in models:  # pairs a time-limited run did not reach are listed, never silently absent
        for p in PRESETS:
            if (m.name, p) not in have:
                lines.append(f"| {m.name} | {m.metric_name} | {p} | not measured | - | - | - | - | - | - | - | not reached in this run (time) |")
    failing = [r for r in rows if r.get("agreement") is None or r["agreement"] < r.get("floor", 0.95)]
    lines += ["", f"{len(rows)} pairs measured, {len(rows) - len(failing)} at or above the floor, {len(failing)} below it or failing "
              f"({sum(r.get('status') == 'exception' for r in rows)} raw exceptions, {sum(r.get('status') == 'refused' for r in rows)} "
              f"documented refusals, {sum(r.get('status') == 'timeout' for r in rows)} timeouts, "
              f"{sum(r.get('status') == 'below floor, SILENT' for r in rows)} SILENT).", ""]
    lines += ["Zoo models (wheel, licence, data):", "",
              "| model | wheel | file | licence | what | data | calibration / held-out feeds |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for m in models:
        lines.append(f"| {m.name} | `{m.wheel}` | `{m.member}` | {m.licence} | {m.what} | {m.data_desc} | {m.calibration} / {m.heldout} |")
    return "\n".join(lines) + "\n"


def write_results_md(path: Path, section: str) -> None:
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    if SECTION in text:
        start = text.index(SECTION)
        nxt = text.find("\n## ", start + len(SECTION))
        text = text[:start] + section + (text[nxt + 1:] if nxt >= 0 else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    tmp = path.with_suffix(".md.part")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="", help="comma-separated zoo names (default: all)")
    ap.add_argument("--presets", default=",".join(PRESETS))
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per (model, preset) pair")
    ap.add_argument("--json", default=str(HERE / "RESULTS_zoo.json"))
    ap.add_argument("--md", default=str(HERE / "RESULTS.md"))
    ap.add_argument("--keep", action="store_true", help="merge with the rows already in --json (rerun a subset)")
    ap.add_argument("--merge", nargs="*", default=None, metavar="JSON",
                    help="run nothing: merge these RESULTS_zoo-style files (later ones win per pair) into --json and the table")
    args = ap.parse_args(argv)
    models = [zoo.get(n) for n in args.models.split(",") if n] or list(zoo.ZOO)
    presets = [p for p in args.presets.split(",") if p]
    command = "PYTHONPATH=src:. python bench/zoo.py " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    rows: list[dict] = []
    json_path = Path(args.json)
    if args.merge is not None:
        merged: dict[tuple[str, str], dict] = {}
        commands = []
        for src in [json_path] + [Path(p) for p in args.merge]:
            if src.exists():
                blob = json.loads(src.read_text())
                commands.append(blob.get("command", ""))
                merged.update({(r["model"], r["preset"]): r for r in blob["rows"]})
        rows = list(merged.values())
        command = "\n    ".join(dict.fromkeys(c for c in commands if c))
        json_path.write_text(json.dumps({"command": command, "rows": rows}, indent=1))
        write_results_md(Path(args.md), table(rows, list(zoo.ZOO), command))
        return 0
    if args.keep and json_path.exists():
        rows = [r for r in json.loads(json_path.read_text())["rows"]
                if not (r["model"] in {m.name for m in models} and r["preset"] in presets)]
    with tempfile.TemporaryDirectory(prefix="zoo-") as tmp:
        for model in models:
            try:
                calib, heldout = model.samples("calibration"), model.samples("heldout")
            except Exception as exc:
                for preset in presets:
                    rows.append({"model": model.name, "preset": preset, "status": "exception", "floor": floor(preset),
                                 "metric": model.metric_name, "error": "making data: " + _first_line(exc)})
                continue
            for preset in presets:
                row = run_isolated(model, preset, calib, heldout, Path(tmp), args.timeout)
                rows.append(row)
                print(json.dumps({k: v for k, v in row.items() if k != "trace"}), flush=True)
                json_path.write_text(json.dumps({"command": command, "rows": rows}, indent=1))
                for f in Path(tmp).glob(f"{model.name}.{preset}.onnx*"):
                    f.unlink()
    write_results_md(Path(args.md), table(rows, [m for m in zoo.ZOO if m.name in {r["model"] for r in rows}], command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
