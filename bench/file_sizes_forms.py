"""The delivered form against the old one (issue 26 item 2, branch blocksize): file bytes, outputs bit
for bit, session creation and run CPU, side by side in one process. Old: one function definition per
body and fp32 weights (``pack_weights=False``, the form kept for tools that want one node per
tensor), or with ``--old unshared`` packed weights and one definition per body.

Why: sharing a definition moves the constants that differ from ``Constant`` nodes into
initializers the calls pass in. onnxruntime inlines model-local functions, so both should run the
same kernels on the same constants; this measures that instead of assuming it. The two forms are
built from one calibration and timed alternately (CPU seconds of this process, one thread).

    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/file_sizes_forms.py --models shipped:cls,nm:dnsmos_p808 \
        --presets MX9,MXINT8 --runs 30
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

import _common  # noqa: F401 - the repository root on sys.path
import numpy as np
import onnxruntime as ort

import file_sizes as fs


def _session(model_bytes: bytes) -> tuple[ort.InferenceSession, float]:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    c0 = time.process_time()
    sess = ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])
    return sess, time.process_time() - c0


def main(argv: list[str] | None = None) -> int:
    from onnxptq import quantize
    from onnxptq.config.presets import resolve_config
    from onnxptq.graph.passes import share_functions as sf

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", required=True)
    ap.add_argument("--presets", default="MX9,MXINT8")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--old", choices=("plain", "unshared"), default="plain")
    args = ap.parse_args(argv)
    print("| model | preset | definitions old → new | file B old → new | outputs | session CPU s old / new | run CPU ms old / new |")
    print("|---|---|---|---|---|---|---|")
    for spec in args.models.split(","):
        path, feeds = fs.model_source(spec)
        calib, held = feeds(4, 1), feeds(4, 1000)
        for preset in args.presets.split(","):
            cfg = dataclasses.replace(resolve_config(preset), repair=False)
            built = {}
            for share in (False, True):
                sf.SHARE = share
                form = cfg if share or args.old == "unshared" else dataclasses.replace(cfg, pack_weights=False)
                built[share] = quantize(path, form, data=list(calib)).model
            sf.SHARE = True
            blobs = {k: m.SerializeToString() for k, m in built.items()}
            sess, made = {}, {False: [], True: []}
            for _ in range(3):
                for k in (False, True):
                    sess[k], t = _session(blobs[k])
                    made[k].append(t)
            outs = {k: [sess[k].run(None, f) for f in held] for k in (False, True)}
            same = all(np.array_equal(np.asarray(a).view(np.uint8), np.asarray(b).view(np.uint8))
                       for ra, rb in zip(outs[False], outs[True]) for a, b in zip(ra, rb))
            run = {False: 0.0, True: 0.0}
            for _ in range(args.runs):
                for k in (False, True):
                    c0 = time.process_time()
                    for f in held:
                        sess[k].run(None, f)
                    run[k] += time.process_time() - c0
            per = {k: 1e3 * run[k] / (args.runs * len(held)) for k in run}
            print(f"| {spec} | {preset} | {len(built[False].functions)} → {len(built[True].functions)} | "
                  f"{len(blobs[False])} → {len(blobs[True])} | {'bit-identical' if same else 'DIFFER'} | "
                  f"{min(made[False]):.3f} / {min(made[True]):.3f} | {per[False]:.2f} / {per[True]:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
