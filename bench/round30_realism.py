"""How realistic round 30's feeds are: what the float models make of them (RESULTS.md, newmodels30, section 2).

* kraken_blla: per page, the share of heat-map pixels in the baseline and text-region masks and the number of
  baseline blobs (8-connected) blla's vectoriser would start from.
* tempocnn_fcn / tempocnn_cnn: the tempi the two classifiers give each clip, how often they agree within 4 %, and the
  averaged distribution's peak (how decided the reading is).
* retinaface_mbv2: the faces float finds (score >= 0.95) against the faces pasted into each photo (IoU >= 0.4; an LFW
  crop's box is the whole crop, looser than a detector's box).

    NEWMODELS30_SRC=/work/cache/newmodels30/src PYTHONPATH=src:.:bench python bench/round30_realism.py --n 48 [--pages 8]
"""

from __future__ import annotations

import argparse
import random

import numpy as np

import newmodels as nm
from testkit import zoo


def kraken(n: int) -> None:
    from scipy import ndimage

    run = zoo.session_runner(nm.MODELS["kraken_blla"][0])
    stats = []
    for f in nm.kraken_feeds(n, 1000):
        lines, regions = nm._blla_masks(run(f)[0])
        stats.append((lines.mean(), regions.mean(), ndimage.label(lines, np.ones((3, 3)))[1]))
    a = np.array(stats)
    print(f"kraken_blla ({n} pages): baseline share median {np.median(a[:, 0]):.3f}, region share median "
          f"{np.median(a[:, 1]):.3f}, baseline blobs per page {a[:, 2].astype(int).tolist()}")


def tempo(n: int) -> None:
    feeds = nm.tempocnn_feeds(n, 1000)
    bpm, peak = {}, {}
    for key in ("tempocnn_fcn", "tempocnn_cnn"):
        run = zoo.session_runner(nm.MODELS[key][0])
        outs = [run(f)[0] for f in feeds]
        bpm[key] = np.array([nm._tempo_bpm(o) for o in outs])
        peak[key] = np.array([float(np.mean(o, 0).max()) for o in outs])
        print(f"{key}: tempo 5/50/95 % {np.percentile(bpm[key], [5, 50, 95]).round(0).tolist()}, peak median "
              f"{np.median(peak[key]):.3f}, peak < 0.3 on {np.mean(peak[key] < 0.3):.3f}")
    same = np.abs(bpm["tempocnn_fcn"] - bpm["tempocnn_cnn"]) <= 0.04 * bpm["tempocnn_cnn"]
    print(f"fcn and cnn agree within 4 % on {same.mean():.3f} of {n} clips")


def retinaface(n: int) -> None:
    run = zoo.session_runner(nm.MODELS["retinaface_mbv2"][0])
    rng, tp, n_true, n_found = random.Random(1000), 0, 0, 0
    for _ in range(n):
        photo, boxes = nm._rf_photo(rng)
        x = nm._rf_input(photo)
        found = nm._rf_faces(run({"x:0": x})[0])
        w, h = photo.size
        resized_w = 800 if w >= h else int(800 / h * w)
        scale = np.array([x.shape[2], x.shape[1]] * 2) * (w / resized_w)
        found = found * scale
        true = np.array(boxes, np.float64).reshape(-1, 4)
        f1 = nm._box_f1(true, found, 0.4)
        tp += round(f1 * (len(true) + len(found)) / 2)
        n_true, n_found = n_true + len(true), n_found + len(found)
    print(f"retinaface_mbv2 ({n} photos): {n_true} faces pasted, {n_found} found, {tp} matched (IoU >= 0.4): recall "
          f"{tp / max(n_true, 1):.3f}, precision {tp / max(n_found, 1):.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=48)
    ap.add_argument("--pages", type=int, default=8)
    a = ap.parse_args()
    retinaface(a.n)
    tempo(a.n)
    kraken(a.pages)


if __name__ == "__main__":
    main()
