"""Refactors change no figure: task metric, output cosine and a hash of every output, to the last digit.

Run it at two commits (``PYTHONPATH=<checkout>/src python bench/same_figures.py``) and compare the
lines: rec CER / cls accuracy and the output cosine to float printed in full, plus the SHA-256 of
the quantized model's raw outputs on the evaluation lines, for A8W8, BFP16 and MX9 on PP-OCRv4 rec
and PP-OCR cls (64 calibration lines, seed 1; evaluation lines, seed 3; the test suite's data).

    python bench/same_figures.py [--lines 64]
"""

from __future__ import annotations

import _common  # the repository root on sys.path (testkit), the bench's session helper
import dataclasses
import argparse
import hashlib
import logging

import numpy as np
import onnx

import onnxptq
from onnxptq import get_preset, quantize
from testkit import ocr
from testkit.models import model_path


def _batches(images: np.ndarray, size: int = 8) -> list[dict[str, np.ndarray]]:
    return [{"x": images[i : i + size]} for i in range(0, len(images), size)]


def _outputs(model: onnx.ModelProto, images: np.ndarray) -> np.ndarray:
    session = _common.session(model)
    return np.concatenate([session.run(None, feed)[0] for feed in _batches(images)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=64, help="evaluation lines per model (default 64)")
    parser.add_argument("--presets", default="A8W8,BFP16,MX9")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    rec_path, cls_path = model_path("rec"), model_path("cls")
    chars = ocr.load_characters(onnx.load(rec_path))
    data = {
        "rec": (rec_path, ocr.render_lines(64, seed=1, characters=chars)[0], *ocr.render_lines(args.lines, seed=3, characters=chars)),
        "cls": (cls_path, ocr.render_cls(64, seed=1)[0], *ocr.render_cls(args.lines, seed=3)),
    }
    print(f"onnxptq at {onnxptq.__file__}")
    for name, (path, calib, images, truth) in data.items():
        reference = _outputs(onnx.load(path), images)
        for preset in args.presets.split(","):
            config = get_preset(preset)
            config = config.replace(calibration=dataclasses.replace(config.calibration, progress=False))
            result = quantize(path, config, _batches(calib))
            out = _outputs(result.model, images)
            cosine = float(np.dot(out.ravel().astype(np.float64), reference.ravel()) /
                           (np.linalg.norm(out.astype(np.float64)) * np.linalg.norm(reference.astype(np.float64))))
            if name == "rec":
                metric = "CER %.6f" % ocr.rec_cer(_Session(out), images, truth, characters=chars)
            else:
                metric = "accuracy %.4f" % float(np.mean(np.argmax(out, axis=1) == np.asarray(truth)))
            digest = hashlib.sha256(np.ascontiguousarray(out).tobytes()).hexdigest()[:16]
            print(f"{name} {preset:6s} {metric}  cosine {cosine:.12f}  outputs sha256 {digest}")


class _Session:
    """Precomputed outputs behind the session interface ``ocr.rec_cer`` reads."""

    def __init__(self, outputs: np.ndarray) -> None:
        self.outputs, self.at = outputs, 0

    def get_inputs(self):
        return [type("Input", (), {"name": "x"})()]

    def run(self, names, feed):
        n = len(next(iter(feed.values())))
        out = self.outputs[self.at : self.at + n]
        self.at += n
        return [out]


if __name__ == "__main__":
    main()
