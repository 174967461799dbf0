"""Issue 27 item 6: where A8W8 stands against its peers on the models the issue names, one table.

For each model the SAME calibration and held-out data (built once by the zoo's / bench/newmodels.py's /
testkit's own builders and kept as .npz under ``--work``) go to:

* ``ours``: ``quantize(path, "A8W8")`` with defaults (floor and repair on, as a user gets it);
  ``ours_norepair``: the same with ``repair=False`` (the integer model itself);
  ``ours_pt``: our A8W8 with per-tensor weights (defaults otherwise);
* ``ref`` / ``ref_norepair``: the reference tool's A8W8 through the compatible API (MinMax,
  symmetric int8 activations, per-tensor weights: :mod:`testkit.reference`), repair on / off;
* ``ort``: onnxruntime's ``quantize_static`` with its defaults (QDQ, MinMax, int8 activations with a
  zero point, int8 per-tensor weights); ``ort_u8pc``: its CPU advice (uint8 activations, per-channel
  int8 weights);
* ``nncf`` / ``nncf_mixed``: ``nncf.quantize`` defaults (symmetric activations, per-channel weights,
  fast bias correction) and ``preset=MIXED`` (asymmetric activations), in NNCF's own venv
  (``--nncf-python``; bench/nncf_compare.py's worker).

Each output is judged against the float model twice: **as run** by onnxruntime's CPU provider with
its graph optimisations (the fused integer kernels: on a CPU without VNNI, U8S8 kernels add pairs
of products in int16 and saturate, bench/RESULTS.md "A8W8 on a CPU without VNNI") and with **exact
sums** (optimisations off: every Q/DQ pair computed in float, what a VNNI machine or an NPU gives).

Models: ``captcha_whisperer`` (CNN+LSTM CTC), ``ppocrv4_det`` (DB text detector), ``nudenet``
(YOLOv8n), ``silero`` / ``silero_ifless`` (silero VAD, 30 s clip, speech decisions), ``ppocr_cls_op10``.

    PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 nice -n 5 python bench/a8_peers.py --models nudenet --runs ours,ref,nncf_mixed
    python bench/a8_peers.py --table [--tag TAG]
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

import _common  # noqa: F401 - repository root on sys.path
import nncf_compare as nc

WORK = Path("/work/cache/a8acc15/peers")
NNCF_PYTHON = "/work/cache/a8acc15/venv-nncf/bin/python"
RUNS = ("ours", "ours_norepair", "ours_pt", "ref", "ref_norepair", "ort", "ort_u8pc", "nncf", "nncf_mixed")
LABEL = {"ours": "ours A8W8 (defaults)", "ours_norepair": "ours A8W8, repair=False", "ours_pt": "ours A8W8 per-tensor weights",
         "ref": "reference A8W8 (sym. acts, per-tensor w), repair on", "ref_norepair": "reference A8W8, repair off",
         "ort": "ORT quantize_static defaults", "ort_u8pc": "ORT quantize_static U8S8 per-channel",
         "nncf": "NNCF defaults", "nncf_mixed": "NNCF MIXED (asym. acts)"}
SILERO_CLIP_S = 30.0


# ----------------------------------------------------------------------------- models and data

def _silero(variant: str):
    from testkit import audio
    from testkit.models import SILERO, SILERO_IFLESS, model_path

    path = model_path({"silero": SILERO, "silero_ifless": SILERO_IFLESS}[variant])
    calib, _ = audio.speech_mix(seed=1, seconds=1.5)
    return path, audio.vad_feeds(str(path), calib), [{"clip": audio.speech_mix(seed=2, seconds=SILERO_CLIP_S)[0]}]


def model_data(name: str, calib_n: int, held_n: int):
    """(float path, calibration feeds, held-out feeds) of ``name``."""
    if name.startswith("silero"):
        return _silero(name)
    import newmodels

    rel, make, _, _ = newmodels.MODELS[name]
    return Path(newmodels.SRC / rel), make(calib_n, 1), make(held_n, 1000)


def feeds_for(name: str, work: Path, calib_n: int, held_n: int):
    d = work / name
    d.mkdir(parents=True, exist_ok=True)
    if not (d / "calib.npz").exists() or not (d / "held.npz").exists():
        path, calib, held = model_data(name, calib_n, held_n)
        nc.save_feeds(d / "calib.npz", calib)
        nc.save_feeds(d / "held.npz", held)
        (d / "model.txt").write_text(str(path))
    return Path((d / "model.txt").read_text()), d / "calib.npz", d / "held.npz"


def _session(path: Path, exact: bool):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads, opts.log_severity_level = 1, 1, 3
    if exact:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def evaluate(name: str, model: Path, output: Path, held: list, exact: bool) -> dict:
    """Task agreement and worst output cosine of ``output`` against ``model`` on ``held``."""
    if name.startswith("silero"):
        from testkit import audio

        clip = held[0]["clip"]
        ref = audio.run_vad(_session(model, False), clip)[0]
        test = audio.run_vad(_session(output, exact), clip)[0]
        fig = audio.compare_probs(ref, test)
        return {"agreement": round(fig["agreement"], 4), "cosine": round(fig["cosine"], 5)}
    import newmodels
    from testkit import zoo

    metric = newmodels.MODELS[name][3]
    rs, ts = _session(model, False), _session(output, exact)
    rn, tn = {i.name for i in rs.get_inputs()}, {i.name for i in ts.get_inputs()}
    rc = {id(f): rs.run(None, {k: v for k, v in f.items() if k in rn}) for f in held}
    tc = {id(f): ts.run(None, {k: v for k, v in f.items() if k in tn}) for f in held}
    ref, test = (lambda f: rc[id(f)]), (lambda f: tc[id(f)])
    return {"agreement": round(float(metric(ref, test, held, None)), 4), "cosine": round(float(zoo.output_cosine(ref, test, held)), 5)}


# ----------------------------------------------------------------------------- quantizers (child processes)

_OURS = """
import json, sys, time, logging, dataclasses
sys.path[:0] = ['bench', '.']
import nncf_compare as c
logging.basicConfig(level=logging.ERROR)
logging.getLogger('onnxptq').setLevel(logging.WARNING)
from testkit.log_capture import capture_warnings
warnings = capture_warnings(600)
run, model, calib, output = {run!r}, {model!r}, {calib!r}, {output!r}
feeds = c.load_feeds(c.Path(calib))
t0, c0 = time.perf_counter(), time.process_time()
kept = []
if run.startswith('ref'):
    from testkit.reference import quantize_reference
    quantize_reference(model, output, feeds, 'A8W8', repair=(run == 'ref'))
else:
    import onnxptq
    cfg = onnxptq.get_preset('A8W8')
    if run == 'ours_norepair':
        cfg = cfg.replace(repair=False)
    if run == 'ours_pt':
        cfg = cfg.replace(weight=dataclasses.replace(cfg.weight, per_channel=False))
    for key, value in {changes!r}.items():
        cfg = cfg.replace(**{{key: value}})
    r = onnxptq.quantize(model, cfg, data=feeds, output=output)
    rep = getattr(r, 'repair', None) or {{}}
    kept = list(rep.get('kept_float', [])) if isinstance(rep, dict) else []
w, cp = time.perf_counter() - t0, time.process_time() - c0
print('@@' + json.dumps({{'quantize_s': round(w, 2), 'quantize_cpu_s': round(cp, 2), 'repair_kept': len(kept),
                         'warnings': [x[:2000] for x in warnings][:6]}}))
"""

_ORT = """
import json, sys, time
sys.path[:0] = ['bench', '.']
import nncf_compare as c
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
from onnxruntime.quantization.shape_inference import quant_pre_process
run, model, calib, output = {run!r}, {model!r}, {calib!r}, {output!r}
feeds = c.load_feeds(c.Path(calib))
class Reader(CalibrationDataReader):
    def __init__(self):
        self.it = iter(feeds)
    def get_next(self):
        return next(self.it, None)
kw = dict(quant_format=QuantFormat.QDQ)
if run == 'ort_u8pc':
    kw.update(activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, per_channel=True)
t0, c0 = time.perf_counter(), time.process_time()
import os
os.chdir(os.path.dirname(output))  # quant_pre_process writes its temporary files to the working folder
pre = output + '.pre.onnx'
try:
    quant_pre_process(model, pre)
except Exception:
    pre = model
quantize_static(pre, output + '.part', Reader(), **kw)
os.replace(output + '.part', output)
w, cp = time.perf_counter() - t0, time.process_time() - c0
print('@@' + json.dumps({{'quantize_s': round(w, 2), 'quantize_cpu_s': round(cp, 2)}}))
"""


def quantize(run: str, model: Path, calib: Path, output: Path, nncf_python: str, changes: dict) -> dict:
    if run.startswith("nncf"):
        return nc.quantize_nncf(model, calib, output, run, nncf_python)
    code = (_ORT if run.startswith("ort") else _OURS).format(run=run, model=str(model), calib=str(calib),
                                                            output=str(output), changes=changes)
    return nc._child([sys.executable, "-c", code], os.environ)


# ----------------------------------------------------------------------------- main

def run_model(name: str, runs: list[str], a, rows: list[dict], rows_path: Path, changes: dict) -> None:
    work = Path(a.work)
    model, calib, heldp = feeds_for(name, work, a.calib, a.held)
    held = nc.load_feeds(heldp)
    for run in runs:
        output = work / name / f"{run}{'.' + a.tag if a.tag else ''}.onnx"
        t0 = time.perf_counter()
        row = quantize(run, model, calib, output, a.nncf_python, changes)
        row.update(model=name, run=run, tag=a.tag, calib=len(nc.load_feeds(calib)), held=len(held),
                   when=time.strftime("%H:%M", time.gmtime()), load=round(os.getloadavg()[0], 1))
        if row["status"] == "ok":
            for exact in ((False,) if a.no_exact else (False, True)):
                try:
                    fig = evaluate(name, model, output, held, exact)
                    row.update({f"{k}{'_exact' if exact else ''}": v for k, v in fig.items()})
                except Exception as exc:  # noqa: BLE001 - a row, never fatal
                    row[f"error{'_exact' if exact else ''}"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        row["total_s"] = round(time.perf_counter() - t0, 1)
        # read again before writing: another run of this script may have added rows meanwhile
        rows[:] = json.loads(rows_path.read_text()) if rows_path.exists() else []
        rows[:] = [r for r in rows if (r["model"], r["run"], r.get("tag", "")) != (name, run, a.tag)] + [row]
        tmp = rows_path.with_name(f"{rows_path.name}.{os.getpid()}.part")
        tmp.write_text(json.dumps(rows, indent=1))
        os.replace(tmp, rows_path)
        print(json.dumps(row), flush=True)


def table(rows: list[dict], tags: list[str]) -> str:
    out = ["| model | run | tag | agreement as run | exact sums | cosine as run / exact | quantize CPU s | repair kept | load | note |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in sorted((r for r in rows if r.get("tag", "") in tags),
                    key=lambda r: (r["model"], RUNS.index(r["run"]) if r["run"] in RUNS else 99, tags.index(r.get("tag", "")))):
        f = lambda k, s=".3f": "-" if r.get(k) is None else format(r[k], s)  # noqa: E731
        note = r.get("error", "") or r.get("error_exact", "")
        if not note and r.get("warnings"):
            note = "warned: " + r["warnings"][0][:120]
        out.append(f"| {r['model']} | {LABEL.get(r['run'], r['run'])} | {r.get('tag') or 'main'} | {f('agreement')} | {f('agreement_exact')} | "
                   f"{f('cosine', '.4f')} / {f('cosine_exact', '.4f')} | {f('quantize_cpu_s', '.1f')} | {r.get('repair_kept', '-')} | "
                   f"{r.get('load', '-')} | {note.replace('|', '/')} |")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="")
    ap.add_argument("--runs", default=",".join(RUNS))
    ap.add_argument("--work", default=str(WORK))
    ap.add_argument("--calib", type=int, default=12, help="calibration feeds (newmodels' builders)")
    ap.add_argument("--held", type=int, default=64, help="held-out feeds (newmodels' builders)")
    ap.add_argument("--nncf-python", default=NNCF_PYTHON)
    ap.add_argument("--tag", default="", help="a label for rows of a changed library")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a QuantConfig field for our runs")
    ap.add_argument("--no-exact", action="store_true", help="judge as run only (exact sums run without graph optimisations: slow)")
    ap.add_argument("--table", action="store_true")
    a = ap.parse_args(argv)
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    rows_path = work / "rows.json"
    rows = json.loads(rows_path.read_text()) if rows_path.exists() else []
    if a.table:
        print(table(rows, sorted({r.get("tag", "") for r in rows}) if not a.tag else a.tag.split(",")))
        return 0
    changes = {k: _common.cli_value(v) for k, v in (s.split("=", 1) for s in a.set)}
    for name in [n for n in a.models.split(",") if n]:
        run_model(name, [r for r in a.runs.split(",") if r], a, rows, rows_path, changes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
