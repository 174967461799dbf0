"""The PP-OCR evaluation data several test files share, with the float model's score, cached on disk.

tests/test_quantize_ppocr.py and tests/test_per_tensor_ppocr.py both calibrate on 64 rendered lines
(seed 1) and score on 200 others (seed 3) against the float model's CER; scoring the float model
costs as much as scoring a quantized one. Computed once per machine (testkit.artefacts keys it by
the model's bytes, the renderer's source and the runtime's version) instead of once per file and
worker.
"""

from __future__ import annotations

import os
from typing import Any

import onnx

from testkit import artefacts, ocr


def rec_reference(path: str | os.PathLike, calib_lines: int, calib_seed: int, eval_lines: int, eval_seed: int) -> dict[str, Any]:
    """``chars``, ``calib`` images, evaluation ``images`` and ``texts`` and the float model's CER
    (``float``) for the recogniser at ``path``."""

    def compute() -> dict[str, Any]:
        chars = ocr.load_characters(onnx.load(path))
        calib, _ = ocr.render_lines(calib_lines, seed=calib_seed, characters=chars)
        images, texts = ocr.render_lines(eval_lines, seed=eval_seed, characters=chars)
        return {"chars": chars, "calib": calib, "images": images, "texts": texts,
                "float": ocr.rec_cer(str(path), images, texts, characters=chars)}

    key = {"model": artefacts.file_digest(path), "calib": [calib_lines, calib_seed], "eval": [eval_lines, eval_seed]}
    return artefacts.cached("ppocr_rec_reference", key, compute, producers=(ocr,))


def cls_reference(path: str | os.PathLike, calib_lines: int, calib_seed: int, eval_lines: int, eval_seed: int) -> dict[str, Any]:
    """``calib`` images, evaluation ``images`` and ``labels`` and the float classifier's accuracy
    (``float``) for the angle classifier at ``path``."""

    def compute() -> dict[str, Any]:
        calib, _ = ocr.render_cls(calib_lines, seed=calib_seed)
        images, labels = ocr.render_cls(eval_lines, seed=eval_seed)
        return {"calib": calib, "images": images, "labels": labels, "float": ocr.cls_accuracy(str(path), images, labels)}

    key = {"model": artefacts.file_digest(path), "calib": [calib_lines, calib_seed], "eval": [eval_lines, eval_seed]}
    return artefacts.cached("ppocr_cls_reference", key, compute, producers=(ocr,))
