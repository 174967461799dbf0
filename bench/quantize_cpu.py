"""A8W8 quantize CPU and peak RSS against onnxruntime's ``quantize_static``, PP-OCRv4 rec and PP-OCR cls (issue 26 item 4).

Both tools quantize the same model on the same feeds, each job in a fresh Python process, side by side
in round-robin order (a drift of the shared machine's load hits every job alike):

* **onnxptq** — ``onnxptq.quantize(model, "A8W8" preset, reader, output)`` as the CLI runs it
  (``memory.share_malloc_arena()`` first, no progress bar): calibration, the accuracy floor's
  held-out judgement, repair where it breaks, the saved file;
* **ort_pc** — ``onnxruntime.quantization.quantize_static`` QDQ, U8 activations / S8 weights, MinMax,
  per-channel weights (the closer of its two forms to our A8W8, and the one ``bench/quantize.py`` compares).

The feeds are rendered once (``testkit.ocr``: rec text lines 1×3×48×320 with the model's own
alphabet, cls lines 1×3×48×192, half of them turned 180°) into uncompressed ``.npz`` files and
streamed one row a ``get_next`` by ``bench/quantize.py``'s ``NpzLineReader`` (a subclass of
onnxruntime's ``CalibrationDataReader``), so neither tool pays for holding them. Per job:

* **cpu s** — user + system CPU of the child over the quantize call alone (``getrusage``, every
  thread): the work, whatever the load;
* **peak MiB** — the child's ``VmHWM`` at the end (the whole process: the interpreter, NumPy,
  onnxruntime, the model, the data in flight); **base MiB** its ``VmRSS`` just before the call;
* **wall s** — ``perf_counter`` around the call (not to be read on a loaded machine);
* **sha** — the first 16 hex digits of the saved file's sha256 (two source trees, the same bytes).

``--src`` (repeatable) runs the onnxptq job once per source tree (an earlier commit's ``src`` from
``git archive``): before/after in one run. ``--prof N`` then quantizes each model once more with the
last tree under cProfile (process-time clock) and prints our top ``N`` functions by self time and
onnxruntime's ``run``/session creation beside them.

    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/quantize_cpu.py --models rec,cls --feeds 64 --repeats 3 \
        --workdir /work/cache/quantcpu3/qc [--src <base>/src --src $PWD/src] [--prof 25]

Child mode (used by the parent): ``python bench/quantize_cpu.py --job MODEL:TOOL --npz PATH --out-dir DIR``.
"""

from __future__ import annotations

import _common  # the repository root on sys.path (testkit); print_profile
import argparse
import collections
import dataclasses
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

#: model -> what the rendered feeds are
MODELS = {"rec": "PP-OCRv4 rec, rendered text lines 1×3×48×320", "cls": "PP-OCR cls, rendered lines 1×3×48×192"}
TOOLS = ("onnxptq", "ort_pc")
TARGET = 0.5  # ours / quantize_static's, CPU and peak (issue 26 item 4)


def _zoo(model: str) -> Any:
    """The zoo member ``zoo:NAME`` names (testkit/zoo.py), or None for the shipped models."""
    if not model.startswith("zoo:"):
        return None
    from testkit import zoo

    found = [z for z in zoo.ZOO if z.name == model[4:]]
    if not found:
        raise SystemExit(f"--models: {model!r} is not in testkit/zoo.py's ZOO")
    return found[0]


def _model_file(model: str) -> tuple[str, str]:
    """``(path, input name)`` of ``model``: the shipped models read ``x``; a zoo member must have one input
    (the feeds are streamed one array a row by ``bench/quantize.py``'s reader)."""
    member = _zoo(model)
    if member is None:
        from testkit.models import model_path

        return str(model_path(model)), "x"
    import onnx

    path = str(member.path())
    graph = onnx.load(path, load_external_data=False).graph
    inits = {i.name for i in graph.initializer}
    inputs = [i.name for i in graph.input if i.name not in inits]
    if len(inputs) != 1:
        raise SystemExit(f"{model}: {len(inputs)} inputs; quantize_cpu.py streams models of one input")
    return path, inputs[0]


def render(model: str, n: int, path: Path, seed: int = 1234) -> None:
    """``n`` feeds of ``model`` into ``path`` (keyed by its input: ``x`` for rec/cls; a zoo member's
    own feeds as its package makes them, ``testkit/zoo.py``, calibration seed)."""
    from testkit import ocr
    from testkit.models import model_path

    member = _zoo(model)
    if member is not None:
        import numpy as np

        from testkit import zoo

        _, name = _model_file(model)
        feeds = member.make(member.root(), n, zoo.CALIBRATION_SEED)
        ocr.save_npz(path, np.concatenate([f[name] for f in feeds], axis=0), name)
        return
    if model == "rec":
        images, _ = ocr.render_lines(n, seed, characters=ocr.load_characters(model_path("rec")))
    else:
        images, _ = ocr.render_cls(n, seed)
    ocr.save_npz(path, images, "x")


def _quantize(model: str, tool: str, npz: str, output: str) -> dict[str, Any]:
    """One quantize in this process: its CPU, peak and file."""
    import logging

    import quantize as bench_quantize

    logging.disable(logging.WARNING)  # onnxruntime's quantizer logs a line per tensor at INFO
    path, input_name = _model_file(model)
    reader = bench_quantize._reader_class()(npz, input_name=input_name)
    extra: dict[str, Any] = {}
    if tool == "onnxptq":
        from onnxptq.api import quantize
        from onnxptq.config.presets import get_preset
        from onnxptq.memory import share_malloc_arena

        share_malloc_arena()  # as the onnxptq command does in its process
        cfg = get_preset("A8W8")
        cfg = cfg.replace(calibration=dataclasses.replace(cfg.calibration, progress=False))
        base, cpu0, t0 = _common.status_kib("VmRSS"), _common.cpu_s(), time.perf_counter()
        result = quantize(path, cfg, reader, output)
        wall, cpu = time.perf_counter() - t0, _common.cpu_s() - cpu0
        floor = result.floor
        extra = {"samples": result.calibration_samples, "builds": int((result.repair or {}).get("evaluations", 0)),
                 "verdict": floor.describe() if floor is not None else "(no floor)"}
    else:
        from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

        base, cpu0, t0 = _common.status_kib("VmRSS"), _common.cpu_s(), time.perf_counter()
        quantize_static(path, output, reader, quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                        calibrate_method=CalibrationMethod.MinMax)
        wall, cpu = time.perf_counter() - t0, _common.cpu_s() - cpu0
    with open(output, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()[:16]
    return {"model": model, "tool": tool, "cpu_s": cpu, "wall_s": wall, "peak_mib": _common.status_kib("VmHWM") / 1024,
            "base_mib": base / 1024, "sha": sha, **extra}


def spawn(model: str, tool: str, npz: Path, out_dir: Path, src: str | None) -> dict[str, Any]:
    """``_quantize`` in a fresh interpreter (onnxptq from ``src`` when given); its last stdout line is the JSON."""
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    out = out_dir / f"{model}_{tool}_{_label(src)}.onnx"
    proc = subprocess.run([sys.executable, __file__, "--job", f"{model}:{tool}", "--npz", str(npz), "--out", str(out)],
                          capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{model}:{tool} ({_label(src)}) failed (rc {proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _label(src: str | None) -> str:
    """A tree's label: its folder's name (``/work/cache/x/base/src`` -> ``base``); ``-`` for onnxruntime."""
    if src is None:
        return "-"
    path = Path(src).resolve()
    return path.parent.name if path.name == "src" else path.name


def profile(model: str, npz: str, top: int) -> None:
    """One onnxptq quantize of ``model`` under cProfile: our functions by self time, onnxruntime's calls beside."""
    import cProfile
    import pstats
    import tempfile

    prof = cProfile.Profile(time.process_time)
    with tempfile.TemporaryDirectory() as tmp:
        prof.enable()
        got = _quantize(model, "onnxptq", npz, os.path.join(tmp, "q.onnx"))
        prof.disable()
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    print(f"\ncProfile {model} A8W8: {got['cpu_s']:.2f} CPU s under the profiler, sha {got['sha']}")
    _common.print_profile(stats, top, builtins=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="rec,cls")
    ap.add_argument("--feeds", type=int, default=64, help="rendered feeds per model (every one given to both tools)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workdir", default="/tmp/quantize_cpu")
    ap.add_argument("--src", action="append", default=[], help="an onnxptq src tree (repeatable); default: the one imported")
    ap.add_argument("--prof", type=int, default=0, metavar="N")
    ap.add_argument("--job", help=argparse.SUPPRESS)
    ap.add_argument("--npz", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.job:
        model, tool = args.job.rsplit(":", 1)
        print(json.dumps(_quantize(model, tool, args.npz, args.out)))
        return
    models = [m for m in args.models.split(",") if m]
    unknown = [m for m in models if m not in MODELS and not m.startswith("zoo:")]
    if unknown:
        ap.error(f"--models: {unknown} not among {sorted(MODELS)} nor zoo:NAME")
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    srcs: list[str | None] = list(args.src) or [None]
    npz = {}
    for m in models:
        npz[m] = work / f"{m}_{args.feeds}.npz"
        if not npz[m].exists():
            render(m, args.feeds, npz[m])
    print(f"<!-- {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f} "
          f"at the start; {args.feeds} feeds a model, every one given to both tools -->")
    runs: dict[tuple[str, str, str], list[dict[str, Any]]] = collections.defaultdict(list)
    for rep in range(args.repeats):
        for m in models:
            for key_src in [(s, "onnxptq") for s in srcs] + [(None, "ort_pc")]:
                src, tool = key_src
                r = spawn(m, tool, npz[m], work, src if tool == "onnxptq" else None)
                r["load"] = os.getloadavg()[0]
                runs[(m, tool, _label(src) if tool == "onnxptq" else "-")].append(r)
                print(f"  [{rep + 1}/{args.repeats}] {m} {tool:8s} {_label(src) if tool == 'onnxptq' else '':10s} "
                      f"cpu {r['cpu_s']:.2f} s  wall {r['wall_s']:.2f} s  peak {r['peak_mib']:.0f} MiB  sha {r['sha']}  "
                      f"load {r['load']:.1f}" + (f"  builds {r['builds']}" if "builds" in r else ""), file=sys.stderr)
    print("\n| model | job | cpu s (median) | cpu s (runs) | peak MiB (median) | peak MiB (runs) | base MiB | sha256[:16] |")
    print("|---|---|---:|---|---:|---|---:|---|")
    med = {k: (statistics.median(r["cpu_s"] for r in v), statistics.median(r["peak_mib"] for r in v)) for k, v in runs.items()}
    for (m, tool, label), v in runs.items():
        job = f"onnxptq A8W8 [{label}]" if tool == "onnxptq" else "quantize_static QDQ U8S8 MinMax per-channel"
        shas = ", ".join(sorted({r["sha"] for r in v}))
        cpus = ", ".join(f"{r['cpu_s']:.2f}" for r in v)
        peaks = ", ".join(f"{r['peak_mib']:.0f}" for r in v)
        base = statistics.median(r["base_mib"] for r in v)
        print(f"| {m} | {job} | {med[(m, tool, label)][0]:.2f} | {cpus} | {med[(m, tool, label)][1]:.0f} | {peaks} | "
              f"{base:.0f} | {shas} |")
    print("\n| model | tree | CPU ours / quantize_static | peak ours / quantize_static | met (≤ 0.5 both) |")
    print("|---|---|---:|---:|---|")
    for m in models:
        ref = med[(m, "ort_pc", "-")]
        for s in srcs:
            ours = med[(m, "onnxptq", _label(s))]
            cpu, peak = ours[0] / ref[0], ours[1] / ref[1]
            print(f"| {m} | {_label(s)} | {cpu:.2f} | {peak:.2f} | {'yes' if cpu <= TARGET and peak <= TARGET else 'no'} |")
    for m in models:
        v = runs[(m, "onnxptq", _label(srcs[-1]))]
        print(f"\n{m} verdict ({_label(srcs[-1])}, {v[0]['samples']} calibration samples, {v[0]['builds']} repair builds): "
              f"{v[0]['verdict']}")
    if args.prof:
        for m in models:
            env = dict(os.environ)
            if srcs[-1] is not None:
                env["PYTHONPATH"] = srcs[-1] + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
            code = (f"import sys; sys.argv = ['quantize_cpu']; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
                    f"import quantize_cpu; quantize_cpu.profile({m!r}, {str(npz[m])!r}, {args.prof})")
            subprocess.run([sys.executable, "-c", code], env=env, check=True)


if __name__ == "__main__":
    main()
