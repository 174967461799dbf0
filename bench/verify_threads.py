"""The verification's CPU on finish's session: onnxruntime's default pool against one pool of the
cores a run gets (``sessions.run_threads``), in one process, rounds alternating (issue 26 item 1).

For each model and format, ``onnxptq.quantize`` (repair off) writes the file once; then, ``--rounds``
times, for each of the two pools in turn: the session finish() opens (checker aside: the same
options, only the thread count differs) is created and the quantize's held-out feeds (``--samples``
uniform random feeds, or the zoo model's calibration feeds, as bench/quantize_stages.py) run
through ``sessions.run_feeds``, two in flight, as the verification runs them. Printed per file:
the best round's process CPU seconds of the creation and of the runs per pool, the runs' ratio,
and whether every output of every feed is the same bit for bit under both pools.

    PYTHONPATH=src:. OMP_NUM_THREADS=1 python bench/verify_threads.py --models det,cls --formats BF16,MX9 --rounds 3
"""

from __future__ import annotations

import _common  # noqa: F401  (the repository root on sys.path: testkit)
import argparse
import dataclasses
import logging
import os
import tempfile
import time

import numpy as np

import quantize_stages


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="cls,rec,det")
    p.add_argument("--formats", default="BF16,BFP16,MX9,MXINT8,MXFP8_E4M3,MX6,MXFP4")
    p.add_argument("--samples", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--workdir", default=None, help="bench/quantize_time.py's workdir (layout, vit, resnet)")
    args = p.parse_args()

    from onnxptq import quantize
    from onnxptq.config.presets import get_preset
    from onnxptq.sessions import open_session, run_feeds, run_threads

    logging.disable(logging.WARNING)
    tmp = tempfile.mkdtemp(prefix="verify_threads_")
    print(f"run_threads() = {run_threads()}, {os.cpu_count()} CPUs")
    print("| model | format | create CPU s default → per run | runs CPU s default → per run | runs ratio | same outputs |")
    print("|---|---|---|---|---|---|")
    for model in args.models.split(","):
        path, data = quantize_stages._data(model, args.samples, args.workdir)
        feeds = data[:8]  # the verification's feeds: with fewer than 12 samples, the first 8 (floor reused)
        for fmt in args.formats.split(","):
            cfg = get_preset(fmt)
            cfg = cfg.replace(calibration=dataclasses.replace(cfg.calibration, progress=False), repair=False)
            out = os.path.join(tmp, f"{model.replace(':', '_')}.{fmt}.onnx")
            quantize(str(path), cfg, data, out)
            raw = open(out, "rb").read()
            best: dict[str, list[float]] = {"default": [1e9, 1e9], "per run": [1e9, 1e9]}
            outputs: dict[str, list] = {}
            for _ in range(args.rounds):
                for label, threads in (("default", None), ("per run", run_threads())):
                    c0 = time.process_time()
                    session = open_session(raw, log_severity=3, inline_functions_first=False, spinning=False, threads=threads)
                    c1 = time.process_time()
                    names = [o.name for o in session.get_outputs()]
                    got = run_feeds(session, names, feeds)
                    c2 = time.process_time()
                    best[label] = [min(best[label][0], c1 - c0), min(best[label][1], c2 - c1)]
                    outputs.setdefault(label, got)
                    del session
            same = all(np.array_equal(a, b) for x, y in zip(outputs["default"], outputs["per run"]) for a, b in zip(x, y))
            d, r = best["default"], best["per run"]
            print(f"| {model} | {fmt} | {d[0]:.2f} → {r[0]:.2f} | {d[1]:.2f} → {r[1]:.2f} | {r[1] / d[1]:.2f} | {'yes' if same else 'NO'} |",
                  flush=True)


if __name__ == "__main__":
    main()
