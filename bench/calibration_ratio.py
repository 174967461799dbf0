"""Quantize CPU ÷ "the float model over the same calibration feeds", stage by stage (issue 26 item 1).

Our promise: calibration is one streaming pass, and quantize costs little more than running the float model
over the data. ``python bench/calibration_ratio.py MODEL [MODEL ...] --presets A8W8,A16W8,BF16,MXINT8`` measures,
in this process (the source tree is whatever ``PYTHONPATH`` puts first):

* **float**: one onnxruntime session of the model (1 intra-op thread, full optimisation) created and run on
  every calibration feed, one feed a run: ``float_create`` and ``float_runs`` CPU seconds;
* per preset (repair off unless ``--repair``: the statistics pass and the plain build, not the floor's
  rebuilds), after one BF16 warm-up quantize: the whole ``quantize`` call's CPU seconds
  (``time.process_time``, all threads), ÷ float's, and the CPU of each stage: ``prepare``, ``plan``,
  ``calibrate`` (``collect_statistics``) split into the calibration session's creation (``cal_create``),
  its runs (``cal_runs``) and the rest (collectors, feeds), then ``build`` (plan, solve, emit), ``finish``
  and ``deliver``; the augmented calibration graph's node count beside the prepared model's
  (``aug_nodes`` / ``nodes``) and the saved file's sha256 (first 16 hex digits: trees compared for bytes).

Each model/preset is measured ``--rounds`` times in turn and the best round printed (as a JSON line per
round with ``--jsonl``, read back by ``--merge FILE...`` into one table per tree: run the script with
``PYTHONPATH`` on two trees, alternating, and merge).

Models as bench/quantize_stages.py names them: ``cls``/``rec``/``det`` (uniform feeds, 16 unless
``--samples``), a zoo name (its calibration feeds), ``new:<name>`` (bench/newmodels.py's feeds).

    for r in 1 2; do for t in base new; do PYTHONPATH=<tree $t>/src:.:bench python bench/calibration_ratio.py \
        cls rec --rounds 1 --tree $t --jsonl OUT.jsonl; done; done
    python bench/calibration_ratio.py --merge OUT.jsonl
"""

from __future__ import annotations

import _common  # noqa: F401  (the repository root on sys.path: testkit)
import argparse
import functools
import hashlib
import json
import logging
import os
import tempfile
import time
from typing import Any

import numpy as np

PRESETS = "A8W8,A16W8,BF16,MXINT8"
#: (module, function, label): the stages timed, where they are called from
STAGES = [("onnxptq.pipeline.calibrate", "prepare_for_quantization", "prepare"),
          ("onnxptq.pipeline.calibrate", "make_plan", "plan"),
          ("onnxptq.pipeline.calibrate", "collect_statistics", "calibrate"),
          ("onnxptq.pipeline.complete", "build_model", "build"),
          ("onnxptq.pipeline.complete", "finish", "finish"),
          ("onnxptq.api", "deliver", "deliver")]
COLUMNS = ["cpu", "x_float", "prepare", "plan", "calibrate", "cal_create", "cal_runs", "cal_rest", "build", "finish",
           "deliver", "aug_nodes", "nodes"]


def float_over_data(path: Any, feeds: list[dict[str, np.ndarray]]) -> tuple[float, float]:
    """CPU seconds of (creating one 1-thread session of the float model, running it on every feed)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    t = time.process_time()
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    created = time.process_time() - t
    names = {i.name for i in session.get_inputs()}
    t = time.process_time()
    for feed in feeds:
        session.run(None, {k: v for k, v in feed.items() if k in names})
    return created, time.process_time() - t


def measure(model: str, presets: list[str], rounds: int, samples: int, repair: bool, tree: str,
            jsonl: str | None) -> list[dict[str, Any]]:
    """Every round's figures for ``model`` (see the module docstring)."""
    import importlib

    import onnx

    from onnxptq import quantize
    from onnxptq.calibration import runner
    from quantize_stages import _data, quiet_config
    from rec_a8w8_cpu import Clocks, _timed

    path, data = _data(model, samples)
    data = list(data)
    clocks = Clocks()
    acc = clocks.seconds
    for mod, fn, label in STAGES:
        m = importlib.import_module(mod)
        setattr(m, fn, _timed(clocks, label, getattr(m, fn)))
    opened = runner._session

    def session(aug: Any, *a: Any, **k: Any) -> Any:  # the calibration session, and its graph's size
        acc["aug_nodes"] = max(acc.get("aug_nodes", 0), len(aug.graph.node))
        return opened(aug, *a, **k)
    runner._session = _timed(clocks, "cal_create", session)
    for meth in ("run", "run_single", "outputs"):  # the calibration runs (with their folding), outermost only
        f = getattr(runner._Runs, meth, None)
        if f is None:
            continue
        timed = _timed(clocks, "cal_runs", f)

        def outermost(*a: Any, f: Any = f, timed: Any = timed, **k: Any) -> Any:
            if acc.get("_in_run"):
                return f(*a, **k)
            acc["_in_run"] = 1
            try:
                return timed(*a, **k)
            finally:
                acc["_in_run"] = 0
        setattr(runner._Runs, meth, outermost)

    cfg = functools.partial(quiet_config, repair=repair)
    logging.disable(logging.WARNING)
    tmp = tempfile.mkdtemp(prefix="calibration_ratio_")
    quantize(path, cfg("BF16"), data, os.path.join(tmp, "warm.onnx"))
    nodes = len(onnx.load(str(path), load_external_data=False).graph.node)
    rows = []
    for r in range(rounds):
        f_create, f_runs = float_over_data(path, data)
        for p in presets:
            clocks.clear()
            out = os.path.join(tmp, f"{p}.onnx")
            t = time.process_time()
            quantize(path, cfg(p), data, out)
            total = time.process_time() - t
            with open(out, "rb") as fh:
                sha = hashlib.sha256(fh.read()).hexdigest()[:16]
            row = {"model": model, "preset": p, "tree": tree, "round": r, "feeds": len(data), "cpu": total,
                   "float_create": f_create, "float_runs": f_runs, "x_float": total / (f_create + f_runs),
                   "nodes": nodes, "sha": sha, "load": os.getloadavg()[0],
                   **{k: v for k, v in acc.items() if not k.startswith("_")}}
            row["cal_rest"] = row.get("calibrate", 0.0) - row.get("cal_create", 0.0) - row.get("cal_runs", 0.0)
            rows.append(row)
            if jsonl:
                with open(jsonl, "a") as fh:
                    fh.write(json.dumps(row) + "\n")
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    """One line per (model, tree, preset): its best round by CPU."""
    best: dict[tuple[str, str, str], dict[str, Any]] = {}
    for row in rows:
        key = (row["model"], row["tree"], row["preset"])
        if key not in best or row["cpu"] < best[key]["cpu"]:
            best[key] = row
    lines = ["| model | tree | preset | float s (create + runs) | " + " | ".join(COLUMNS) + " | sha | load |",
             "|" + " --- |" * (len(COLUMNS) + 6)]
    for (model, tree, preset), r in sorted(best.items()):
        fl = f"{r['float_create'] + r['float_runs']:.2f} ({r['float_create']:.2f} + {r['float_runs']:.2f})"
        cells = [f"{r.get(c, 0):.0f}" if c in ("aug_nodes", "nodes") else f"{r.get(c, 0):.2f}" for c in COLUMNS]
        lines.append(f"| {model} | {tree} | {preset} | {fl} | " + " | ".join(cells) + f" | {r['sha']} | {r['load']:.1f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*")
    ap.add_argument("--presets", default=PRESETS)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--samples", type=int, default=0)
    ap.add_argument("--repair", action="store_true", help="the accuracy floor and repair on (the defaults)")
    ap.add_argument("--tree", default="this")
    ap.add_argument("--jsonl", help="append every round's row to this file")
    ap.add_argument("--merge", nargs="+", help="print the table of these --jsonl files")
    a = ap.parse_args()
    if a.merge:
        rows = [json.loads(line) for f in a.merge for line in open(f) if line.strip()]
        print(table(rows))
        return
    rows = []
    for m in a.models:
        rows += measure(m, a.presets.split(","), a.rounds, a.samples, a.repair, a.tree, a.jsonl)
    print(table(rows))


if __name__ == "__main__":
    main()
