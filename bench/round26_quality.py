"""Round 26: the image models' delivered files read in picture units: PSNR and SSIM of the uint8 pictures against float's.

bench/newmodels.py's rows give one agreement figure per (model, preset) (the share of held-out pictures at ≥ 40 dB
PSNR against float's). This reads the same held-out feeds (seed 1000) through the files it wrote and reports the
figures an image user reads: mean and worst PSNR, mean SSIM (Gaussian window 11, sigma 1.5, on each channel of the
8-bit pictures, as Wang et al. 2004), the share of 8-bit values within 3 levels of float's (the floor's own picture
reading, analysis/pictures.py), and the mean signed error in levels (a bias shows as a colour cast).

    NEWMODELS26_SRC=/work/cache/newmodels26/src PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 python bench/round26_quality.py \
        --models zero_dce,dat_light_x2 --out-dir /work/cache/newmodels26/out --held 48
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np


def ssim(a: np.ndarray, b: np.ndarray) -> float:
    """Mean SSIM of two [C, H, W] uint8 pictures (per channel, Gaussian window sigma 1.5, K1 0.01, K2 0.03, L 255)."""
    from scipy.ndimage import gaussian_filter

    c1, c2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2
    vals = []
    for x, y in zip(a.astype(np.float64), b.astype(np.float64)):
        f = lambda z: gaussian_filter(z, 1.5, truncate=3.5)  # noqa: E731 (an 11-wide window)
        mx, my = f(x), f(y)
        sxx, syy, sxy = f(x * x) - mx * mx, f(y * y) - my * my, f(x * y) - mx * my
        vals.append(((2 * mx * my + c1) * (2 * sxy + c2) / ((mx * mx + my * my + c1) * (sxx + syy + c2))).mean())
    return float(np.mean(vals))


def main() -> None:
    import newmodels as nm
    from testkit import zoo

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="zero_dce,dat_light_x2")
    ap.add_argument("--out-dir", type=Path, required=True)
    ap.add_argument("--held", type=int, default=48)
    ap.add_argument("--presets", default=",".join(nm.PRESETS))
    a = ap.parse_args()
    print("| model | preset | feeds | PSNR mean dB | PSNR worst dB | SSIM mean | within 3 levels | mean error (levels) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in a.models.split(","):
        rel, make, _, _ = nm.MODELS[name]
        feeds = make(a.held, 1000)
        ref = nm._memo(zoo.session_runner(Path(rel)), feeds)
        for preset in a.presets.split(","):
            path = a.out_dir / f"{name}.{preset}.onnx"
            if not path.exists():
                continue
            test = zoo.session_runner(path)
            psnr, ss, within, bias, total = [], [], 0, 0.0, 0
            for f in feeds:
                x, y = nm._as_uint8(ref(f)[0]), nm._as_uint8(test(f)[0])
                d = y.astype(np.float64) - x.astype(np.float64)
                psnr.append(10 * np.log10(255.0 ** 2 / max(float((d ** 2).mean()), 1e-12)))
                ss.append(ssim(x, y))
                within, bias, total = within + int((np.abs(d) <= 3).sum()), bias + float(d.sum()), total + d.size
            print(f"| {name} | {preset} | {len(feeds)} | {np.mean(psnr):.2f} | {np.min(psnr):.2f} | {np.mean(ss):.5f} | "
                  f"{within / total:.4f} | {bias / total:+.3f} |", flush=True)


if __name__ == "__main__":
    main()
