"""PP-OCRv4 rec on the suite's data, one preset per argument, with or without repair: CER and CPU s.

The data of tests/test_quantize_ppocr.py (64 calibration lines, seed 1, in batches of 8; 200
evaluation lines, seed 3; float CER from testkit.ocr_reference's disk cache). Each argument is
``PRESET`` or ``PRESET:{json config changes}`` (e.g. ``'MX9:{"repair": false}'``); per argument one
JSON line: the CER, float's, ``quantize`` CPU seconds (``time.process_time``, all threads), the CER
evaluation's CPU seconds (a default session, as the test's), the nodes repair kept float and the
output cosine the floor measured. Written to decide which suite tests can measure a preset's model
without the repair search (bench/RESULTS.md, "The suite's rec tests without the repair search").

    PYTHONPATH=$PWD/src:$PWD OMP_NUM_THREADS=1 nice -n 5 python bench/rec_norepair.py 'MX9:{"repair": false}' A16W8
"""

from __future__ import annotations

import _common  # noqa: F401  (the repository root on sys.path: testkit)
import dataclasses
import json
import sys
import time

import onnxruntime as ort

from onnxptq import get_preset, quantize
from testkit import ocr, ocr_reference
from testkit.models import model_path


def main(specs: list[str]) -> None:
    path = model_path("rec")
    rec = ocr_reference.rec_reference(path, 64, 1, 200, 3)
    batches = [{"x": rec["calib"][i:i + 8]} for i in range(0, 64, 8)]
    for spec in specs:
        preset, _, extra = spec.partition(":")
        cfg = get_preset(preset)
        cfg = cfg.replace(calibration=dataclasses.replace(cfg.calibration, progress=False))
        cfg = cfg.replace(**(json.loads(extra) if extra else {}))
        c0 = time.process_time()
        result = quantize(str(path), cfg, batches)
        c1 = time.process_time()
        session = ort.InferenceSession(result.model.SerializeToString(), providers=["CPUExecutionProvider"])
        cer = ocr.rec_cer(session, rec["images"], rec["texts"], characters=rec["chars"])
        c2 = time.process_time()
        repair = result.plan.repair or {}
        print(json.dumps({"spec": spec, "cer": round(cer, 4), "float": round(rec["float"], 4), "quantize_cpu": round(c1 - c0, 1),
                          "eval_cpu": round(c2 - c1, 1), "kept": sorted(repair.get("kept_float", {})),
                          "cosine": {k: round(v["cosine"], 4) for k, v in result.metrics.items()}}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
