"""What a picture's user accepts: the 8-bit changes saving it as a JPEG makes (the tolerance of
analysis/pictures.py). For 32 pictures of the kind waifu2x is given (bench/newmodels.py ``_art_image``:
illustrations and photo-like scenes), re-saved by PIL as JPEG at quality 95, 90 and 75: the share of
8-bit values within 1, 2, 3 and 5 levels of the original, and the PSNR.

    PYTHONPATH=src:. python bench/picture_tolerance.py
"""

from __future__ import annotations

import io
import math
import random

import numpy as np
from PIL import Image

from bench.newmodels import _art_image


def main() -> None:
    rng = random.Random(7)
    pictures = [np.asarray(_art_image(rng), np.int16) for _ in range(32)]
    for quality in (95, 90, 75):
        offs = []
        for p in pictures:
            buf = io.BytesIO()
            Image.fromarray(p.astype(np.uint8)).save(buf, format="JPEG", quality=quality)
            buf.seek(0)
            offs.append(np.abs(np.asarray(Image.open(buf).convert("RGB"), np.int16) - p).ravel())
        off = np.concatenate(offs)
        mse = float(np.mean(off.astype(np.float64) ** 2))
        within = ", ".join(f"≤{t}: {np.mean(off <= t):.4f}" for t in (1, 2, 3, 5))
        print(f"JPEG q{quality}: {within}; PSNR {10 * math.log10(255 ** 2 / mse):.1f} dB; {off.size} values")


if __name__ == "__main__":
    main()
