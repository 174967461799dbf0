"""What each reading of BiSeNet face parsing's class logits says on fresh portraits (analysis/class_maps.py, "Class logits").

For float and each quantized file given: the per-pixel arg-max on 16 fresh portraits (bench/newmodels.py
``face_parsing_feeds(16, 1000)``, the same as newmodels28's agreement), then per file the figures a floor could hold
against the top-1 floor: pixels whose class is float's, the **labelled masks' IoU** (class_maps' figure: over the
positions where float or the file reads a class other than the background, the share reading float's class), the
mean of the per-class IoUs (mIoU, the classes float reads at ≥ 1024 pixels), the worst such class, and the package's
reading (the hair mask's IoU per portrait, both empty 1, mean). ``--windows`` adds the figures on each 4 portraits
(the floor judges 4 held-out portraits).

    NEWMODELS28_SRC=/work/cache/newmodels28/src PYTHONPATH=src:.:bench OMP_NUM_THREADS=2 python bench/classmap_faceparsing.py \\
        --cache /work/cache/classmap19/fp QUANTIZED.onnx ...
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

import newmodels as nm
from onnxptq.analysis.maps import MIN_MASK
from testkit import zoo

CLASSES, HAIR, BACKGROUND = 19, 17, 0


def arg_max(path: Path, feeds: list, cache: Path) -> np.ndarray:
    """``[feeds, 512, 512]`` uint8 class map of the model at ``path``, cached by its file name under ``cache``."""
    hit = cache / f"{path.stem}.npy"
    if hit.exists():
        return np.load(hit)
    run = zoo.session_runner(path)
    top = np.stack([run(f)[0][0].argmax(0).astype(np.uint8) for f in feeds])
    cache.mkdir(parents=True, exist_ok=True)
    np.save(hit, top)
    return top


def figures(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    """The readings of one file's class maps ``b`` against float's ``a`` (module docstring)."""
    x, y = a.ravel(), b.ravel()
    same = x == y
    ca, cb, ci = (np.bincount(v, minlength=CLASSES) for v in (x, y, x[same]))
    cu = ca + cb - ci
    judged = {k: ci[k] / cu[k] for k in range(CLASSES) if k != BACKGROUND and ca[k] >= MIN_MASK}
    worst = min(judged, key=judged.get)
    labelled = (x != BACKGROUND) | (y != BACKGROUND)
    hair = [1.0 if ((p == HAIR) | (q == HAIR)).sum() == 0 else ((p == HAIR) & (q == HAIR)).sum() / ((p == HAIR) | (q == HAIR)).sum()
            for p, q in zip(a, b)]
    return {"pixels": float(same.mean()), "labelled": float(np.mean(x[labelled] == y[labelled])),
            "mIoU": float(np.mean(list(judged.values()))), "worst": float(judged[worst]), "worst_class": worst,
            "hair": float(np.mean(hair))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--cache", required=True, help="folder for the arg-max maps (float's: float.npy)")
    ap.add_argument("--windows", action="store_true")
    args = ap.parse_args()
    feeds = nm.face_parsing_feeds(16, 1000)
    cache = Path(args.cache)
    ref = arg_max(Path(nm.MODELS["face_parsing"][0]), feeds, cache)
    print("| file | pixels | labelled masks' IoU | mIoU | worst class (IoU) | hair IoU per portrait |")
    print("|---|---|---|---|---|---|")
    for f in args.files:
        where = f"{Path(f).parent.parent.name}_{Path(f).parent.name}"  # the run that wrote it (before / after)
        got = arg_max(Path(f), feeds, cache / where)
        spans = [(0, 16)] + ([(i, i + 4) for i in range(0, 16, 4)] if args.windows else [])
        for lo, hi in spans:
            r = figures(ref[lo:hi], got[lo:hi])
            span = "" if (lo, hi) == (0, 16) else f" [{lo}:{hi}]"
            print(f"| {where}/{Path(f).stem}{span} | {r['pixels']:.4f} | {r['labelled']:.4f} | {r['mIoU']:.4f} | "
                  f"{r['worst_class']} ({r['worst']:.3f}) | {r['hair']:.4f} |", flush=True)


if __name__ == "__main__":
    main()
