"""CPU cost of outlier channel splitting (issue 15): rec A8W8 with per-tensor weights, split vs not
split, one line (1×3×48×320), one thread; CPU time (``time.process_time``) per run, median of
``ROUNDS`` rounds that alternate the two models, so a busy machine slows both alike.

    python bench/split_latency.py                  # default OutlierSplitOptions
    python bench/split_latency.py min_gain=4       # OutlierSplitOptions fields as field=value
"""

from __future__ import annotations

import _common  # the repository root on sys.path (testkit), the bench's session helper
import dataclasses
import json
import sys
import time

import numpy as np
import onnx

from onnxptq import get_preset, quantize
from testkit import ocr
from testkit.models import model_path

ROUNDS = 30


def main(argv: list[str]) -> None:
    split_options = {k: float(v) for k, v in (a.split("=", 1) for a in argv)}
    path = model_path("rec")
    chars = ocr.load_characters(onnx.load(path))
    calib, _ = ocr.render_lines(16, seed=1, characters=chars)
    base = get_preset("A8W8")
    base = base.replace(calibration=dataclasses.replace(base.calibration, progress=False))
    base = base.replace(weight=dataclasses.replace(base.weight, per_channel=False),
                        outlier_split=dataclasses.replace(base.outlier_split, **split_options))
    sessions = {}
    for name, split in (("split", True), ("not split", False)):
        result = quantize(path, base.replace(split_outliers=split), [{"x": calib[i:i + 8]} for i in range(0, 16, 8)],
                          eval_samples=0)
        sessions[name] = _common.session(result.model, 1, inter_op_threads=1)
    feed = {"x": calib[:1]}
    for session in sessions.values():
        for _ in range(3):
            session.run(None, feed)
    times: dict[str, list[float]] = {name: [] for name in sessions}
    for _ in range(ROUNDS):
        for name, session in sessions.items():
            t = time.process_time()
            session.run(None, feed)
            times[name].append(time.process_time() - t)
    print(json.dumps({name: round(1000 * float(np.median(v)), 2) for name, v in times.items()}
                     | {"unit": "ms cpu, median", "options": split_options}))


if __name__ == "__main__":
    main(sys.argv[1:])
