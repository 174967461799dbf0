"""Quick start: quantize the real PP-OCR models and print their accuracy before and after.

    python examples/quickstart.py                 # A8W8 on the recogniser and the classifier
    python examples/quickstart.py --preset A16W8  # any preset: BF16, BFP16, MX9, MXINT8, ...

Calibration and evaluation data are text lines rendered with Pillow and the DejaVu fonts, so the
example needs nothing but this repository (the models come from ../shared/models, or are fetched
once from the rapidocr-onnxruntime wheel on PyPI). The data helpers are the repository's test/bench
harness (``testkit/`` at the repository root, not part of the installed package): the example puts
the root on ``sys.path`` to reach them.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from onnxptq import quantize  # noqa: E402
from testkit import ocr  # noqa: E402
from testkit.models import model_path  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="A8W8")
    parser.add_argument("--calib", type=int, default=64, help="calibration lines")
    parser.add_argument("--eval", type=int, default=200, help="evaluation lines")
    parser.add_argument("--out", default="out", help="folder for the quantized models")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    out = Path(args.out)
    out.mkdir(exist_ok=True)

    rec = model_path("rec")
    chars = ocr.load_characters(onnx.load(rec))
    calib, _ = ocr.render_lines(args.calib, seed=1, characters=chars)
    images, texts = ocr.render_lines(args.eval, seed=2, characters=chars)
    start = time.perf_counter()
    result = quantize(rec, args.preset, [{"x": calib[i : i + 1]} for i in range(len(calib))], output=out / f"rec_{args.preset}.onnx")
    took = time.perf_counter() - start
    before = ocr.rec_cer(str(rec), images, texts, characters=chars)
    after = ocr.rec_cer(str(result.output_path), images, texts, characters=chars)
    print(f"PP-OCRv4 rec, {args.preset}: CER float {before:.4f} -> quantized {after:.4f} "
          f"on {args.eval} rendered lines (quantized in {took:.1f} s, {len(result.plan.tensors)} tensors)")

    cls = model_path("cls")
    calib, _ = ocr.render_cls(args.calib, seed=1)
    images, labels = ocr.render_cls(args.eval, seed=2)
    result = quantize(cls, args.preset, [{"x": calib[i : i + 1]} for i in range(len(calib))], output=out / f"cls_{args.preset}.onnx")
    before = ocr.cls_accuracy(str(cls), images, labels)
    after = ocr.cls_accuracy(str(result.output_path), images, labels)
    print(f"PP-OCR cls, {args.preset}: accuracy float {before:.4f} -> quantized {after:.4f} on {args.eval} rendered lines")
    print(f"models written to {out}/")


if __name__ == "__main__":
    main()
