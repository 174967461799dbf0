"""Integer block formats on the shipped PP-OCR models: every-op placement vs dot-product operands only.

For each model (PP-OCRv4 rec, PP-OCR mobile cls, PP-OCRv4 det) and each preset (BFP16, MX9, MXINT8
and spot checks such as MX6/MX4), quantizes twice in ONE process with the preset's defaults (floor
and repair on), once with ``int_block_dot_operands_only=False`` (the every-op placement: what main
did before branch blockdot; byte-identical files, checked on cls) and once with ``True`` (dot-product
operands only), and BF16 once as the quantize-time reference. Per variant:

* the model's task metric: rec CER on rendered lines (testkit.ocr_reference, 64 calibration lines of
  seed 1 in batches of 8, 200 evaluation lines of seed 3), cls accuracy and agreement with float's
  argmax (the same split), det hmean against the float model's boxes (testkit.dbdet, 8 calibration
  pages of seed 1, ``--det-pages`` evaluation pages of seed 2);
* quantize CPU seconds (``time.process_time``, the machine is shared) and their ratio to BF16's;
* file size / the float file's;
* 1-thread latency: float and every variant in one process, one-thread sessions, timed round-robin
  on one input (``--runs`` rounds): median over rounds of (variant CPU time / float CPU time).

    PYTHONPATH=src:. python bench/block_dot.py [--models rec,cls,det] [--presets BFP16,MX9,MXINT8]
                                             [--spot MX6,MX4] [--runs 20] [--json OUT]
"""

from __future__ import annotations

import _common  # the repository root on sys.path (testkit), the bench's session helper
import argparse
import dataclasses
import json
import logging
import os
import statistics
import tempfile
import time

import numpy as np
import onnxruntime as ort

PLACEMENTS = {"every op": False, "dot operands": True}


def _batches(images: np.ndarray, size: int = 8) -> list[dict[str, np.ndarray]]:
    return [{"x": np.asarray(images[i: i + size], np.float32)} for i in range(0, len(images), size)]


def _task(name: str):
    """(model path, calibration feeds, one latency feed, metric(session) -> float, metric name, float's value)."""
    from testkit import dbdet, ocr, ocr_reference
    from testkit.models import model_path

    path = str(model_path(name))
    if name == "rec":
        ref = ocr_reference.rec_reference(path, 64, 1, 200, 3)
        return (path, _batches(ref["calib"]), {"x": np.asarray(ref["images"][:1], np.float32)},
                lambda s: ocr.rec_cer(s, ref["images"], ref["texts"], characters=ref["chars"]), "CER", ref["float"])
    if name == "cls":
        ref = ocr_reference.cls_reference(path, 64, 1, 200, 3)
        float_top = np.argmax(np.concatenate(_run(ort_session(path), ref["images"])), axis=1)

        def metric(s):
            top = np.argmax(np.concatenate(_run(s, ref["images"])), axis=1)
            return float(np.mean(top == float_top))
        return path, _batches(ref["calib"]), {"x": np.asarray(ref["images"][:1], np.float32)}, metric, "top-1 agreement", 1.0
    if name == "det":
        calib, _, _ = dbdet.pages(8, 1)
        feeds, _, sizes = dbdet.pages(ARGS.det_pages, 2)
        float_boxes = dbdet.detect(_runner(ort_session(path)), feeds, sizes)
        return (path, calib, feeds[0], lambda s: dbdet.hmean(float_boxes, dbdet.detect(_runner(s), feeds, sizes))[2],
                "hmean vs float", 1.0)
    raise SystemExit(f"unknown model {name!r}: rec, cls or det")


def ort_session(path: str) -> ort.InferenceSession:
    return ort.InferenceSession(path, providers=["CPUExecutionProvider"])


def _run(session: ort.InferenceSession, images, batch: int = 64) -> list[np.ndarray]:
    name = session.get_inputs()[0].name
    return [session.run(None, {name: np.asarray(images[i: i + batch], np.float32)})[0] for i in range(0, len(images), batch)]


def _runner(session: ort.InferenceSession):
    names = [i.name for i in session.get_inputs()]
    return lambda feed: session.run(None, {k: v for k, v in feed.items() if k in names})


def _file_size(path: str) -> int:
    return os.path.getsize(path) + (os.path.getsize(path + ".data") if os.path.exists(path + ".data") else 0)


def _quantize(path: str, preset: str, calib, out: str, **changes) -> float:
    import onnxptq
    from onnxptq.config.presets import resolve_config

    config = resolve_config(preset)
    config = config.replace(calibration=dataclasses.replace(config.calibration, progress=False), **changes)
    t0 = time.process_time()
    onnxptq.quantize(path, config, calib, output=out)
    return time.process_time() - t0


def _latency(files: dict[str, str], feed: dict, runs: int) -> dict[str, float]:
    sessions = {k: _common.session(f, 1, inter_op_threads=1) for k, f in files.items()}
    feeds = {k: {i.name: feed[i.name] for i in s.get_inputs()} for k, s in sessions.items()}
    for k, s in sessions.items():
        for _ in range(2):
            s.run(None, feeds[k])
    ratios: dict[str, list[float]] = {k: [] for k in sessions}
    for _ in range(runs):
        cpu = {}
        for k, s in sessions.items():
            c0 = time.thread_time()
            s.run(None, feeds[k])
            cpu[k] = time.thread_time() - c0
        for k in sessions:
            ratios[k].append(cpu[k] / cpu["float"])
    return {k: statistics.median(v) for k, v in ratios.items()}


ARGS: argparse.Namespace


def main() -> None:
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="rec,cls,det")
    parser.add_argument("--presets", default="BFP16,MX9,MXINT8")
    parser.add_argument("--spot", default="MX6,MX4", help="further presets, on rec and cls only")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--det-pages", type=int, default=12)
    parser.add_argument("--json", default="")
    parser.add_argument("--out", default="", help="keep the quantized models here (default: a temp dir)")
    parser.add_argument("--reuse", action="store_true", help="reuse models already in --out (no quantize time)")
    ARGS = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    print(f"onnxruntime {ort.__version__}; load average at start {os.getloadavg()[0]:.2f}\n", flush=True)
    print("| model | preset | placement | metric | value | float | quantize CPU s | × BF16 | size × | latency × |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |", flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="blockdot-") as scratch:
        tmp = ARGS.out or scratch
        os.makedirs(tmp, exist_ok=True)
        for name in ARGS.models.split(","):
            path, calib, feed, metric, metric_name, float_value = _task(name)
            float_size = _file_size(path)
            bf16 = _quantize(path, "BF16", calib, os.path.join(tmp, f"{name}.BF16.onnx"))
            presets = ARGS.presets.split(",") + ([p for p in ARGS.spot.split(",") if p] if name != "det" else [])
            files, model_rows = {"float": path}, []
            for preset in presets:
                for placement, dots in PLACEMENTS.items():
                    out = os.path.join(tmp, f"{name}.{preset}.{dots}.onnx")
                    row = {"model": name, "preset": preset, "placement": placement, "metric": metric_name, "float": float_value}
                    try:
                        reused = ARGS.reuse and os.path.exists(out)
                        row["quantize_cpu_s"] = None if reused else _quantize(path, preset, calib, out, int_block_dot_operands_only=dots)
                        row["value"] = float(metric(ort_session(out)))
                        row["size_ratio"] = _file_size(out) / float_size
                        files[f"{preset}/{placement}"] = out
                    except Exception as exc:  # noqa: BLE001 - recorded in the table
                        row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                    row["bf16_cpu_s"] = bf16
                    model_rows.append(row)
            latency = _latency(files, feed, ARGS.runs)
            for row in model_rows:
                row["latency_ratio"] = latency.get(f"{row['preset']}/{row['placement']}")
                rows.append(row)
                if "error" in row:
                    print(f"| {name} | {row['preset']} | {row['placement']} | {metric_name} | {row['error']} | | | | | |", flush=True)
                    continue
                q = row["quantize_cpu_s"]
                q_text = "- (reused) | -" if q is None else f"{q:.1f} | {q / bf16:.2f}"
                print(f"| {name} | {row['preset']} | {row['placement']} | {metric_name} | {row['value']:.4f} | {float_value:.4f} | "
                      f"{q_text} | {row['size_ratio']:.2f} | {row['latency_ratio']:.2f} |", flush=True)
            if ARGS.json:
                with open(ARGS.json, "w") as f:
                    json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
