"""The zoo's latency column measured twice, by the old reading and by the new, on the same files.

For each (zoo member, preset): quantize with defaults once (kept in ``--workdir``, reused when there), then
``--repeats`` times, alternately, the old reading (``_common.interleaved_ratio``: wall clock, best of 2 passes over
the first 4 held-out feeds, as zoo19's table) and the new one (``zoo._latency_ratio``: CPU clock, each feed's
fastest of ≥ 7 alternating runs). Every figure is printed with the 1-minute load beside it, so a run at load and a
quiet run can be set side by side (bench/RESULTS.md, zoo20).

    OMP_NUM_THREADS=1 PYTHONPATH=src:.:bench python bench/zoo_latency_column.py \\
        --models romanizer_encoder,romanizer_decoder,lac --presets BF16,A16W8,MXINT8 --repeats 3 --workdir /tmp/lat
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import _common  # noqa: F401 - the repository root (testkit/) on sys.path
import zoo as zoo_bench

from testkit import zoo


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="romanizer_encoder,romanizer_decoder,lac")
    ap.add_argument("--presets", default="BF16,A16W8,MXINT8")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--json", default="", help="append one JSON line per figure here")
    args = ap.parse_args(argv)
    import onnxptq

    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    for name in args.models.split(","):
        model = zoo.get(name)
        feeds = model.samples("heldout")[:4]
        ref = zoo.session_runner(model.path())
        for preset in args.presets.split(","):
            out = work / f"{name}.{preset}.onnx"
            if not out.exists():
                onnxptq.quantize(str(model.path()), preset, data=model.samples("calibration"), output=str(out))
            test = zoo.session_runner(out)
            ref(feeds[0]), test(feeds[0])  # warm, as the zoo's sessions are after the metric's runs
            for rep in range(args.repeats):
                for method in ("old", "new"):
                    load = os.getloadavg()[0]
                    c0, t0 = time.process_time(), time.perf_counter()
                    ratio = (_common.interleaved_ratio(ref, test, feeds, 2) if method == "old"
                             else zoo_bench._latency_ratio(ref, test, feeds))
                    row = {"model": name, "preset": preset, "method": method, "repeat": rep, "ratio": round(ratio, 3),
                           "load": round(load, 1), "cpu_s": round(time.process_time() - c0, 2),
                           "wall_s": round(time.perf_counter() - t0, 2)}
                    print(json.dumps(row), flush=True)
                    if args.json:
                        with open(args.json, "a", encoding="utf-8") as fh:
                            fh.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
