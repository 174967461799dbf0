"""CPU seconds per stage of ``onnxptq.quantize``, presets side by side in one process (issue 26 item 1).

``python bench/quantize_stages.py MODEL PRESETS`` quantizes ``MODEL`` (``cls``/``rec``/``det``, or
``layout``/``vit``/``resnet`` of ``bench/quantize_time.py`` kept in its ``--workdir``, on uniform
random feeds, 16 unless ``--samples``; or a zoo name, on its own calibration feeds) with
each preset (its defaults: the accuracy floor and repair on, unless ``--no-repair``), after one
BF16 warm-up quantize, ``--rounds`` times in turn, and prints per preset the best round's

* **cpu s** — ``time.process_time`` around the whole ``quantize`` call (all threads of the
  process: on a shared machine wall time is mostly waiting for a core), and **÷BF16**;
* each stage's CPU seconds, measured by wrapping the stage's function (nested: ``build`` holds
  ``final_plan`` — coverage and the range guard — ``solve`` and ``emit``; ``finish`` is the checker
  and the one onnxruntime session on the result; ``evaluate``/``verify`` run that session on the
  kept and held-out samples); ``sess_create``/``sess_run``: every onnxruntime session creation
  and run of the quantize, whoever opened it, and how many;
* the first 16 hex digits of the saved file's sha256 and the accuracy floor's broken outputs, so
  that two source trees can be checked for byte-identical files and identical verdicts.

Each round runs every preset once, starting one preset later than the round before, each quantize after a
full ``gc.collect()`` (outside its clock). Why: a generation-2 collection (0.06-0.08 CPU s over ~100 000
objects, 15 % of PP-OCR cls's BF16 quantize) fell in every other quantize, in whichever preset the count
reached (blockq19), and a fixed order put a preset always after the same one. The ``| paired:`` table gives
per preset the ratio of the best rounds and the median of each round's own ratio to that round's BF16
(:func:`paired_ratios`): bench/blockbody_ratio.py runs the protocol on two trees and reads those tables.
``--one-thread`` opens every session the library leaves to onnxruntime's thread count with one thread.

``--where`` adds a table of the parts a block format adds or makes dearer (:data:`WHERE`: the quantizer
bodies' construction, emit's weight rounding, the packer, bias correction, the function passes, the range
guard, the floor's measure, the checks; session creations by who opened them), each
with its excess over BF16's: where a block format's extra CPU goes; and the nodes onnxruntime builds
for finish's session (the delivered file's main graph, the nodes its function calls inline), on which
that session's creation, the largest part, depends (``bench/session_create_cost.py``). ``--prof PRESET`` adds a cProfile of one
more quantize. ``--merge DIR`` reads outputs saved as
``DIR/<model>.<tree>.r<round>.txt`` (trees ``base`` and ``new``: this script run with
``PYTHONPATH`` on two source trees, alternating per model) and prints the side-by-side tables: the
best round per tree, ÷BF16 per tree, whether the files and the verdicts are the same. ``--extra DIR``
(``--tree``): each block preset's CPU seconds over BF16's, per stage (where the extra goes).

    for r in 1 2; do for m in lac cls; do for t in base new; do
      PYTHONPATH=<tree $t>/src:. python bench/quantize_stages.py $m BF16,A8W8,BFP16,MX9,MXINT8 --rounds 1 > DIR/$m.$t.r$r.txt
    done; done; done
    python bench/quantize_stages.py --merge DIR
"""

from __future__ import annotations

import _common  # noqa: F401  (the repository root on sys.path: testkit)
import argparse
import collections
import contextlib
import cProfile
import dataclasses
import functools
import gc
import glob
import hashlib
import importlib
import io
import logging
import os
import pstats
import statistics
import tempfile
import time
import traceback
from typing import Any

import numpy as np

SHAPES = {"cls": (1, 3, 48, 192), "rec": (1, 3, 48, 320), "det": (1, 3, 640, 640)}
#: (module, function, label): the stage functions wrapped with a CPU clock, where they are called from
STAGES = [("onnxptq.pipeline.calibrate", "prepare_for_quantization", "prepare"),
          ("onnxptq.pipeline.calibrate", "make_plan", "plan"),
          ("onnxptq.pipeline.calibrate", "collect_statistics", "calibrate"),
          ("onnxptq.pipeline.calibrate", "float_outputs_of", "holdout"),
          ("onnxptq.pipeline.build", "final_plan", "final_plan"),
          ("onnxptq.pipeline.build", "solve", "solve"),
          ("onnxptq.pipeline.build", "emit", "emit"),
          ("onnxptq.pipeline.complete", "finish", "finish"),
          ("onnxptq.pipeline.complete", "finish_file", "finish"),  # finish on the file's bytes (blockq22)
          ("onnxptq.pipeline.complete", "_evaluate", "evaluate"),
          ("onnxptq.pipeline.complete", "_verify", "verify"),
          ("onnxptq.pipeline.complete", "build_model", "build"),
          ("onnxptq.algorithms.repair", "enforce_floor", "repair"),
          ("onnxptq.pipeline.complete", "deliver", "deliver"),
          # quantize() calls deliver through the name api.py imported (the one above is complete()'s own
          # call, deliver_now=True): wrapped there too, or a quantize with the floor on showed deliver 0.00
          ("onnxptq.api", "deliver", "deliver")]
#: (module, attribute, label): with ``--where``, the parts of a quantize a block format adds to or makes dearer,
#: each wrapped with a CPU clock where its callers look it up (cut across the stages; nested in them)
WHERE = [("onnxptq.pipeline.emit", "build_qdq", "bodies"),  # the activation quantizers' functions (onnx_ops)
         ("onnxptq.pipeline.emit", "fake_quantize_in_slices", "w_round"),  # emit's weight rounding (NumPy reference)
         ("onnxptq.onnx_ops.packed", "WeightPacker.add", "packer"),  # packing the rounded weights
         ("onnxptq.pipeline.refine.bias_correction", "correct_biases", "bias_corr"),  # probe build, session, runs
         ("onnxptq.graph.passes.share_functions", "share_functions", "passes"),
         ("onnxptq.graph.passes.share_functions", "compact_bodies", "passes"),
         ("onnxptq.pipeline.final_plan", "apply_range_guard", "guard"),
         ("onnxptq.analysis.floor", "measure", "floor"),  # the floor's verdicts (the plain build's and repair's)
         ("onnx.checker", "check_model", "checker"),
         ("onnxptq.pipeline.complete", "crash_warning", "crash_check"),
         ("onnxptq.pipeline.complete", "lean", "lean")]  # the delivered file's lean form, in and out (finish_file or deliver: pipeline/lean_file.py)
#: the :data:`WHERE` functions that are context managers: their entry and exit are timed, not the block
CONTEXTS = {"lean"}
WHERE_KEYS = list(dict.fromkeys(label for _, _, label in WHERE))
#: who opened a session (the onnxptq function two frames above open_session), by the part it belongs to
OPENERS = {"finish": "finish", "finish_file": "finish", "_session": "calibration", "judge_session": "repair", "_thinned_runs": "repair",
           "correct_biases": "bias_corr", "_float_values": "guard",
           "__call__": "decisions"}  # analysis.decisions.DecisionReader: a graph's inner decisions, float's or (before blockquant12) the quantized model's
KEYS = ["prepare", "plan", "calibrate", "holdout", "build", "final_plan", "solve", "emit", "finish", "evaluate", "verify",
        "repair", "deliver", "sess_create", "sess_run"]
PRESETS = ["BF16", "A8W8", "BFP16", "MX9", "MXINT8"]


def model_arguments(ap: Any, lines: bool = True) -> None:
    """The model, preset and data arguments of the scripts that read them through :func:`model_and_data`
    (quantize_peak.py, quantize_held.py, verify_reuse.py): one spelling of the four options."""
    ap.add_argument("model")
    ap.add_argument("preset")
    ap.add_argument("--samples", type=int, default=0)
    ap.add_argument("--npz", help="rendered rec lines (bench/quantize.py's .npz): PP-OCRv4 rec on them")
    if lines:
        ap.add_argument("--lines", type=int, default=64)


def model_and_data(model: str, samples: int, npz: str | None = None, lines: int | None = None) -> tuple[Any, Any]:
    """``(model path, feeds)`` as the timing scripts take them: PP-OCRv4 rec on rendered lines (bench/quantize.py's
    ``.npz``, at most ``lines``) where ``npz`` is given, else :func:`_data`'s model and feeds."""
    if npz:
        import quantize as bench_quantize
        from testkit.models import model_path

        if model.startswith("zoo:"):  # a zoo member's feeds as quantize_cpu.py writes them
            import quantize_cpu

            path, name = quantize_cpu._model_file(model)
            return path, bench_quantize._reader_class()(npz, limit=lines, input_name=name)
        # the rendered lines of rec, or of cls where that model is named (both read ``x``)
        return model_path("cls" if model == "cls" else "rec"), bench_quantize._reader_class()(npz, limit=lines)
    return _data(model, samples)


def _data(model: str, samples: int, workdir: str | None = None) -> tuple[Any, list[dict[str, np.ndarray]]]:
    import onnx

    import quantize_time

    if model not in SHAPES and model in quantize_time.MODELS:  # layout, vit, resnet: quantize_time's mid-size models
        from pathlib import Path

        path = quantize_time.model_file(model, Path(workdir or quantize_time.DEFAULT_WORKDIR))
        rng = np.random.default_rng(0)
        name = onnx.load(str(path), load_external_data=False).graph.input[0].name
        return path, [{name: rng.random(quantize_time.MODELS[model][0], dtype=np.float32)} for _ in range(samples or 16)]
    if model in SHAPES:
        from testkit.models import model_path

        path = model_path(model)
        rng = np.random.default_rng(0)
        name = onnx.load(str(path), load_external_data=False).graph.input[0].name
        return path, [{name: rng.random(SHAPES[model], dtype=np.float32)} for _ in range(samples or 16)]
    if model.startswith("new:"):  # a model of bench/newmodels.py, on its feeds (calibration seed 1)
        from bench import newmodels

        rel, make, _, _ = newmodels.MODELS[model[4:]]
        return newmodels.SRC / rel, make(samples or 16, 1)
    from testkit import zoo

    z = zoo.get(model)
    data = z.samples("calibration")
    return z.path(), data[:samples] if samples else data


def quiet_config(preset: str, repair: bool = True) -> Any:
    """``preset``'s config without the progress bar, and with the floor's repair off unless ``repair``."""
    from onnxptq.config.presets import get_preset

    c = get_preset(preset)
    c = c.replace(calibration=dataclasses.replace(c.calibration, progress=False))
    return c if repair else c.replace(repair=False)


def _wrap_where(add: Any, cpu: Any) -> None:
    """Wrap every :data:`WHERE` function with a CPU clock adding to ``add(label, seconds)``."""
    # Bias correction rounds its weights with emit's fake_quantize_in_slices, imported by name: bound
    # here before the wrapping, so that w_round is emit's own rounding and bias_corr holds its own.
    importlib.import_module("onnxptq.pipeline.refine.bias_correction")
    for mod, attr, label in WHERE:
        try:
            owner = importlib.import_module(mod)
        except ImportError:
            continue
        *path, name = attr.split(".")
        for part in path:
            owner = getattr(owner, part)
        f = getattr(owner, name, None)
        if f is None:
            continue

        def wrap(f: Any = f, label: str = label) -> Any:
            @functools.wraps(f)
            def w(*a: Any, **k: Any) -> Any:
                t = cpu()
                try:
                    return f(*a, **k)
                finally:
                    add("where_" + label, cpu() - t)
            return w

        def wrap_context(f: Any = f, label: str = label) -> Any:
            @functools.wraps(f)
            @contextlib.contextmanager
            def w(*a: Any, **k: Any) -> Any:
                t = cpu()
                with f(*a, **k) as value:
                    add("where_" + label, cpu() - t)
                    try:
                        yield value
                    finally:
                        t = cpu()
                add("where_" + label, cpu() - t)
            return w
        setattr(owner, name, wrap_context() if label in CONTEXTS else wrap())


def _openers(each: list[tuple[float, str]] | None) -> dict[str, float]:
    """Session creation CPU seconds by the part that opened them (:data:`OPENERS`; others by name)."""
    out: dict[str, float] = {}
    for seconds, who in each or []:
        part = OPENERS.get(who.split("/")[0], who.split("/")[0] or "?")
        out[part] = out.get(part, 0.0) + seconds
    return out


def profile(model: str, presets: list[str], rounds: int, samples: int, repair: bool, prof: str | None,
            workdir: str | None = None, where: bool = False, one_thread: bool = False) -> None:
    import onnxruntime as ort

    import onnxptq
    from onnxptq import quantize

    path, data = _data(model, samples, workdir)
    cpu = time.process_time
    acc: dict[str, Any] = {}

    def add(k: str, d: float) -> None:
        acc[k] = acc.get(k, 0.0) + d

    for mod, fn, label in STAGES:
        m = importlib.import_module(mod)
        f = getattr(m, fn, None)
        if f is None:
            continue

        def wrap(f: Any = f, label: str = label) -> Any:
            @functools.wraps(f)
            def w(*a: Any, **k: Any) -> Any:
                t, t_wall = cpu(), time.perf_counter()
                try:
                    return f(*a, **k)
                finally:
                    add(label, cpu() - t)
                    add(label + "_w", time.perf_counter() - t_wall)
            return w
        setattr(m, fn, wrap())
    if where:
        _wrap_where(add, cpu)
    orig_init, orig_run = ort.InferenceSession.__init__, ort.InferenceSession.run

    def init(self: Any, *a: Any, **k: Any) -> None:
        t, t_wall = cpu(), time.perf_counter()
        orig_init(self, *a, **k)
        d = cpu() - t
        add("sess_create", d)
        add("sess_create_w", time.perf_counter() - t_wall)
        add("n_create", 1)
        who = [f.name for f in traceback.extract_stack()[:-1] if "onnxptq" in f.filename][-2:]
        acc.setdefault("each", []).append((round(d, 3), "/".join(who)))

    def run(self: Any, *a: Any, **k: Any) -> Any:
        t, t_wall = cpu(), time.perf_counter()
        r = orig_run(self, *a, **k)
        add("sess_run", cpu() - t)
        add("sess_run_w", time.perf_counter() - t_wall)
        add("n_run", 1)
        return r

    ort.InferenceSession.__init__, ort.InferenceSession.run = init, run

    if one_thread:
        _one_thread()
    cfg = functools.partial(quiet_config, repair=repair)
    logging.disable(logging.WARNING)
    tmp = tempfile.mkdtemp(prefix="quantize_stages_")
    quantize(path, cfg("BF16"), data, os.path.join(tmp, "warm.onnx"))  # imports, caches
    res: dict[str, list[tuple]] = {}
    for rnd in range(rounds):
        for p in presets[rnd % len(presets):] + presets[:rnd % len(presets)]:  # each round starts one preset later
            acc.clear()
            out = os.path.join(tmp, f"{model}.{p}.onnx")
            gc.collect()  # every quantize starts from the same collector state (module docstring)
            t = cpu()
            w = time.perf_counter()
            r = quantize(path, cfg(p), data, out)
            tot, wall = cpu() - t, time.perf_counter() - w
            with open(out, "rb") as fh:
                blob = fh.read()
            sha = hashlib.sha256(blob).hexdigest()[:16]
            if where:  # what finish's session was opened on: its main graph and the nodes its calls inline
                import onnx
                from session_create_cost import counts

                acc["nodes"] = counts(onnx.load_from_string(blob))
            verdict = None if r.floor is None else tuple(sorted(getattr(r.floor, "broken", ())))
            kept = None if not r.repair else len(r.repair.get("kept", r.repair.get("nodes", [])) or [])
            res.setdefault(p, []).append((tot, wall, dict(acc), sha, verdict, kept, rnd))
    base = min(x[0] for x in res["BF16"]) if "BF16" in res else None
    print(f"## {model} samples={len(data)} repair={'on' if repair else 'off'} onnxptq={onnxptq.__file__}")
    print("| preset | cpu s | ÷BF16 | wall s | " + " | ".join(KEYS) + " | sessions (n) | sha256 | broken | kept |")
    for p, xs in res.items():
        tot, wall, a, sha, verdict, kept, _ = min(xs, key=lambda x: x[0])
        ratio = f"{tot / base:.2f}" if base else ""
        cells = " | ".join(f"{a.get(k, 0):.2f}" for k in KEYS)
        print(f"| {p} | {tot:.2f} | {ratio} | {wall:.2f} | {cells} | {int(a.get('n_create', 0))}/{int(a.get('n_run', 0))} "
              f"| {sha} | {verdict} | {kept} |", flush=True)
    wbase = min(x[1] for x in res["BF16"]) if "BF16" in res else None
    print("| wall: preset | wall s | ÷BF16 | " + " | ".join(KEYS) + " |")
    for p, xs in res.items():
        tot, wall, a, *_ = min(xs, key=lambda x: x[1])
        ratio = f"{wall / wbase:.2f}" if wbase else ""
        print(f"| {p} | {wall:.2f} | {ratio} | " + " | ".join(f"{a.get(k + '_w', 0):.2f}" for k in KEYS) + " |", flush=True)
    _print_paired(res)
    if where:
        _print_where(res)
    for p, xs in res.items():
        print(p, "creations:", min(xs, key=lambda x: x[0])[2].get("each"))
        print(p, "shas:", [x[3] for x in xs])
    if prof:
        pr = cProfile.Profile()
        pr.enable()
        quantize(path, cfg(prof), data, os.path.join(tmp, "prof.onnx"))
        pr.disable()
        for order, n in (("cumulative", 60), ("tottime", 30)):
            s = io.StringIO()
            pstats.Stats(pr, stream=s).sort_stats(order).print_stats(n)
            print(s.getvalue()[:16000])


def _one_thread() -> None:
    """Every onnxruntime session of the quantize with one intra-op and one inter-op thread, where its
    opener left the count to onnxruntime (``--one-thread``): the process's CPU seconds are then the
    work alone, without a pool's hand-offs between two threads, whose cost depends on what else the
    machine's cores run (a bench protocol: the library's sessions are unchanged)."""
    import onnxptq.sessions as sessions

    original = sessions.session_options

    @functools.wraps(original)
    def options(**k: Any) -> Any:
        k["threads"] = k.get("threads") or 1
        k["inter_op_threads"] = k.get("inter_op_threads") or 1
        return original(**k)

    sessions.session_options = options


def paired_ratios(res: dict[str, list[tuple]]) -> dict[str, list[float]]:
    """Per preset, its CPU seconds ÷ BF16's of the same round, every round: a round's presets run
    back to back, so a change of the machine's load between rounds moves both terms of a ratio."""
    bf16 = {x[6]: x[0] for x in res.get("BF16", [])}
    return {p: [x[0] / bf16[x[6]] for x in xs if x[6] in bf16] for p, xs in res.items() if p != "BF16"}


def _print_paired(res: dict[str, list[tuple]]) -> None:
    """The ``| paired:`` table: per preset the ratio of the best rounds (min ÷ min) and the median, lowest
    and highest of the same-round ratios (:func:`paired_ratios`)."""
    best = min(x[0] for x in res["BF16"]) if "BF16" in res else None
    print("| paired: preset | rounds | min ÷ min | paired median | paired low | paired high | cpu s (every round) |")
    for p, ratios in paired_ratios(res).items():
        if not ratios or best is None:
            continue
        low = min(x[0] for x in res[p]) / best
        every = " ".join(f"{x[0]:.3f}" for x in res[p])
        print(f"| {p} | {len(ratios)} | {low:.3f} | {statistics.median(ratios):.3f} | {min(ratios):.3f} | "
              f"{max(ratios):.3f} | {every} |", flush=True)
    if "BF16" in res:
        print(f"| BF16 | {len(res['BF16'])} | 1.000 | 1.000 | | | " + " ".join(f"{x[0]:.3f}" for x in res["BF16"]) + " |")


def _print_where(res: dict[str, list[tuple]]) -> None:
    """The ``--where`` table: per preset (its best CPU round) the CPU seconds of each :data:`WHERE` part and
    of the session creations by opener, and each one's excess over BF16's (where the extra goes)."""
    best = {p: min(xs, key=lambda x: x[0]) for p, xs in res.items()}
    openers = {p: _openers(x[2].get("each")) for p, x in best.items()}
    parts = list(dict.fromkeys(k for o in openers.values() for k in o))
    cols = WHERE_KEYS + ["sess_run"] + [f"create:{k}" for k in parts]

    def value(p: str, col: str) -> float:
        acc = best[p][2]
        if col.startswith("create:"):
            return openers[p].get(col[7:], 0.0)
        return acc.get(col if col == "sess_run" else "where_" + col, 0.0)

    print("| where: preset | cpu s | extra s | " + " | ".join(cols) + " | main nodes | inlined nodes | create:finish µs/node |")
    base = "BF16" if "BF16" in best else None
    for p in best:
        extra = f"{best[p][0] - best[base][0]:+.2f}" if base and p != base else ""
        cells = []
        for col in cols:
            v = value(p, col)
            cells.append(f"{v:.3f}" if not base or p == base else f"{v:.3f} ({v - value(base, col):+.3f})")
        # finish's creation per node onnxruntime builds (main graph + inlined bodies): it scales with them
        n = best[p][2].get("nodes") or {}
        total = n.get("main", 0) + n.get("inlined", 0)
        per = f"{1e6 * openers[p].get('finish', 0.0) / total:.0f}" if total else ""
        print(f"| {p} | {best[p][0]:.2f} | {extra} | " + " | ".join(cells) + f" | {n.get('main', '')} | {n.get('inlined', '')} | {per} |",
              flush=True)


def merge(folder: str) -> None:
    """The side-by-side tables of ``folder``'s ``<model>.<tree>.r<round>.txt`` files."""
    rows: dict[tuple[str, str, str], list[dict[str, str]]] = collections.defaultdict(list)
    walls: dict[tuple[str, str, str], list[dict[str, str]]] = collections.defaultdict(list)
    for f in sorted(glob.glob(os.path.join(folder, "*.txt"))):
        parts = os.path.basename(f)[:-4].rsplit(".", 2)
        if len(parts) != 3:  # not a <model>.<tree>.r<round>.txt (a log beside them)
            continue
        model, tree, _ = parts
        header, into = None, rows
        for line in open(f):
            if line.startswith("| preset") or line.startswith("| wall: preset"):
                header = [c.strip() for c in line.strip().strip("|").split("|")]
                into = walls if line.startswith("| wall:") else rows
            elif line.startswith("| where:"):  # the --where table: read by extra()
                header = None
            elif line.startswith("| ") and header:
                cells = [c.strip() for c in line.strip().strip("|").split("|")]
                if len(cells) == len(header):
                    into[(model, tree, cells[0])].append(dict(zip(header, cells)))
    models = list(dict.fromkeys(k[0] for k in rows))
    # every preset the files hold, in their order (not only the default list)
    presets = list(dict.fromkeys(k[2] for k in rows))

    def best(m: str, t: str, p: str) -> dict[str, str] | None:
        xs = rows.get((m, t, p))
        return min(xs, key=lambda d: float(d["cpu s"])) if xs else None

    def val(d: dict[str, str], k: str) -> float:
        return float(d[k])

    def wbest(m: str, t: str, p: str) -> dict[str, str] | None:
        xs = walls.get((m, t, p))
        return min(xs, key=lambda d: float(d["wall s"])) if xs else None

    print("| model | preset | rounds | base: cpu s | ÷BF16 | new: cpu s | ÷BF16 | new ÷ base | base: wall s | ÷BF16 | "
          "new: wall s | ÷BF16 | output sha256 (16 hex) | same file | same floor verdict |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|")
    wratios: dict[str, dict[str, list[float]]] = collections.defaultdict(lambda: collections.defaultdict(list))
    ratios: dict[str, dict[str, list[float]]] = collections.defaultdict(lambda: collections.defaultdict(list))
    for m in models:
        for p in presets:
            b, n, bb, nb = best(m, "base", p), best(m, "new", p), best(m, "base", "BF16"), best(m, "new", "BF16")
            if not (b and n and bb and nb):
                continue
            rb, rn = val(b, "cpu s") / val(bb, "cpu s"), val(n, "cpu s") / val(nb, "cpu s")
            shas_b = {d["sha256"] for d in rows[(m, "base", p)]}
            shas_n = {d["sha256"] for d in rows[(m, "new", p)]}
            same = "yes" if shas_b == shas_n and len(shas_b) == 1 else f"NO {shas_b} {shas_n}"
            vb = {d["broken"] for d in rows[(m, "base", p)]}
            vn = {d["broken"] for d in rows[(m, "new", p)]}
            wb, wn, wbb, wnb = wbest(m, "base", p), wbest(m, "new", p), wbest(m, "base", "BF16"), wbest(m, "new", "BF16")
            wcells = "| | | | "
            if wb and wn and wbb and wnb:
                qb, qn = val(wb, "wall s") / val(wbb, "wall s"), val(wn, "wall s") / val(wnb, "wall s")
                wcells = (f"| {val(wb, 'wall s'):.2f} | {'' if p == 'BF16' else f'{qb:.2f}'} | {val(wn, 'wall s'):.2f} | "
                          f"{'' if p == 'BF16' else f'{qn:.2f}'} ")
                if p != "BF16":
                    wratios[p]["base"].append(qb)
                    wratios[p]["new"].append(qn)
            if p != "BF16":
                ratios[p]["base"].append(rb)
                ratios[p]["new"].append(rn)
            print(f"| {m} | {p} | {len(rows[(m, 'base', p)])}+{len(rows[(m, 'new', p)])} | {val(b, 'cpu s'):.2f} | "
                  f"{'' if p == 'BF16' else f'{rb:.2f}'} | {val(n, 'cpu s'):.2f} | {'' if p == 'BF16' else f'{rn:.2f}'} | "
                  f"{val(n, 'cpu s') / val(b, 'cpu s'):.2f} {wcells}| {n['sha256']} | {same} | "
                  f"{'yes' if vb == vn else f'NO {vb} {vn}'} |")
    print()
    print("| preset | models | cpu: median ÷BF16 base → new | worst base → new | wall: median ÷BF16 base → new | worst base → new |")
    print("|---|---:|---|---|---|---|")
    for p in presets[1:]:
        if ratios[p]["base"]:
            w = wratios[p]
            wtxt = (f"{statistics.median(w['base']):.2f} → {statistics.median(w['new']):.2f} | "
                    f"{max(w['base']):.2f} → {max(w['new']):.2f}") if w["base"] else " | "
            print(f"| {p} | {len(ratios[p]['base'])} | {statistics.median(ratios[p]['base']):.2f} → "
                  f"{statistics.median(ratios[p]['new']):.2f} | {max(ratios[p]['base']):.2f} → {max(ratios[p]['new']):.2f} | {wtxt} |")
    print()
    stages = ["prepare", "calibrate", "holdout", "final_plan", "solve", "emit", "finish", "evaluate", "verify",
              "sess_create", "sess_run"]
    for pick in (best, wbest):  # CPU seconds (best round per tree), then wall seconds (best-wall round)
        if pick is wbest:
            print()
            print("Wall seconds per stage (the best-wall round per tree), base → new:")
            print()
        print("| model | preset | " + " | ".join(stages) + " |")
        print("|---|---|" + "---|" * len(stages))
        for m in models:
            for p in presets:
                b, n = pick(m, "base", p), pick(m, "new", p)
                if b and n:
                    print(f"| {m} | {p} | " + " | ".join(f"{val(b, s):.2f} → {val(n, s):.2f}" for s in stages) + " |")


def extra(folder: str, tree: str = "new") -> None:
    """Per model and block preset of ``folder``'s ``<model>.<tree>.r<round>.txt`` files (the best CPU
    round of each preset): the CPU seconds over BF16's, whole and per stage, and finish's share of it
    (blockquant10: where a block format's extra goes). Stages as the table names them: ``build``
    holds final_plan, solve and emit; with repair on, ``repair`` holds its candidates' builds and
    sessions (they are in ``build``/``sess_*`` too); ``sess_create``/``sess_run`` cut across stages."""
    rows: dict[tuple[str, str], list[dict[str, str]]] = collections.defaultdict(list)
    for f in sorted(glob.glob(os.path.join(folder, f"*.{tree}.r*.txt"))):
        model = os.path.basename(f)[:-4].rsplit(".", 2)[0]
        header = None
        for line in open(f):
            if line.startswith("| preset"):
                header = [c.strip() for c in line.strip().strip("|").split("|")]
            elif line.startswith("| wall:") or line.startswith("| where:"):
                header = None
            elif line.startswith("| ") and header:
                cells = [c.strip() for c in line.strip().strip("|").split("|")]
                if len(cells) == len(header):
                    rows[(model, cells[0])].append(dict(zip(header, cells)))
    stages = ["prepare", "calibrate", "build", "emit", "finish", "verify", "repair", "sess_create", "sess_run"]
    print(f"| model | preset | cpu s | ÷BF16 | extra s | " + " | ".join(f"+{k}" for k in stages) + " | finish ÷ extra |")
    print("|---|---|---:|---:|---:|" + "---:|" * len(stages) + "---:|")
    for model in dict.fromkeys(k[0] for k in rows):
        base = rows.get((model, "BF16"))
        if not base:
            continue
        b = min(base, key=lambda d: float(d["cpu s"]))
        for (m, preset), xs in rows.items():
            if m != model or preset == "BF16":
                continue
            d = min(xs, key=lambda d: float(d["cpu s"]))
            more = float(d["cpu s"]) - float(b["cpu s"])
            cells = " | ".join(f"{float(d[k]) - float(b[k]):+.2f}" for k in stages)
            share = (float(d["finish"]) - float(b["finish"])) / more if more > 0 else float("nan")
            print(f"| {model} | {preset} | {float(d['cpu s']):.2f} | {float(d['cpu s']) / float(b['cpu s']):.2f} | {more:.2f} | "
                  f"{cells} | {share:.2f} |")
    _where_extra(folder, tree)


def _where_extra(folder: str, tree: str) -> None:
    """Per model and block preset, the ``--where`` parts' excess over BF16 (the best CPU round of each
    preset, as its ``--where`` table printed them): the largest first."""
    rows: dict[tuple[str, str], list[dict[str, str]]] = collections.defaultdict(list)
    for f in sorted(glob.glob(os.path.join(folder, f"*.{tree}.r*.txt"))):
        model = os.path.basename(f)[:-4].rsplit(".", 2)[0]
        header = None
        for line in open(f):
            if line.startswith("| where: preset"):
                header = [c.strip() for c in line.strip().strip("|").split("|")]
            elif line.startswith("| ") and header:
                cells = [c.strip() for c in line.strip().strip("|").split("|")]
                if len(cells) == len(header):
                    rows[(model, cells[0])].append(dict(zip(header, cells)))
            else:
                header = None
    if not rows:
        return
    print()
    print("| model | preset | cpu s | extra s | where the extra goes (CPU s over BF16's, largest first) |")
    print("|---|---|---:|---:|---|")
    for (model, preset), xs in rows.items():
        if preset == "BF16":
            continue
        d = min(xs, key=lambda d: float(d["cpu s"]))
        parts = []
        for k, v in d.items():
            if k in ("where: preset", "cpu s", "extra s") or "(" not in v:
                continue
            parts.append((float(v.split("(")[1].rstrip(")")), k))
        text = ", ".join(f"{k} {x:+.3f}" for x, k in sorted(parts, reverse=True) if abs(x) >= 0.005)
        print(f"| {model} | {preset} | {float(d['cpu s']):.2f} | {d['extra s']} | {text} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", nargs="?")
    ap.add_argument("presets", nargs="?", default=",".join(PRESETS))
    ap.add_argument("--prof", default=None, help="cProfile one more quantize with this preset")
    ap.add_argument("--no-repair", action="store_true")
    ap.add_argument("--samples", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--merge", metavar="DIR", help="print the side-by-side tables of DIR/<model>.<tree>.r<round>.txt")
    ap.add_argument("--workdir", help="where quantize_time.py keeps the layout/vit/resnet files (its --workdir)")
    ap.add_argument("--extra", metavar="DIR", help="print each block preset's CPU over BF16 per stage, from DIR's files of --tree")
    ap.add_argument("--tree", default="new", help="with --extra: the tree whose files are read (base or new)")
    ap.add_argument("--one-thread", action="store_true",
                    help="every onnxruntime session with one intra-op and one inter-op thread where the library leaves "
                         "the count to onnxruntime (the work alone: no pool hand-offs, whose cost follows the machine's load)")
    ap.add_argument("--where", action="store_true",
                    help="also time the parts a block format adds (bodies, weight rounding, packer, bias correction, "
                         "passes, guard, floor, checks; session creations by opener) and print their excess over BF16")
    args = ap.parse_args()
    if args.extra:
        extra(args.extra, args.tree)
        return
    if args.merge:
        merge(args.merge)
        return
    if not args.model:
        ap.error("MODEL is required (or --merge DIR)")
    profile(args.model, args.presets.split(","), args.rounds, args.samples, not args.no_repair, args.prof, args.workdir,
            args.where, args.one_thread)


if __name__ == "__main__":
    main()
