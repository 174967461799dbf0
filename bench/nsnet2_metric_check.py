"""Is bench/newmodels.py's NSNet2 48 kHz metric a fair floor? Scores float with a small input noise and any
quantized files against float on the bench's held-out feeds, by the bench's metric (speech frames whose enhanced
spectrum is within 20 dB SNR of float's) and by what a listener gets: the whole clip's enhanced spectrum vs
float's as an SNR (dB; by Parseval the enhanced audio's, up to the overlap-add window), per-frame (segmental) SNR
median and 5th percentile, the share of speech frames under 10 dB.

    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/nsnet2_metric_check.py --held 16 A.onnx B.onnx ...
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parent))
import newmodels as nm  # noqa: E402


def _session(path: str):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    return lambda feed: sess.run(None, feed)[0][0].astype(np.float64)


def scores(held, ref_gains, gains) -> dict[str, float]:
    hits = total = 0
    clip, seg = [], []
    for f, ga, gb in zip(held, ref_gains, gains):
        power = 10.0 ** f["input"][0].astype(np.float64)
        ga, gb = np.clip(ga, 1e-4, 1.0), np.clip(gb, 1e-4, 1.0)
        enh, err = (ga ** 2 * power).sum(1), ((ga - gb) ** 2 * power).sum(1)
        active = enh >= 1e-4 * enh.max()
        hits += int((err[active] <= 0.01 * enh[active]).sum())
        total += int(active.sum())
        clip.append(10 * np.log10(enh.sum() / max(err.sum(), 1e-30)))
        seg.extend(np.minimum(10 * np.log10(enh[active] / np.maximum(err[active], 1e-30)), 60.0))
    seg_a = np.array(seg)
    return {"bench": hits / total, "clip_min": min(clip), "clip_median": float(np.median(clip)),
            "seg_median": float(np.median(seg_a)), "seg_p5": float(np.percentile(seg_a, 5)), "under_10": float(np.mean(seg_a < 10))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", help="quantized nsnet2_48k files")
    ap.add_argument("--held", type=int, default=16)
    a = ap.parse_args()
    held = nm.nsnet2_feeds(48000)(a.held, 1000)  # the bench's held-out feeds
    ref = _session(str(nm.NSNET2 / "nsnet2-20ms-48k-baseline.onnx"))
    ref_gains = [ref(f) for f in held]
    rng = np.random.default_rng(0)
    rows = []
    for db in (0.01, 0.1, 0.5):  # float on an input moved by Gaussian noise of db dB (log10 power: db / 10)
        rows.append((f"float, input noise {db} dB",
                     [ref({"input": (f["input"] + rng.normal(0, db / 10, f["input"].shape)).astype(np.float32)}) for f in held]))
    for path in a.models:
        test = _session(path)
        rows.append((path, [test(f) for f in held]))
    print("| model | bench agreement | clip SNR vs float, dB min / median | frame SNR median / p5 | frames < 10 dB |")
    print("| --- | --- | --- | --- | --- |")
    for name, gains in rows:
        s = scores(held, ref_gains, gains)
        print(f"| {name} | {s['bench']:.3f} | {s['clip_min']:.1f} / {s['clip_median']:.1f} | {s['seg_median']:.1f} / {s['seg_p5']:.1f} "
              f"| {s['under_10']:.3f} |", flush=True)


if __name__ == "__main__":
    main()
