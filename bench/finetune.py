"""Wall time of fast finetuning: A8W8 + AdaRound on PP-OCR cls, and what it buys.

    python bench/finetune.py [--iterations 1000] [--samples 32] [--test 400] [--no-early-stop]
                             [--optim-device cpu[,cuda:0]] [--preset A8W8_ADAROUND]

Quantizes the angle classifier with the A8W8 preset, then with A8W8 + AdaRound (the reference
tool's ADAROUND_P settings: batch 2, lr 0.1, early stop, NumIterations as given) on the same
rendered calibration lines, and prints a Markdown table: the finetune step's wall time, the whole
quantization's (wall and CPU: the process's CPU time, all threads), the accuracy on held-out lines
and the output cosine against float. The machine's 1-minute load average at the start and end of
each row is printed too, because the CI machine's 2 cores are shared: under load the wall time
grows while the CPU time does not. ``--optim-device`` lists the devices torch tunes on (one AdaRound
row each), so a GPU machine times CPU and GPU finetuning side by side in one run.
"""

from __future__ import annotations

import _common  # the repository root on sys.path (testkit), the bench's session helper
import argparse
import dataclasses
import logging
import os
import platform
import time

import numpy as np
import onnx
import onnxruntime as ort

from onnxptq.api import quantize
from onnxptq.config.presets import get_preset
from onnxptq.analysis.compare import cosine
from testkit import ocr
from testkit.models import model_path

log = logging.getLogger("bench.finetune")


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    return _common.session(model)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=32, help="calibration (and finetune) lines")
    parser.add_argument("--test", type=int, default=400, help="held-out lines for accuracy and cosine")
    parser.add_argument("--no-early-stop", action="store_true")
    parser.add_argument("--preset", default="A8W8_ADAROUND", help="a *_ADAROUND or *_ADAQUANT preset")
    parser.add_argument("--optim-device", default="cpu", help="comma-separated torch devices for AdaRound rows (cpu, cuda:0)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    for name in ("onnxptq.calibration", "onnxptq.pipeline", "onnxptq.graph", "onnx_ir"):
        logging.getLogger(name).setLevel(logging.WARNING)

    model = str(model_path("cls"))
    images, _ = ocr.render_cls(args.samples, seed=11)
    test_images, test_labels = ocr.render_cls(args.test, seed=12)
    calib = [{"x": images[i : i + 1]} for i in range(args.samples)]
    float_out = _session(onnx.load(model)).run(None, {"x": test_images})[0]

    rows = []
    base = args.preset.rsplit("_", 1)[0]
    configs: list[tuple[str, object]] = [(base, base)]
    for device in args.optim_device.split(","):
        cfg = get_preset(args.preset)
        cfg = cfg.replace(finetune=dataclasses.replace(
            cfg.finetune, num_iterations=args.iterations, log_period=max(1, args.iterations // 10),
            early_stop=not args.no_early_stop, optim_device=device))
        configs.append((f"{args.preset} ({args.iterations} it., {device})", cfg))
    for label, config in configs:
        load = os.getloadavg()[0]
        t0, c0 = time.perf_counter(), time.process_time()
        result = quantize(model, config, calib)
        total, cpu = time.perf_counter() - t0, time.process_time() - c0
        load_end = os.getloadavg()[0]
        sess = _session(result.model)
        acc = ocr.cls_accuracy(sess, test_images, test_labels)
        out = sess.run(None, {"x": test_images})[0]
        cos = cosine(out, float_out)
        # Top-1 agreement with the float model: accuracy moves by lines the float model itself
        # decides by a hair (A8W8 can beat float on them), agreement does not reward that.
        agree = float(np.mean(out.argmax(axis=1) == float_out.argmax(axis=1)))
        rows.append((label, result.timings.get("refine", 0.0), total, cpu, acc, agree, cos, load, load_end))
    float_acc = ocr.cls_accuracy(_session(onnx.load(model)), test_images, test_labels)

    print(f"\nPP-OCR cls, {args.samples} calibration lines, {args.test} held-out lines, "
          f"early stop {'off' if args.no_early_stop else 'on'}; {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores; float accuracy {float_acc:.4f}\n")
    print("| configuration | finetune wall (s) | quantize wall (s) | quantize CPU (s) | accuracy | top-1 agreement with float | output cosine vs float | load avg start / end |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for label, refine, total, cpu, acc, agree, cos, load, load_end in rows:
        print(f"| {label} | {refine:.1f} | {total:.1f} | {cpu:.1f} | {acc:.4f} | {agree:.4f} | {cos:.6f} | {load:.1f} / {load_end:.1f} |")


if __name__ == "__main__":
    main()
