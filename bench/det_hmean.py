"""PP-OCRv4 det (DB text detector, ``rapidocr-onnxruntime`` 1.4.4): detection hmean of float and
quantized models on rendered pages (:mod:`testkit.dbdet`), issue 27 item 6 ("a DB text detector
with per-tensor A8W8 hmean 0.906 vs float 0.9375").

Calibration: ``--calib`` pages (seed 1); evaluation: ``--pages`` other pages (seed 2). Routes:

* ``float``: the model itself;
* ``A8W8`` etc.: our preset with its defaults (per-channel weights);
* ``A8W8:pt``: our preset with ``weight.per_channel=False`` (per-tensor weights);
* ``ref:A8W8``: the reference tool's A8W8 through the compatible API (MinMax, symmetric
  activations, per-tensor weights; :mod:`testkit.reference`).

Each quantized route is measured with the accuracy-floor repair on (the default) and, with
``--no-repair``, off (the integer model as placed). Per route: precision / recall / hmean against the
rendered line boxes, hmean against the float model's boxes, quantize CPU seconds.

    PYTHONPATH=src:. python bench/det_hmean.py --routes float,A8W8,A8W8:pt,ref:A8W8
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401 - the repository root (testkit/) on sys.path

from testkit import dbdet  # noqa: E402
from testkit.models import model_path  # noqa: E402

DET = "ch_PP-OCRv4_det_infer.onnx"


def _runner(model):
    from testkit.zoo import session_runner

    return session_runner(model)


def quantize_route(route: str, path: Path, calib: list, out: Path, repair: bool) -> None:
    """Write the model of ``route`` (see the module docstring) to ``out``."""
    from onnxptq import get_preset, quantize
    from testkit.reference import quantize_reference

    if route.startswith("ref:"):
        quantize_reference(path, out, calib, route[4:], repair=repair)
        return
    preset, _, mod = route.partition(":")
    cfg = get_preset(preset)
    cfg = cfg.replace(calibration=dataclasses.replace(cfg.calibration, progress=False), repair=repair)
    if mod == "pt":
        cfg = cfg.replace(weight=dataclasses.replace(cfg.weight, per_channel=False))
    elif mod:
        raise ValueError(f"route {route!r}: unknown modifier {mod!r} (known: pt)")
    quantize(str(path), cfg, calib, output=str(out))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--routes", default="float,A8W8,A8W8:pt,ref:A8W8")
    ap.add_argument("--calib", type=int, default=8)
    ap.add_argument("--pages", type=int, default=32)
    ap.add_argument("--hard", action="store_true", help="photo-like pages (testkit.dbdet.render_page hard=True)")
    ap.add_argument("--no-repair", action="store_true", help="also measure each quantized route with repair off")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    path = model_path(DET)
    calib, _, _ = dbdet.pages(args.calib, 1, hard=args.hard)
    feeds, truth, sizes = dbdet.pages(args.pages, 2, hard=args.hard)
    ref_boxes = dbdet.detect(_runner(path), feeds, sizes)
    print(f"| route | repair | precision | recall | hmean vs lines | hmean vs float | quantize CPU s |", flush=True)
    print("| --- | --- | --- | --- | --- | --- | --- |", flush=True)
    with tempfile.TemporaryDirectory(prefix="det-") as tmp:
        for route in [r for r in args.routes.split(",") if r]:
            for repair in ((True, False) if args.no_repair and route != "float" else (True,)):
                cpu = 0.0
                if route == "float":
                    boxes = ref_boxes
                else:
                    out = Path(tmp) / "q.onnx"
                    t0 = time.process_time()
                    quantize_route(route, path, calib, out, repair)
                    cpu = time.process_time() - t0
                    boxes = dbdet.detect(_runner(out), feeds, sizes)
                p, r, h = dbdet.hmean(truth, boxes)
                hf = dbdet.hmean(ref_boxes, boxes)[2]
                print(f"| {route} | {'-' if route == 'float' else 'on' if repair else 'off'} | {p:.4f} | {r:.4f} | {h:.4f} | {hf:.4f} | "
                      f"{cpu:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
