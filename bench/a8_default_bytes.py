"""The default A8W8 (per-channel weights, asymmetric activations) on models beyond same_bytes.py's
PP-OCR cls: the sha256 of each delivered file, to compare between two trees (a change to the
per-tensor, symmetric-grid paths must leave these bytes alone).

    PYTHONPATH=<tree>/src:.:bench OMP_NUM_THREADS=1 python bench/a8_default_bytes.py [--models rec,nudenet,...]
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import sys
import tempfile
from pathlib import Path

import _common  # noqa: F401 - repository root on sys.path
import nncf_compare as nc


def _feeds(name: str) -> tuple[Path, list]:
    if name == "rec":
        from testkit import ocr
        from testkit.models import model_path

        lines, _ = ocr.render_lines(12, seed=1)
        return model_path("rec"), [{"x": lines[i:i + 1]} for i in range(len(lines))]
    work = Path("/work/cache/a8acc15/peers" if name != "ppocrv4_det" else "/work/cache/a8acc15/peers_det32") / name
    return Path((work / "model.txt").read_text()), nc.load_feeds(work / "calib.npz")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="rec,nudenet,captcha_whisperer,ppocrv4_det")
    ap.add_argument("--preset", default="A8W8")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    import onnxptq

    with tempfile.TemporaryDirectory() as tmp:
        for name in a.models.split(","):
            model, feeds = _feeds(name)
            out = Path(tmp) / f"{name}.onnx"
            onnxptq.quantize(model, a.preset, feeds, output=out)
            h = hashlib.sha256()
            for f in sorted(Path(tmp).glob(f"{name}.onnx*")):
                h.update(f.read_bytes())
            print(name, a.preset, h.hexdigest()[:16], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
