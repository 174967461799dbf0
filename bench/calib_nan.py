"""Calibration's cost and statistics on a NaN-free model, for the tree on ``PYTHONPATH`` (issue 27 item 3,
branch nancalib): whether the NaN detection added to the in-graph reductions (a row sum beside each
min/max) slows calibration or changes its statistics.

    PYTHONPATH=<tree>/src OMP_NUM_THREADS=1 python bench/calib_nan.py [--model rec] [--preset A8W8] [--method minmax] [--feeds 32] [--repeat 3]

``onnxptq.quantize`` runs up to the end of its calibration pass (``runner.collect`` is wrapped and
stops the quantization once it returns): printed per repeat are the process CPU seconds (user +
system, all threads, ``getrusage``) spent in ``collect``, its wall seconds, and a sha256 of every
collector's state (extremes, per-batch sums and extremes, counts, tails, per-channel vectors), so
two trees' statistics compare bit for bit. Data: uniform [0, 1) float32 feeds of the model's input
shape (seed 0), the same for every tree. Prints one JSON line per repeat.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
from collections import Counter
import resource
import time

import numpy as np
import onnx

import onnxptq
from onnxptq.calibration import runner

MODELS = {"rec": "/work/shared/models/ch_PP-OCRv4_rec_infer.onnx", "cls": "/work/shared/models/ch_ppocr_mobile_v2.0_cls_infer.onnx"}
SHAPES = {"rec": (1, 3, 48, 320), "cls": (1, 3, 48, 192)}


class _Stop(Exception):
    pass


def _state_hash(collectors: dict) -> str:
    h = hashlib.sha256()
    for name in sorted(collectors):
        c = collectors[name]
        h.update(name.encode())
        for key in ("min", "max", "count", "batches", "batch_min_sum", "batch_max_sum", "skipped_batches", "nan_count",
                    "inf_count", "batch_highs", "batch_lows", "quietest_peak", "top_floor", "bottom_ceiling"):
            if hasattr(c, key):
                h.update(repr(getattr(c, key)).encode())
        for key in ("top", "bottom", "channel_min", "channel_max"):
            v = getattr(c, key, None)
            if v is not None:
                h.update(np.sort(np.asarray(v), axis=None).tobytes() if key in ("top", "bottom") else np.asarray(v).tobytes())
        hist = getattr(c, "hist", None)
        if hist is not None:
            h.update(hist.counts.tobytes() + repr(hist.width).encode())
    return h.hexdigest()[:16]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="rec", choices=sorted(MODELS))
    ap.add_argument("--preset", default="A8W8")
    ap.add_argument("--feeds", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--method", help="the activations' calibration method instead of the preset's (minmax: in-graph min/max)")
    args = ap.parse_args()
    model = onnx.load(MODELS[args.model])
    name = model.graph.input[0].name
    rng = np.random.default_rng(0)
    feeds = [{name: rng.random(SHAPES[args.model], dtype=np.float32)} for _ in range(args.feeds)]
    real = runner.collect
    got: dict = {}

    def timed(*a, **k):
        r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        out = real(*a, **k)
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        got.update(cpu=round(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime, 2),
                   wall=round(time.perf_counter() - t0, 2), tensors=len(out), state=_state_hash(out),
                   kinds=dict(Counter(type(c).__name__ for c in out.values())))
        raise _Stop

    runner.collect = timed
    for i in range(args.repeat):
        got.clear()
        try:
            cfg = onnxptq.get_preset(args.preset).replace(repair=False)
            if args.method:
                cfg = cfg.replace(activation=dataclasses.replace(cfg.activation, calibration=args.method))
            onnxptq.quantize(MODELS[args.model], cfg, feeds)
        except _Stop:
            pass
        print(json.dumps({"tree": onnxptq.__file__, "model": args.model, "preset": args.preset, "method": args.method, "feeds": args.feeds,
                          "repeat": i, **got}), flush=True)


if __name__ == "__main__":
    main()
