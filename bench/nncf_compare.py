"""Our A8W8 against NNCF's ``nncf.quantize`` on the zoo, outside models and PP-OCRv4, side by side.

For each model the SAME calibration feeds and held-out feeds (built once here by the zoo's and
bench/newmodels.py's own feed builders, saved as .npz under ``--work``) go to:

* ``ours``: ``onnxptq.quantize(path, "A8W8", data=calib, output=...)`` with defaults (floor and
  repair on, as a user gets it), and ``ours repair=False`` (the integer model itself);
* ``nncf``: ``nncf.quantize(model, nncf.Dataset(calib), subset_size=len(calib))`` with defaults
  (preset PERFORMANCE: symmetric int8 activations, per-channel weights, fast bias correction) and
  ``nncf MIXED`` (``preset=QuantizationPreset.MIXED``: asymmetric activations). NNCF runs in its
  OWN venv (``--nncf-python``, default /work/cache/nncfvenv/bin/python) in a subprocess of this
  script (``--nncf-worker``: imports only nncf, onnx and numpy), so it never touches our
  environment; a model it fails on is a row saying so.

Every quantized model is then judged here, in one process, against the float model on the
held-out feeds: the model's task **agreement** (its zoo/newmodels metric), **cosine** (worst
output, feeds pooled), **quantize wall / CPU s** (CPU: ``time.process_time`` of the quantizing
process, all its threads), **latency ×** (1-thread onnxruntime CPU session, quantized / float on
the first 4 held-out feeds, interleaved, best of 3 passes) and **size ×** (file bytes / float's).

    PYTHONPATH=src:. nice -n 5 python bench/nncf_compare.py --models magika,orinet --runs ours,ours_norepair,nncf,nncf_mixed
    PYTHONPATH=src:. python bench/nncf_compare.py --table "=main 27b873c"   # the Markdown table of --work/rows.json

Outputs (models, feeds, rows.json) stay under ``--work`` (default /work/cache/nncfcmp) so NNCF's
placement can be read afterwards (``--describe MODEL``: which activations each run quantized, with
which zero point, and what reads them).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

WORK = Path("/work/cache/nncfcmp")
NNCF_PYTHON = "/work/cache/nncfvenv/bin/python"
RUNS = ("ours", "ours_norepair", "nncf", "nncf_mixed")
LABEL = {"ours": "ours A8W8 (defaults: floor + repair)", "ours_norepair": "ours A8W8, repair=False",
         "nncf": "NNCF defaults (PERFORMANCE)", "nncf_mixed": "NNCF preset MIXED",
         "ours_a16": "ours A16W8 (defaults)", "nncf_a16": "NNCF A16W8 (mode-less 16-bit acts)"}


# ----------------------------------------------------------------------------- feeds on disk

def save_feeds(path: Path, feeds: list[dict[str, np.ndarray]]) -> None:
    arrays = {f"{i:05d}/{k}": v for i, f in enumerate(feeds) for k, v in f.items()}
    tmp = path.with_name(path.name + ".part.npz")
    np.savez(tmp, **arrays)
    os.replace(tmp, path)


def load_feeds(path: Path) -> list[dict[str, np.ndarray]]:
    with np.load(path) as z:
        feeds: dict[int, dict[str, np.ndarray]] = {}
        for key in z.files:
            i, name = key.split("/", 1)
            feeds.setdefault(int(i), {})[name] = z[key]
    return [feeds[i] for i in sorted(feeds)]


# ----------------------------------------------------------------------------- NNCF worker (its own venv)

def nncf_worker(model_path: str, calib_path: str, output: str, preset: str) -> None:
    """Runs in NNCF's venv: quantize, save, print one JSON line with the seconds."""
    import nncf
    import onnx

    feeds = load_feeds(Path(calib_path))
    model = onnx.load(model_path)
    kwargs = {}
    if preset == "mixed":
        kwargs["preset"] = nncf.QuantizationPreset.MIXED
    t0, c0 = time.perf_counter(), time.process_time()
    quantized = nncf.quantize(model, nncf.Dataset(feeds), subset_size=len(feeds), **kwargs)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    tmp = output + ".part"
    onnx.save(quantized, tmp)
    os.replace(tmp, output)
    print(json.dumps({"quantize_s": round(wall, 2), "quantize_cpu_s": round(cpu, 2)}))


# ----------------------------------------------------------------------------- models

def _models():
    """name -> (float model path, calibration maker, held-out maker, metric, metric name).
    Makers return feed lists; the zoo's counts for zoo models, 12 / 32 for outside models."""
    import _common  # noqa: F401 - repository root on sys.path

    from testkit import zoo

    models = {}
    for m in zoo.ZOO:
        models[m.name] = (lambda m=m: m.path(), lambda m=m: m.samples("calibration"), lambda m=m: m.samples("heldout"),
                          lambda ref, test, feeds, m=m: m.metric(ref, test, feeds, m.root()), m.metric_name)
    import newmodels

    for name, (rel, make, metric_name, metric) in newmodels.MODELS.items():
        models[name] = (lambda rel=rel: newmodels.SRC / rel, lambda make=make: make(12, 1), lambda make=make: make(32, 1000),
                        lambda ref, test, feeds, metric=metric: metric(ref, test, feeds, None), metric_name)

    def ppocr(kind: str):
        from testkit import ocr_reference
        from testkit.models import model_path

        path = model_path(kind)
        ref = (ocr_reference.rec_reference(path, 12, 1, 64, 3) if kind == "rec" else ocr_reference.cls_reference(path, 12, 1, 96, 3))
        return path, [{"x": ref["calib"][i:i + 1]} for i in range(len(ref["calib"]))], [{"x": ref["images"][i:i + 1]} for i in range(len(ref["images"]))]

    models["ppocrv4_rec"] = (lambda: ppocr("rec")[0], lambda: ppocr("rec")[1], lambda: ppocr("rec")[2],
                             lambda ref, test, feeds: zoo.ctc_strings(ref, test, feeds, None), "CTC string agreement")
    models["ppocr_cls"] = (lambda: ppocr("cls")[0], lambda: ppocr("cls")[1], lambda: ppocr("cls")[2],
                           lambda ref, test, feeds: zoo.top1()(ref, test, feeds, None), "top-1 agreement")
    return models


def feeds_for(name: str, work: Path):
    """The model's calibration and held-out feeds, made once and kept as .npz."""
    models = _models()
    path_fn, calib_fn, held_fn, _, _ = models[name]
    d = work / name
    d.mkdir(parents=True, exist_ok=True)
    if not (d / "calib.npz").exists():
        save_feeds(d / "calib.npz", calib_fn())
    if not (d / "held.npz").exists():
        save_feeds(d / "held.npz", held_fn())
    return Path(path_fn()), d / "calib.npz", d / "held.npz"


# ----------------------------------------------------------------------------- quantize

def quantize_ours(model: Path, calib: Path, output: Path, run: str) -> dict:
    """In a child process (its CPU seconds are its own)."""
    code = (
        "import json,sys,time,logging;sys.path.insert(0,'bench');import nncf_compare as c;import onnxptq;"
        "from onnxptq import get_preset;logging.basicConfig(level=logging.ERROR);"
        f"feeds=c.load_feeds(c.Path({str(calib)!r}));cfg=get_preset({'A16W8' if run == 'ours_a16' else 'A8W8'!r});"
        f"cfg=cfg.replace(repair=False) if {run == 'ours_norepair'} else cfg;"
        "t0,c0=time.perf_counter(),time.process_time();"
        f"r=onnxptq.quantize({str(model)!r},cfg,data=feeds,output={str(output)!r});"
        "w,cp=time.perf_counter()-t0,time.process_time()-c0;rep=getattr(r,'repair',None) or {};"
        "kept=list(rep.get('kept_float',[])) if isinstance(rep,dict) else [];"
        "print('@@'+json.dumps({'quantize_s':round(w,2),'quantize_cpu_s':round(cp,2),'repair_kept':len(kept),'kept':kept[:6]}))")
    return _child([sys.executable, "-c", code], os.environ)


def quantize_nncf(model: Path, calib: Path, output: Path, run: str, python: str) -> dict:
    preset = "mixed" if run == "nncf_mixed" else "default"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return _child([python, __file__, "--nncf-worker", str(model), str(calib), str(output), preset], env, prefix="")


def _child(cmd: list[str], env, prefix: str = "@@", timeout: float = 1800) -> dict:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, cwd=Path(__file__).resolve().parent.parent)
    except subprocess.TimeoutExpired:
        return {"status": "failed", "error": f"timeout > {timeout:.0f} s"}
    for line in reversed(p.stdout.splitlines()):
        if line.startswith(prefix + "{"):
            return {"status": "ok", **json.loads(line[len(prefix):])}
    err = [ln for ln in p.stderr.strip().splitlines() if ln.strip()]
    return {"status": "failed", "error": (err[-1] if err else f"exit {p.returncode}")[:300]}


# ----------------------------------------------------------------------------- judge

def _file_size(path: Path) -> int:
    import onnx

    size = path.stat().st_size
    seen = set()
    for t in onnx.load(str(path), load_external_data=False).graph.initializer:
        for e in t.external_data:
            if e.key == "location" and e.value not in seen:
                seen.add(e.value)
                size += (path.parent / e.value).stat().st_size
    return size


def latency_ratio(ref, test, feeds, passes: int = 5, pass_s: float = 0.2) -> float:
    """Quantized / float time over ``feeds``, interleaved feed by feed; each pass repeats the feeds
    until the float model has run ``pass_s`` seconds (small models take well under a millisecond
    a feed, where one pass of 4 feeds is all noise); the best of ``passes``."""
    ref(feeds[0]), test(feeds[0])  # warm-up: first-run allocations are not a latency
    t0 = time.perf_counter()
    for feed in feeds:
        ref(feed)
    repeats = max(1, int(pass_s / max(time.perf_counter() - t0, 1e-6)))
    import _common  # noqa: F401 - repository root on sys.path

    return _common.interleaved_ratio(ref, test, feeds, passes, repeats)


def judge(name: str, model: Path, output: Path, held: list, metric) -> dict:
    from testkit import zoo

    ref_run, test_run = zoo.session_runner(model), zoo.session_runner(output)
    ref_cache = {id(f): ref_run(f) for f in held}
    test_cache = {id(f): test_run(f) for f in held}
    ref = lambda f: ref_cache[id(f)] if id(f) in ref_cache else ref_run(f)  # noqa: E731
    test = lambda f: test_cache[id(f)] if id(f) in test_cache else test_run(f)  # noqa: E731
    return {"agreement": round(float(metric(ref, test, held)), 4), "cosine": round(float(zoo.output_cosine(ref, test, held)), 5),
            "latency_ratio": round(latency_ratio(ref_run, test_run, held[:4]), 3),
            "size_ratio": round(_file_size(output) / _file_size(model), 3)}


def run_model(name: str, runs: list[str], work: Path, python: str, rows: list[dict], rows_path: Path, tag: str) -> None:
    model, calib, heldp = feeds_for(name, work)
    metric_name, metric = _models()[name][4], _models()[name][3]
    held = load_feeds(heldp)
    n_calib = len(load_feeds(calib))
    for run in runs:
        output = work / name / f"{run}{'.' + tag if tag else ''}.onnx"
        t0 = time.perf_counter()
        row = (quantize_nncf(model, calib, output, run, python) if run.startswith("nncf")
               else quantize_ours(model, calib, output, run))
        row.update(model=name, run=run, metric=metric_name, calib=n_calib, held=len(held), tag=tag,
                   when=time.strftime("%Y-%m-%d %H:%M", time.gmtime()))
        if row["status"] == "ok":
            try:
                row.update(judge(name, model, output, held, metric))
            except Exception as exc:  # noqa: BLE001 - a row, never fatal
                row.update(status="failed", error=f"judging: {type(exc).__name__}: {str(exc)[:200]}")
        row["total_s"] = round(time.perf_counter() - t0, 1)
        rows[:] = [r for r in rows if (r["model"], r["run"], r.get("tag", "")) != (name, run, tag)] + [row]
        rows_path.write_text(json.dumps(rows, indent=1))
        print(json.dumps(row), flush=True)


# ----------------------------------------------------------------------------- table / describe

def table(rows: list[dict], libraries: dict[str, str]) -> str:
    """Every row of ``rows`` whose tag is a key of ``libraries`` (tag -> the library it measured),
    one line per (model, run, tag), models in the registry's order."""
    out = ["| model | metric | run | library | agreement | cosine | quantize wall s | quantize CPU s | latency × (1 thr) | size × | note |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    order, tags = list(_models()), list(libraries)
    chosen = [r for r in rows if r.get("tag", "") in libraries]
    for r in sorted(chosen, key=lambda r: (order.index(r["model"]) if r["model"] in order else 99,
                                           0 if r["run"].startswith("ours") else 1, tags.index(r.get("tag", "")),
                                           RUNS.index(r["run"]) if r["run"] in RUNS else 9)):
        f = lambda k, s=".3f": "-" if r.get(k) is None else format(r[k], s)  # noqa: E731
        note = r.get("error", "") if r["status"] != "ok" else (f"repair kept {r['repair_kept']} float" if r.get("repair_kept") else "")
        lib = "NNCF 3.4.0" if r["run"].startswith("nncf") else libraries[r.get("tag", "")]
        out.append(f"| {r['model']} | {r['metric']} | {LABEL.get(r['run'], r['run'])} | {lib} | {f('agreement')} | {f('cosine', '.4f')} | "
                   f"{f('quantize_s', '.1f')} | {f('quantize_cpu_s', '.1f')} | {f('latency_ratio', '.2f')} | {f('size_ratio', '.2f')} | "
                   f"{note.replace('|', '/')} |")
    return "\n".join(out) + "\n"


def describe(path: Path) -> dict:
    """Which activations a QDQ model quantizes: tensor -> (zero point != 0?, dtype, reader ops)."""
    import onnx
    from onnx import numpy_helper

    m = onnx.load(str(path), load_external_data=False)
    inits = {t.name: t for t in m.graph.initializer}
    consumers: dict[str, list[str]] = {}
    for n in m.graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    acts = {}
    for n in m.graph.node:
        if n.op_type != "QuantizeLinear" or n.input[0] in inits:
            continue
        zp = inits.get(n.input[2]) if len(n.input) > 2 else None
        zpv = numpy_helper.to_array(zp) if zp is not None else np.zeros(1)
        readers = []
        for dq in consumers.get(n.output[0], []):
            for c in consumers.get(dq.output[0], []):
                readers.append(c.op_type)
        # symmetric: zero point 0 (signed, or unsigned for a non-negative tensor as NNCF does after
        # a ReLU) or the unsigned grid's midpoint; anything else is an asymmetric (min/max) grid
        zpi = zpv.astype(np.int64)
        sym = bool(np.all(zpi == 0) or (zpv.dtype in (np.uint8, np.uint16) and np.all(zpi == (1 << (8 * zpv.itemsize - 1)))))
        acts[n.input[0]] = {"asym": not sym,
                            "dtype": str(zpv.dtype), "readers": sorted(set(readers))}
    return acts


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nncf-worker", nargs=4, metavar=("MODEL", "CALIB", "OUTPUT", "PRESET"))
    ap.add_argument("--models", default="")
    ap.add_argument("--runs", default=",".join(RUNS))
    ap.add_argument("--work", default=str(WORK))
    ap.add_argument("--nncf-python", default=NNCF_PYTHON)
    ap.add_argument("--tag", default="", help="a label for rows of a changed library (before/after a fix)")
    ap.add_argument("--table", default="", metavar="TAG=LIBRARY,...",
                    help="print the Markdown table of the rows with these tags ('=main 27b873c,after=nncfcmp 23a5839')")
    ap.add_argument("--describe", default="")
    ap.add_argument("--relatency", action="store_true", help="re-measure latency × of the rows of --models from the saved models")
    a = ap.parse_args(argv)
    if a.nncf_worker:
        nncf_worker(*a.nncf_worker)
        return 0
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    rows_path = work / "rows.json"
    rows = json.loads(rows_path.read_text()) if rows_path.exists() else []
    if a.table:
        print(table(rows, dict(item.split("=", 1) for item in a.table.split(","))))
        return 0
    if a.describe:
        for run in a.runs.split(","):
            p = work / a.describe / f"{run}.onnx"
            if p.exists():
                d = describe(p)
                print(f"{run}: {len(d)} activations, {sum(v['asym'] for v in d.values())} asymmetric")
                print(json.dumps(d, indent=0)[:20000])
        return 0
    if a.relatency:
        from testkit import zoo

        for r in rows:
            if r["model"] in a.models.split(",") and r["status"] == "ok" and r.get("tag", "") == a.tag:
                model, _, heldp = feeds_for(r["model"], work)
                out = work / r["model"] / f"{r['run']}{'.' + a.tag if a.tag else ''}.onnx"
                r["latency_ratio"] = round(latency_ratio(zoo.session_runner(model), zoo.session_runner(out), load_feeds(heldp)[:4]), 3)
                print(r["model"], r["run"], r["latency_ratio"], flush=True)
        rows_path.write_text(json.dumps(rows, indent=1))
        return 0
    for name in [n for n in a.models.split(",") if n]:
        run_model(name, [r for r in a.runs.split(",") if r], work, a.nncf_python, rows, rows_path, a.tag)
    return 0


if __name__ == "__main__":
    sys.exit(main())
