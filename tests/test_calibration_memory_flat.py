"""Calibration is one streaming pass whose memory does not grow with the number of feeds (DESIGN.md).

Each count of feeds runs in a fresh process (a high-water mark is per process) on PP-OCR cls with A8W8's
statistics (percentile tails, histograms and min/max: every collector kind the integer presets use):
the feeds come from a generator, so the test's own data adds nothing, and the peak RSS of the
calibration stage (``calibrate_once``: prepare, plan, the statistics pass, the kept samples) with 64
feeds stays within a few MB of that with 8.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from testkit.models import model_path

SCRIPT = r"""
import json, resource, sys
import numpy as np
import onnxptq
from onnxptq.config.presets import get_preset
from onnxptq.pipeline.calibrate import calibrate_once

path, count = sys.argv[1], int(sys.argv[2])
cfg = get_preset("A8W8").replace(repair=False)

def feeds():
    rng = np.random.default_rng(0)
    for _ in range(count):  # one feed alive at a time: the data adds nothing
        yield {"x": rng.random((1, 3, 48, 192), dtype=np.float32)}

calibrated = calibrate_once(path, cfg, feeds(), eval_samples=4)
stats = calibrated.stats
held = sum(getattr(c, "nbytes", lambda: 0)() for c in stats.values())
print(json.dumps({"peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "samples": calibrated.samples,
                  "tensors": len(stats), "held": held}))
"""

#: What 56 more feeds may add to the calibration's peak: allocator noise, not a per-feed cost (a
#: feed of cls is 110 KiB of input and ~11 MiB of activations: holding them would add hundreds of MiB).
SLACK_MIB = 4


def _peak(path: str, count: int) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-c", SCRIPT, path, str(count)], capture_output=True, text=True, env=env,
                          timeout=120, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_calibration_peak_rss_does_not_grow_with_the_feeds():
    path = str(model_path("cls"))
    few, many = _peak(path, 8), _peak(path, 64)
    assert (few["samples"], many["samples"]) == (8, 64)
    assert few["tensors"] == many["tensors"] > 30  # the same statistics gathered, A8W8's
    grown_mib = (many["peak_kib"] - few["peak_kib"]) / 1024
    assert grown_mib <= SLACK_MIB, (few, many)
