"""Repair's rungs and its count of builds, measured on outside models (issue 27 item 2, branch repairrung).

For each ``model:preset[:OUT=READING]`` pair (bench/newmodels.py's models, feeds and task metrics; 12
calibration feeds, seed 1; held-out feeds seed 1000) one quantize with repair on, in this process, in
turn. Each row: what repair kept float and stepped up (and whether the answer was the mixed rung), its
builds against its allowance, whether the time cap stopped it, the quantize's CPU s and the plain
quantization's, the verdict after, the delivered file's size × and **sha256**, and the task metric.

With ``--plain``, the same quantize with ``repair=False`` runs before each row (untimed: a first run's
costs, paid by neither timed run) and right after it, in the same process on the same feeds (``plain_quantize_cpu_s``), and ``x_plain`` is the row's CPU over it: issue 27 item 2's
"repair within 2× the plain quantize" measured as the user sees it (the record's ``plain_cpu_seconds``
starts at calibration: the model's load and the file's write, which both runs pay, are outside it).
The library is imported before the first row, so no row pays the import.

With ``--builds 6,4,3``, each row is quantized once per count of builds, side by side in one process
(``repair_budget`` = N / ``BUILDS``; a count below ``MIN_BUILDS`` lowers that floor for the bench
only): the untimed first quantize runs once, before the first count, and each count's row has its
own timed plain quantize after it. Files go to ``<out-dir>/<model>.<preset>.b<N>.onnx``.

Run it under a tree's ``src`` (``PYTHONPATH=<tree>/src:<this checkout>``) for before → after; with
``--hog N``, N busy processes (forked from this one: the same priority) share the CPU
during every row: the delivered file must not change with them (the search stops at a count of
builds, not at a time: algorithms/repair.py).

    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/repair_rungs.py --pairs lore_detect:A8W8:hm=peaks,mp_face_short:MXINT8 \
        --json /work/cache/repairrung/after.json --out-dir /work/cache/repairrung/after
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing as mp
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import newmodels  # noqa: E402  (the outside models, their feeds and task metrics)
from testkit import zoo  # noqa: E402


def _burn() -> None:
    while True:
        pass


def one(name: str, preset: str, readings: dict[str, str], out: Path, calib_n: int, held_n: int,
        plain: bool = False, warm: bool = True, builds: int | None = None) -> dict:
    import onnxptq
    from onnxptq.config.presets import resolve_config

    rel, make, metric_name, metric = newmodels.MODELS[name]
    path = newmodels.SRC / rel
    calib, held = make(calib_n, 1), make(held_n, 1000)
    config = resolve_config(preset)
    if readings:
        config = config.replace(floor_output_reading=readings)
    if builds is not None:
        config = config.replace(repair_budget=_budget_for(builds))
    if plain and warm:  # a first quantize of this model, untimed: neither timed run pays a first run's costs
        onnxptq.quantize(str(path), config.replace(repair=False), data=list(calib), output=str(out.with_suffix(".plain.onnx")))
    c0, t0 = time.process_time(), time.perf_counter()
    result = onnxptq.quantize(str(path), config, data=list(calib), output=str(out))
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    rep = result.repair if isinstance(result.repair, dict) else {}
    ref, test = zoo.session_runner(path), zoo.session_runner(out)
    return {"model": name, "preset": preset, "declared": readings, "cpu_s": round(cpu, 1), "wall_s": round(wall, 1),
            "plain_cpu_s": rep.get("plain_cpu_seconds"), "floor_ok": None if result.floor is None else result.floor.ok,
            "kept": len(rep.get("kept_float") or {}), "stepped": len(rep.get("stepped_up") or {}),
            "mixed": rep.get("mixed"), "kept_names": list(rep.get("kept_float") or {})[:6],
            "evaluations": rep.get("evaluations"), "allowance": rep.get("allowance"), "capped": rep.get("capped"),
            "finished": rep.get("finished"), "candidates": rep.get("candidates"), "note": (rep.get("note") or "")[:200],
            "builds_cpu": rep.get("build_cpu_seconds"), "repair_budget": config.repair_budget,
            "metric": metric_name, "agreement": round(float(metric(ref, test, held, None)), 4),
            "size_x": round(out.stat().st_size / newmodels._model_bytes(path), 3),
            "sha256": hashlib.sha256(out.read_bytes()).hexdigest()[:16], **(_plain(path, config, calib, out, cpu) if plain else {})}


def _budget_for(builds: int) -> float:
    """The ``repair_budget`` that allows ``builds`` builds (``builds_allowed``); a count below the
    library's least (``MIN_BUILDS``) lowers that least in this process: a bench-only override, to see
    what fewer builds would deliver."""
    from onnxptq.algorithms import repair

    if builds < repair.MIN_BUILDS:
        repair.MIN_BUILDS = builds
    budget = builds / repair.BUILDS
    assert repair.builds_allowed(budget) == builds, (builds, budget)
    return budget


def _plain(path: Path, config, calib, out: Path, cpu: float) -> dict:
    """The same quantize with repair off, after the row: its CPU s and the row's over it."""
    import onnxptq

    c0 = time.process_time()
    onnxptq.quantize(str(path), config.replace(repair=False), data=list(calib), output=str(out.with_suffix(".plain.onnx")))
    plain = time.process_time() - c0
    return {"plain_quantize_cpu_s": round(plain, 2), "x_plain": round(cpu / plain, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", required=True, help="model:preset[:OUT=READING], comma separated")
    ap.add_argument("--calib", type=int, default=12)
    ap.add_argument("--held", type=int, default=32)
    ap.add_argument("--hog", type=int, default=0, help="busy processes beside each row")
    ap.add_argument("--plain", action="store_true", help="time the quantize with repair off after each row")
    ap.add_argument("--builds", default="", help="counts of builds, comma separated: each row once per count")
    ap.add_argument("--json", required=True)
    ap.add_argument("--out-dir", required=True)
    a = ap.parse_args()
    import onnxptq.api  # noqa: F401  (imported before the first row's clock)
    import onnxptq.algorithms.repair  # noqa: F401

    out_dir = Path(a.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for pair in a.pairs.split(","):
        name, preset, *rest = pair.split(":")
        readings = dict(r.split("=", 1) for r in rest)
        hogs = [mp.get_context("fork").Process(target=_burn, daemon=True) for _ in range(a.hog)]
        for h in hogs:
            h.start()
        counts = [int(n) for n in a.builds.split(",") if n] or [None]
        try:
            for i, builds in enumerate(counts):
                stem = f"{name}.{preset}" + (f".b{builds}" if builds is not None else "")
                try:
                    row = one(name, preset, readings, out_dir / f"{stem}.onnx", a.calib, a.held, a.plain,
                              warm=i == 0, builds=builds)
                except Exception as exc:  # noqa: BLE001 - recorded, never fatal
                    row = {"model": name, "preset": preset, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
                with open("/proc/loadavg") as f:
                    row["load"] = f.read().split()[0]
                row["hog"], row["builds"] = a.hog, builds
                print(json.dumps(row), flush=True)
                rows.append(row)
                Path(a.json).write_text(json.dumps(rows, indent=1))
        finally:
            for h in hogs:
                h.terminate()
                h.join()


if __name__ == "__main__":
    main()
