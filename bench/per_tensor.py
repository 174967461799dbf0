"""Per-tensor integer weights on PP-OCR (issue 15): task metric with cross-layer equalization,
outlier channel splitting and bias correction on or off, on the data of tests/test_quantize_ppocr.py (64 calibration lines,
seed 1; 200 evaluation lines, seed 3). Prints one JSON line.

    python bench/per_tensor.py rec A16W8 pt                               # as shipped (CLE + BC automatic)
    python bench/per_tensor.py rec A16W8 pt equalize=False bias_correction=False   # before
    python bench/per_tensor.py cls A8W8 pc equalize=True                   # per-channel, CLE forced on
    python bench/per_tensor.py rec A8W8 pt outlier_split.expand_ratio=0.1  # a nested option
    python bench/per_tensor.py captcha A8W8 pt     # captcha reader: share of float-right reads kept
"""

from __future__ import annotations

import _common  # the repository root on sys.path (testkit), the bench's session helper
import dataclasses
import json
import sys
import time

import onnx

from onnxptq import get_preset, quantize
from testkit import captcha, ocr
from testkit.models import model_path


def main(argv: list[str]) -> int:
    task, preset, granularity = argv[:3]
    changes = {k: _common.cli_value(v) for k, v in (a.split("=", 1) for a in argv[3:])}
    cfg = get_preset(preset)
    cfg = cfg.replace(calibration=dataclasses.replace(cfg.calibration, progress=False))
    if granularity == "pt":
        cfg = cfg.replace(weight=dataclasses.replace(cfg.weight, per_channel=False))
    for key, value in changes.items():
        if "." in key:  # an option of a nested dataclass, e.g. outlier_split.expand_ratio=0.1
            outer, inner = key.split(".", 1)
            cfg = cfg.replace(**{outer: dataclasses.replace(getattr(cfg, outer), **{inner: value})})
        else:
            cfg = cfg.replace(**{key: value})
    path = captcha.model_path() if task == "captcha" else model_path(task)
    t = time.perf_counter()
    if task == "captcha":  # the data of tests/test_quantize_captcha.py; metric: float-right reads kept
        test, calib = captcha.make_captchas(100, seed=1), captcha.make_captchas(16, seed=2)
        result = quantize(str(path), cfg, [{"image": calib.images[i:i + 1]} for i in range(len(calib.texts))])
        float_reads = captcha.read(_common.session(str(path)), test.images)
        reads = captcha.read(_common.session(result.model), test.images)
        metric, ref = captcha.kept_fraction(float_reads, reads, test.texts)[0], 1.0
    elif task == "rec":
        chars = ocr.load_characters(onnx.load(path))
        calib, _ = ocr.render_lines(64, seed=1, characters=chars)
        images, texts = ocr.render_lines(200, seed=3, characters=chars)
        result = quantize(path, cfg, [{"x": calib[i:i + 8]} for i in range(0, len(calib), 8)])
        session = _common.session(result.model)
        metric, ref = ocr.rec_cer(session, images, texts, characters=chars), ocr.rec_cer(str(path), images, texts, characters=chars)
    else:
        calib, _ = ocr.render_cls(64, seed=1)
        images, labels = ocr.render_cls(200, seed=3)
        result = quantize(path, cfg, [{"x": calib[i:i + 8]} for i in range(0, len(calib), 8)])
        session = _common.session(result.model)
        metric, ref = ocr.cls_accuracy(session, images, labels), ocr.cls_accuracy(str(path), images, labels)
    print(json.dumps({"task": task, "preset": preset, "weights": granularity, "changes": changes,
                      "equalize": cfg.equalization_active(), "bias_correction": cfg.bias_correction_active(),
                      "split_outliers": cfg.outlier_split_active(),
                      "metric": metric, "float": ref, "seconds": round(time.perf_counter() - t, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
