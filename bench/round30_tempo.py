"""Where tempocnn's quantized tempo leaves float's (RESULTS.md, newmodels30): float's own margin at the clips that move.

For each preset's file (bench/newmodels.py --out-dir), on the bench's held-out clips (seed 1000): the clips whose
tempo (estimate_tempo: the windows' averaged distribution's arg-max) leaves 4 % of float's, and for each such clip
float's margin, its peak minus its best class outside the 4 % band (a near-tie is a small margin), beside the
quantized model's largest probability error on that clip's averaged distribution.

    NEWMODELS30_SRC=/work/cache/newmodels30/src PYTHONPATH=src:.:bench python bench/round30_tempo.py tempocnn_fcn /work/cache/newmodels30/out
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

import newmodels as nm
from testkit import zoo


def margin(avg: np.ndarray) -> float:
    """The peak's probability minus the best class more than 4 % away from it (in BPM)."""
    bpm = np.arange(len(avg)) + 30
    peak = int(np.argmax(avg))
    far = np.abs(bpm - bpm[peak]) > 0.04 * bpm[peak]
    return float(avg[peak] - avg[far].max())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--held", type=int, default=48)
    a = ap.parse_args()
    feeds = nm.tempocnn_feeds(a.held, 1000)
    ref = zoo.session_runner(nm.MODELS[a.model][0])
    ref_avg = [np.mean(ref(f)[0], axis=0) for f in feeds]
    margins = np.array([margin(r) for r in ref_avg])
    print(f"{a.model}: float's margin < 0.05 on {np.mean(margins < 0.05):.3f} of {len(feeds)} clips")
    print("| preset | kept | moved clips: float's margin / the quantized error there | max |error| median |")
    print("| --- | --- | --- | --- |")
    for preset in nm.PRESETS:
        path = a.out_dir / f"{a.model}.{preset}.onnx"
        if not path.exists():
            continue
        test = zoo.session_runner(path)
        moved, errs = [], []
        for f, r in zip(feeds, ref_avg):
            t = np.mean(test(f)[0], axis=0)
            err = float(np.abs(t - r).max())
            errs.append(err)
            br, bt = np.argmax(r) + 30, np.argmax(t) + 30
            if abs(bt - br) > 0.04 * br:
                moved.append(f"{margin(r):.3f}/{err:.3f}")
        print(f"| {preset} | {1 - len(moved) / len(feeds):.3f} | {', '.join(moved) or '-'} | {np.median(errs):.4f} |")


if __name__ == "__main__":
    main()
