"""Cost of quantizing, and latency of the block-format models, on the real PP-OCR models.

**Quantize** (wall time and peak RSS). A8W8 (``onnxptq.quantize``) on PP-OCRv4 rec with 64 and
with 512 calibration lines, beside ``onnxruntime.quantization.quantize_static`` (QuantFormat.QDQ,
MinMax, U8S8, per-channel and per-tensor weights) on the same data in the same run. The lines are
rendered once (``testkit.ocr.render_lines``) into one uncompressed ``.npz``; rendering is
not counted. Every job runs in its own fresh Python process, so its peak RSS is its own:

* **wall s** — ``time.perf_counter`` around the quantize call alone (imports, reading the model
  path and starting the process are outside it; writing the output model is inside it);
* **peak RSS MiB** — ``VmHWM`` from ``/proc/self/status`` at the end of the child (the whole
  process: Python, numpy, onnxruntime, the model, the data in flight);
* **cpu s** — user + system CPU seconds of the child over the same call (``getrusage``, all
  threads): on a busy shared machine the wall time is mostly waiting for a core, this is the work;
* **base MiB** — ``VmRSS`` just before the call (interpreter + imports), so the call's own
  growth is peak − base.

Both tools get the data through the same ``CalibrationDataReader`` subclass, which streams one
line at a time out of the ``.npz`` (a zip member read row by row), so neither pays for holding
all the lines. Jobs run ``--repeats`` times in round-robin order; the table gives the median and
every run, and the ratios against the targets.

**Latency** of the BFP16 and MX9 fake-quant models (presets ``BFP16`` and ``MX9``: weights folded
at quantize time, activations through ``onnxptq`` functions) vs the float model, onnxruntime CPU,
``intra_op_num_threads = inter_op_num_threads = 1``, default graph optimisation, one rendered
line as input: cls 1×3×48×192, rec 1×3×48×320. Variants are timed in round-robin rounds (a load
drift hits all alike); each figure is the median over ``--runs`` rounds of wall time
(``perf_counter``) and CPU time of the calling thread (``thread_time``: onnxruntime runs a
one-thread graph on the caller's thread, so on a shared machine it is the work itself).

    python bench/quantize.py [--repeats 2] [--runs 30] [--only quantize|latency] [--lines 64,512]
                             [--jobs onnxptq,ort_pc] [--src PATH ...]

``--jobs`` picks the quantize jobs (default: all four). ``--src`` (repeatable) runs the onnxptq
jobs once per onnxptq source tree (e.g. an earlier commit's ``src`` from ``git archive``), each
row labelled with its tree, in the same round-robin as onnxruntime's: before/after figures side by
side in one run. Every job's output file is hashed (``sha``: the first 16 hex digits of its
sha256), so a change meant to keep the delivered model shows it byte for byte.

Child mode (used by the parent): ``python bench/quantize.py --job TOOL:LINES --npz PATH``.
"""

from __future__ import annotations

import _common  # the repository root on sys.path (testkit), the bench's session helper
import dataclasses
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

#: (job id, description) of the quantize jobs; run for each line count.
JOBS: tuple[tuple[str, str], ...] = (
    ("onnxptq", "onnxptq A8W8 (per-channel int8 weights, Percentile int8 activations)"),
    ("onnxptq_noeval", "onnxptq A8W8, eval_samples=0 (no float-vs-quantized report)"),
    ("ort_pc", "onnxruntime quantize_static QDQ U8S8 MinMax, per-channel"),
    ("ort_pt", "onnxruntime quantize_static QDQ U8S8 MinMax, per-tensor"),
)

TARGET_WALL = 0.5  # ours / onnxruntime's
TARGET_RSS = 0.5  # ours / onnxruntime's (issue 26 item 4)
TARGET_RSS_GROWTH = 1.1  # ours at the largest line count / ours at the smallest
TARGET_LATENCY = {"cls": 8.0, "rec": 3.0}


# ---------------------------------------------------------------------------------------------
# data


class NpzLineReader:
    """A ``CalibrationDataReader`` yielding ``{"x": [1,3,48,W]}`` feeds streamed from an .npz.

    Reads the ``x.npy`` member's header, then one row per ``get_next`` — memory O(one line).
    Subclasses onnxruntime's ``CalibrationDataReader`` (so ``quantize_static`` takes it) and has
    ``rewind`` (onnxruntime calls it between passes for some calibrators).
    """

    def __init__(self, path: str | os.PathLike, limit: int | None = None, input_name: str = "x") -> None:
        self.path = str(path)
        self.limit = limit
        self.input_name = input_name
        self._open()

    def _open(self) -> None:
        self._zip = zipfile.ZipFile(self.path)
        self._file = self._zip.open(f"{self.input_name}.npy")
        version = np.lib.format.read_magic(self._file)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _fortran, self._dtype = read_header(self._file)
        self._row_shape = tuple(shape[1:])
        self._row_bytes = int(np.prod(self._row_shape)) * self._dtype.itemsize
        self._left = shape[0] if self.limit is None else min(shape[0], self.limit)

    def get_next(self) -> dict[str, np.ndarray] | None:
        if self._left <= 0:
            return None
        buf = self._file.read(self._row_bytes)
        self._left -= 1
        return {self.input_name: np.frombuffer(buf, self._dtype).reshape((1, *self._row_shape)).copy()}

    def rewind(self) -> None:
        self._file.close()
        self._zip.close()
        self._open()


def _reader_class() -> type:
    """NpzLineReader as a subclass of onnxruntime's CalibrationDataReader (imported lazily)."""
    from onnxruntime.quantization import CalibrationDataReader

    return type("NpzCalibrationDataReader", (NpzLineReader, CalibrationDataReader), {})


def render_npz(path: Path, n: int, seed: int = 1234) -> float:
    """Render ``n`` rec lines into ``path`` (uncompressed .npz keyed ``x``); return the seconds taken."""
    from testkit import ocr
    from testkit.models import model_path

    t0 = time.perf_counter()
    images, _ = ocr.render_lines(n, seed, characters=ocr.load_characters(model_path("rec")))
    ocr.save_npz(path, images, "x")
    return time.perf_counter() - t0


# ---------------------------------------------------------------------------------------------
# child: one quantize job


def run_job(job: str, lines: int, npz: str, out_dir: str) -> dict[str, Any]:
    """Run one quantize job in this process and return its figures (the child's whole work)."""
    import logging

    logging.disable(logging.WARNING)  # onnxruntime's quantizer logs a line per tensor at INFO
    from testkit.models import model_path

    model = str(model_path("rec"))
    reader = _reader_class()(npz, limit=lines)
    output = os.path.join(out_dir, f"{job}_{lines}.onnx")
    if job.startswith("onnxptq"):
        # Import the whole pipeline first (onnx_ir pulls in sympy: ~1.5-3 s), as onnxruntime's
        # quantizer is imported before its clock starts.
        from onnxptq.api import quantize
        from onnxptq.config.presets import get_preset

        from onnxptq.memory import share_malloc_arena

        share_malloc_arena()  # as the onnxptq command does in its process (the library never does)
        cfg = get_preset("A8W8")
        cfg = cfg.replace(calibration=dataclasses.replace(cfg.calibration, progress=False))
        kw = {"eval_samples": 0} if job == "onnxptq_noeval" else {}
        base = _common.status_kib("VmRSS")
        cpu0 = _common.cpu_s()
        t0 = time.perf_counter()
        result = quantize(model, cfg, reader, output, **kw)
        wall = time.perf_counter() - t0
        repair = result.repair or {}
        # the repair's builds: its CPU budget (a multiple of the plain quantization's CPU time) sets
        # how many candidates it judges, and each one's buffers are part of the peak
        extra = {"samples": result.calibration_samples, "timings": result.timings,
                 "repair_builds": int(repair.get("evaluations", 0))}
    else:
        from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

        base = _common.status_kib("VmRSS")
        cpu0 = _common.cpu_s()
        t0 = time.perf_counter()
        quantize_static(
            model, output, reader, quant_format=QuantFormat.QDQ, per_channel=(job == "ort_pc"),
            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, calibrate_method=CalibrationMethod.MinMax,
        )
        wall = time.perf_counter() - t0
        extra = {}
    cpu = _common.cpu_s() - cpu0
    import hashlib

    with open(output, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()[:16]
    return {"job": job, "lines": lines, "wall_s": wall, "cpu_s": cpu, "peak_mib": _common.status_kib("VmHWM") / 1024,
            "base_mib": base / 1024, "output_mib": os.path.getsize(output) / 2**20, "sha": sha, **extra}


def spawn_job(job: str, lines: int, npz: Path, out_dir: str, src: str | None = None) -> dict[str, Any]:
    """Run ``job`` in a fresh interpreter (onnxptq from the tree ``src`` when given); its last stdout
    line is the JSON result."""
    t0 = time.perf_counter()
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        out_dir = os.path.join(out_dir, _tree_label(src))
        os.makedirs(out_dir, exist_ok=True)
    proc = subprocess.run(
        [sys.executable, __file__, "--job", f"{job}:{lines}", "--npz", str(npz), "--out-dir", out_dir],
        capture_output=True, text=True, env=env,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"job {job}:{lines} failed (rc {proc.returncode}):\n{proc.stderr[-4000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["process_s"] = time.perf_counter() - t0
    return result


def _tree_label(src: str) -> str:
    """A source tree's row label: its folder's name (``/work/cache/x/base/src`` -> ``base``)."""
    path = Path(src).resolve()
    return path.parent.name if path.name == "src" else path.name


def bench_quantize(lines_list: list[int], repeats: int, workdir: Path, jobs: list[str] | None = None,
                   srcs: list[str] | None = None) -> str:
    npz = workdir / f"rec_lines_{max(lines_list)}.npz"
    render_s = render_npz(npz, max(lines_list))
    print(f"rendered {max(lines_list)} lines into {npz} ({npz.stat().st_size / 2**20:.0f} MiB) in {render_s:.1f} s "
          "(not counted)", file=sys.stderr)
    chosen = [(job, desc) for job, desc in JOBS if jobs is None or job in jobs]
    # (row key, job, description, tree): onnxptq's jobs once per tree, onnxruntime's once
    rows: list[tuple[str, str, str, str | None]] = []
    for job, desc in chosen:
        if job.startswith("onnxptq") and srcs:
            rows += [(f"{job}@{_tree_label(src)}", job, f"{desc} [{_tree_label(src)}]", src) for src in srcs]
        else:
            rows.append((job, job, desc, None))
    results: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for rep in range(repeats):
        for lines in lines_list:
            for key, job, _, src in rows:
                r = spawn_job(job, lines, npz, str(workdir), src)
                print(f"  [{rep + 1}/{repeats}] {key:14s} {lines:4d} lines: {r['wall_s']:7.2f} s (cpu {r['cpu_s']:.2f} s)  "
                      f"peak {r['peak_mib']:7.1f} MiB  (base {r['base_mib']:.0f})  sha {r['sha']}"
                      + (f"  repair builds {r['repair_builds']}" if "repair_builds" in r else ""), file=sys.stderr)
                results.setdefault((key, lines), []).append(r)

    def med(key: str, lines: int, field: str) -> float:
        return statistics.median(r[field] for r in results[(key, lines)])

    out = ["| job | lines | wall s (median) | wall s (runs) | cpu s (median) | cpu s (runs) | peak RSS MiB (median) | peak RSS MiB (runs) | base MiB | repair builds (runs) | sha256[:16] |",
           "|---|---:|---:|---|---:|---|---:|---|---:|---|---|"]
    for lines in lines_list:
        for key, _, desc, _ in rows:
            rs = results[(key, lines)]
            out.append(f"| {desc} | {lines} | {med(key, lines, 'wall_s'):.2f} | "
                       f"{', '.join('%.2f' % r['wall_s'] for r in rs)} | {med(key, lines, 'cpu_s'):.2f} | "
                       f"{', '.join('%.2f' % r['cpu_s'] for r in rs)} | {med(key, lines, 'peak_mib'):.0f} | "
                       f"{', '.join('%.0f' % r['peak_mib'] for r in rs)} | {med(key, lines, 'base_mib'):.0f} | "
                       f"{', '.join(str(r['repair_builds']) for r in rs) if 'repair_builds' in rs[0] else '—'} | "
                       f"{', '.join(sorted({r['sha'] for r in rs}))} |")
    ours = [key for key, job, _, _ in rows if job == "onnxptq"]
    theirs = [(job, label) for job, label in (("ort_pc", "per-channel"), ("ort_pt", "per-tensor")) if any(r[0] == job for r in rows)]
    stages = []
    for key in ours:
        for lines in lines_list:
            t = results[(key, lines)][0].get("timings", {})
            stages.append(f"{key}, {lines} lines: " + ", ".join(f"{k} {v:.2f}s" for k, v in t.items()))
    out += ["", "onnxptq stage timings (first run): " + "; ".join(stages), "",
            "| ratio | lines | value | target | met |", "|---|---:|---:|---:|---|"]
    for key in ours:
        for lines in lines_list:
            for job, label in theirs:
                w = med(key, lines, "wall_s") / med(job, lines, "wall_s")
                c = med(key, lines, "cpu_s") / med(job, lines, "cpu_s")
                m = med(key, lines, "peak_mib") / med(job, lines, "peak_mib")
                out.append(f"| wall {key} / onnxruntime {label} | {lines} | {w:.2f} | ≤ {TARGET_WALL} | {'yes' if w <= TARGET_WALL else 'NO'} |")
                out.append(f"| cpu {key} / onnxruntime {label} | {lines} | {c:.2f} | (≤ {TARGET_WALL}) | {'yes' if c <= TARGET_WALL else 'NO'} |")
                out.append(f"| peak RSS {key} / onnxruntime {label} | {lines} | {m:.2f} | ≤ {TARGET_RSS} | {'yes' if m <= TARGET_RSS else 'NO'} |")
        lo, hi = min(lines_list), max(lines_list)
        if hi != lo:
            g = med(key, hi, "peak_mib") / med(key, lo, "peak_mib")
            out.append(f"| peak RSS {key} {hi} / {lo} lines | {hi} | {g:.2f} | ≤ {TARGET_RSS_GROWTH} | {'yes' if g <= TARGET_RSS_GROWTH else 'NO'} |")
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------
# latency of the BFP16 / MX9 models


def _session(model: Any):
    return _common.session(model, 1, inter_op_threads=1)


def _fake_quant_models(name: str) -> dict[str, Any]:
    import onnx

    import onnxptq
    from testkit.models import model_path

    path = model_path(name)
    models: dict[str, Any] = {"float": onnx.load(str(path))}
    for preset in ("BFP16", "MX9"):
        models[preset] = onnxptq.quantize(str(path), preset, None).model
    return models


def bench_latency(runs: int, warmup: int = 3) -> str:
    from testkit import ocr
    from testkit.models import model_path

    inputs = {
        "cls": ocr.render_cls(1, seed=7)[0],
        "rec": ocr.render_lines(1, seed=7, characters=ocr.load_characters(model_path("rec")))[0],
    }
    rows = ["| model | input | variant | functions | wall ms (median) | cpu ms (median) | × float (wall) | × float (cpu) | target | met |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for name, x in inputs.items():
        models = _fake_quant_models(name)
        sessions = {k: _session(m) for k, m in models.items()}
        feeds = {k: {s.get_inputs()[0].name: x} for k, s in sessions.items()}
        for k, s in sessions.items():
            for _ in range(warmup):
                s.run(None, feeds[k])
        wall: dict[str, list[float]] = {k: [] for k in sessions}
        cpu: dict[str, list[float]] = {k: [] for k in sessions}
        for _ in range(runs):
            for k, s in sessions.items():
                c0, w0 = time.thread_time(), time.perf_counter()
                s.run(None, feeds[k])
                wall[k].append((time.perf_counter() - w0) * 1e3)
                cpu[k].append((time.thread_time() - c0) * 1e3)
        fw, fc = statistics.median(wall["float"]), statistics.median(cpu["float"])
        for k in sessions:
            w, c = statistics.median(wall[k]), statistics.median(cpu[k])
            n_fn = sum(1 for n in models[k].graph.node if n.domain == "onnxptq")
            if k == "float":
                target = met = "—"
            else:
                target = f"≤ {TARGET_LATENCY[name]:g}×"
                met = "yes" if c / fc <= TARGET_LATENCY[name] else "NO"
            rows.append(f"| {name} | {'×'.join(map(str, x.shape))} | {k} | {n_fn} | {w:.2f} | {c:.2f} | "
                        f"{w / fw:.2f} | {c / fc:.2f} | {target} | {met} |")
    rows.append("")
    rows.append("'met' is judged on the cpu ratio (thread time; wall time on this shared machine includes waiting for a core).")
    return "\n".join(rows)


# ---------------------------------------------------------------------------------------------


def _versions() -> str:
    import onnx
    import onnxruntime

    import onnxptq

    src = Path(onnxptq.__file__).resolve().parent
    try:
        rev = subprocess.run(["git", "-C", str(src), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    except OSError:
        rev = ""
    return (f"python {platform.python_version()}, onnxptq {getattr(onnxptq, '__version__', '?')} from {src}"
            f"{' (git ' + rev + ')' if rev else ''}, "
            f"onnx {onnx.__version__}, onnxruntime {onnxruntime.__version__}, numpy {np.__version__}; "
            f"{platform.machine()}, {os.cpu_count()} CPUs")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=2, help="runs of each quantize job (round-robin)")
    p.add_argument("--runs", type=int, default=30, help="latency rounds (median taken)")
    p.add_argument("--lines", default="64,512", help="calibration line counts")
    p.add_argument("--only", choices=("quantize", "latency"))
    p.add_argument("--workdir", help="where the .npz and the outputs go (default: a temporary folder)")
    p.add_argument("--jobs", help=f"comma-separated quantize jobs (default: all of {', '.join(j for j, _ in JOBS)})")
    p.add_argument("--src", action="append", default=[], help="an onnxptq src tree for the onnxptq jobs (repeatable; "
                   "default: the importable one)")
    p.add_argument("--job", help=argparse.SUPPRESS)
    p.add_argument("--npz", help=argparse.SUPPRESS)
    p.add_argument("--out-dir", help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    if args.job:  # child
        job, lines = args.job.split(":")
        print(json.dumps(run_job(job, int(lines), args.npz, args.out_dir)))
        return

    print(f"<!-- {datetime.datetime.now().isoformat(timespec='seconds')}; {_versions()} -->")
    with tempfile.TemporaryDirectory(prefix="onnxptq_bench_") as tmp:
        workdir = Path(args.workdir or tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        if args.only in (None, "quantize"):
            lines_list = sorted(int(v) for v in args.lines.split(","))
            print(f"\n### Quantize: PP-OCRv4 rec, {args.repeats} runs per job\n")
            jobs = args.jobs.split(",") if args.jobs else None
            unknown = sorted(set(jobs or ()) - {j for j, _ in JOBS})
            if unknown:
                p.error(f"--jobs: unknown job(s) {unknown}; known: {[j for j, _ in JOBS]}")
            print(bench_quantize(lines_list, args.repeats, workdir, jobs, args.src or None))
        if args.only in (None, "latency"):
            print(f"\n### Latency: fake-quant models, one thread, median of {args.runs} rounds\n")
            print(bench_latency(args.runs))


if __name__ == "__main__":
    main()
