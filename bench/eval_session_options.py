"""Session options for the verification's session on a block-format model: creation and run CPU, same outputs?

``python bench/eval_session_options.py MODEL PRESETS`` quantizes ``MODEL`` (as bench/quantize_stages.py
reads it; no repair) with each preset, keeps the very bytes finish opens its session on, and times, best of
``--rounds``, the creation of a session on them and ``--feeds`` runs (the model's own feeds, one at a
time) for:

* **all**: as finish opens it (level "all", functions inlined after level 1, one thread, no spinning);
* **extended**, **basic**: lower graph optimization levels (what a "few-feed evaluation" could take);
* **no pattern**, **no arena**: the memory pattern or the CPU arena off;

and whether every output of every run is bit for bit the "all" session's. Issue 26 item 1 (blockquant11):
a lower level saves creation on the inlined block bodies, but only where it costs no run time and moves
no output bit; the verdict is the floor's on the outputs users get at level "all".

    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/eval_session_options.py rec BF16,MX9,BFP16 --feeds 16
"""

from __future__ import annotations

import _common  # noqa: F401  (the repository root on sys.path: testkit)
import argparse
import collections
import dataclasses
import logging
import os
import tempfile
import time
from typing import Any

import numpy as np

VARIANTS: dict[str, dict[str, Any]] = {"all": {}, "extended": {"optimization": "extended"},
                                       "basic": {"optimization": "basic"}, "no pattern": {"memory_pattern": False},
                                       "no arena": {"memory_arena": False}}


def finish_bytes(path: Any, data: list, preset: str) -> bytes:
    """The serialized model finish() opens its session on, for ``preset`` without repair."""
    from onnxptq import quantize
    from onnxptq.config.presets import get_preset
    from onnxptq.pipeline import finish as finish_module

    kept: list[bytes] = []
    own = finish_module.serialized

    def keep(model: Any, *a: Any, **k: Any) -> Any:
        out = own(model, *a, **k)
        kept.append(out)
        return out

    cfg = get_preset(preset).replace(repair=False)
    cfg = cfg.replace(calibration=dataclasses.replace(cfg.calibration, progress=False))
    finish_module.serialized = keep
    try:
        quantize(path, cfg, data, os.path.join(tempfile.mkdtemp(prefix="eval_options_"), "q.onnx"))
    finally:
        finish_module.serialized = own
    return kept[-1]


def measure(data: bytes, feeds: list, rounds: int) -> dict[str, tuple[float, float, bool]]:
    """Per variant: (best creation CPU s, best CPU s of the runs, outputs equal to "all"'s)."""
    from onnxptq.sessions import open_session
    from onnxptq.pipeline.finish import _options

    best: dict[str, list[float]] = collections.defaultdict(lambda: [9e9, 9e9])
    same: dict[str, bool] = {}
    for _ in range(rounds):
        reference = None
        for name, change in VARIANTS.items():
            t = time.process_time()
            session = open_session(data, **{**_options(), **change})
            created = time.process_time() - t
            t = time.process_time()
            outs = [session.run(None, feed) for feed in feeds]
            ran = time.process_time() - t
            best[name] = [min(best[name][0], created), min(best[name][1], ran)]
            reference = outs if name == "all" else reference
            same[name] = all(np.array_equal(a, b) for x, y in zip(reference, outs) for a, b in zip(x, y))
    return {k: (v[0], v[1], same[k]) for k, v in best.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("presets")
    ap.add_argument("--feeds", type=int, default=16, help="runs per session (the model's first feeds)")
    ap.add_argument("--samples", type=int, default=0, help="calibration feeds of the quantize (0: the model's default)")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    import quantize_stages

    logging.disable(logging.WARNING)
    path, data = quantize_stages._data(args.model, args.samples)
    feeds = list(data)[:args.feeds]
    print(f"## {args.model}: {len(feeds)} runs a session, best of {args.rounds}; CPU s")
    print("| preset | " + " | ".join(f"{k}: create / runs / sum" for k in VARIANTS) + " |")
    for preset in args.presets.split(","):
        got = measure(finish_bytes(path, data, preset), feeds, args.rounds)
        cells = [f"{c:.3f} / {r:.3f} / {c + r:.3f}" + ("" if same else " **DIFF**") for c, r, same in got.values()]
        print(f"| {preset} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
