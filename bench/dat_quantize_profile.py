"""Where quantize spends its CPU on DAT-light x2 (8146 traced nodes): cProfile of one preset, 1 thread.

Quantizes the round-26 model with a preset's defaults (``--no-repair`` turns the floor's repair off) on
``--calib`` of the bench's own tiles (bench/newmodels.py ``dat_tile_feeds``), prints wall and CPU seconds and
the stage timings, and writes the profile (``--prof``) with the top functions by cumulative and own time.

    PYTHONPATH=$PWD/src:$PWD:$PWD/bench OMP_NUM_THREADS=1 nice -n 5 python bench/dat_quantize_profile.py \
        /work/cache/newmodels26/src/round26_onnx/dat_light_x2.onnx --preset A8W8 --calib 8 \
        --prof /work/cache/dat17/a8w8.prof --out /work/cache/dat17/a8w8.onnx
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import pstats
import time
from pathlib import Path

import onnx

import onnxptq
from onnxptq.config.presets import get_preset


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", type=Path)
    ap.add_argument("--preset", default="A8W8")
    ap.add_argument("--calib", type=int, default=8)
    ap.add_argument("--no-repair", action="store_true")
    ap.add_argument("--prof", type=Path, default=None)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--top", type=int, default=45)
    args = ap.parse_args()
    from newmodels import dat_tile_feeds

    feeds = dat_tile_feeds(args.calib, 26)
    config = get_preset(args.preset)
    if args.no_repair:
        config = dataclasses.replace(config, repair=False)
    model = onnx.load(str(args.model))
    prof = cProfile.Profile(time.process_time) if args.prof else None  # CPU seconds: the machine is shared
    t0, c0 = time.perf_counter(), time.process_time()
    if prof:
        prof.enable()
    result = onnxptq.quantize(model, config, data=feeds, output=str(args.out))
    if prof:
        prof.disable()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(f"{args.preset}: {wall:.1f} s wall, {cpu:.1f} CPU s; size {args.out.stat().st_size / args.model.stat().st_size:.3f}x")
    print("timings:", {k: round(v, 1) for k, v in result.timings.items()})
    if prof:
        prof.dump_stats(str(args.prof))
        st = pstats.Stats(prof)
        st.sort_stats("cumulative").print_stats(args.top)
        st.sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
