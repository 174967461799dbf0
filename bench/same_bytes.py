"""The saved file's sha256 per preset on PP-OCR cls (the shipped model) calibrated on 32 rendered lines (seed 1),
each preset at its defaults (floor and repair on): a change that must leave every output file as it was is run
on both trees and the lines compared.

    PYTHONPATH=src:. python bench/same_bytes.py A8W8,A16W8,BF16,FP16,BFP16,MX9,MXINT8,MXFP8_E4M3,MXFP4,MX6
"""

from __future__ import annotations

import _common  # noqa: F401  (the repository root on sys.path: testkit)
import dataclasses
import hashlib
import logging
import os
import sys
import tempfile
import time


def main() -> None:
    presets = sys.argv[1].split(",") if len(sys.argv) > 1 else ["A8W8", "BF16", "MX9"]
    from onnxptq import quantize
    from onnxptq.config.presets import get_preset
    from testkit import ocr
    from testkit.models import model_path

    logging.disable(logging.WARNING)
    calib, _ = ocr.render_cls(32, seed=1)
    data = [{"x": calib[i:i + 1]} for i in range(len(calib))]
    tmp = tempfile.mkdtemp(prefix="same_bytes_")
    for preset in presets:
        cfg = get_preset(preset)
        cfg = cfg.replace(calibration=dataclasses.replace(cfg.calibration, progress=False))
        out = os.path.join(tmp, f"cls.{preset}.onnx")
        t = time.process_time()
        quantize(str(model_path("cls")), cfg, data, out)
        with open(out, "rb") as fh:
            sha = hashlib.sha256(fh.read()).hexdigest()
        print(f"{preset} {sha} {os.path.getsize(out)} {time.process_time() - t:.1f}s", flush=True)


if __name__ == "__main__":
    main()
