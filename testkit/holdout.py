"""Arrange test data so that the accuracy floor's held-out feeds are known ones.

``quantize`` holds every third feed of the first ``3·n`` out of calibration
(``onnxptq.pipeline.calibrate.split_holdout``); a test that must calibrate on exactly the feeds
its bounds were set on puts its extra held-out feeds at those positions.
"""

from __future__ import annotations

import itertools
from typing import Any, Sequence


def with_held_out(held: Sequence[Any], calib: Sequence[Any]) -> list[Any]:
    """``held[0], calib[0], calib[1], held[1], calib[2], calib[3], ...`` then the rest of ``calib``:
    the floor holds ``held`` out and calibration reads ``calib`` in its order."""
    rest = iter(calib)
    out: list[Any] = []
    for h in held:
        out.append(h)
        out.extend(itertools.islice(rest, 2))
    out.extend(rest)
    return out
