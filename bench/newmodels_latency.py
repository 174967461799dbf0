"""Issue 26 item 3 on models outside the zoo: 1-thread latency of each format against float.

The goals (BFP16/MX9/MXINT8 ≤ 3× float on the median model and ≤ 6× on every model, BF16 ≤ 1.2×)
were measured on the zoo only (``bench/zoo_latency.py``); here the same measurement runs on
``bench/newmodels.py``'s models with their own feed builders. Per model, in one process: quantize
with every preset on the model's calibration feeds (``repair=False`` unless ``--repair``: latency is
about where the quantizers sit, and repair keeps nodes float, which would hide a slow placement),
then time float and every quantized session round-robin: ``thread_time`` around ``sess.run``, one
intra-op thread, the median over ``--runs`` rounds of the per-round CPU time per feed. Ratios are
taken per round against float of that round, then the median (the machine is shared).

``--profile`` prints, per quantized model whose ratio is over its goal (or every one with
``--profile-all``), onnxruntime's node profile summed by op type.

    PYTHONPATH=src:. nice -n 5 python bench/newmodels_latency.py --models nsfw,tinyocr_rec \
        --presets BF16,BFP16,MX9,MXINT8,MXFP8_E4M3,A8W8 [--runs 20] [--feeds 2] [--out DIR [--reuse]] [--baseline OLD_DIR] [--profile]
"""

from __future__ import annotations

import _common  # noqa: F401  (the repository root on sys.path)
import argparse
import logging
import os
import statistics
import tempfile
import time

import newmodels
import onnxruntime as ort

GOALS = {"BF16": 1.2, "BFP16": 6.0, "MX9": 6.0, "MXINT8": 6.0}


def _session(path: str, profile: str | None = None) -> ort.InferenceSession:
    return _common.session(path, 1, inter_op_threads=1, profile=profile)


def profile_ops(path: str, feeds: list[dict], runs: int, workdir: str) -> tuple[list[tuple[str, float, int]], int]:
    """(op type, µs per feed, nodes) from onnxruntime's profile, most costly first; executed nodes."""
    return _common.profile_ops(_session(path, profile=os.path.join(workdir, "prof")), feeds, runs)


def main() -> None:
    import onnxptq
    from onnxptq.config.presets import resolve_config

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(newmodels.MODELS))
    ap.add_argument("--presets", default="BF16,BFP16,MX9,MXINT8,MXFP8_E4M3,A8W8")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--feeds", type=int, default=2, help="held-out feeds timed per round")
    ap.add_argument("--calib", type=int, default=12)
    ap.add_argument("--repair", action="store_true", help="quantize with the presets' repair (default: repair=False)")
    ap.add_argument("--out", default="")
    ap.add_argument("--reuse", action="store_true")
    ap.add_argument("--baseline", default="", help="a folder of files from an earlier run (another commit's --out): "
                    "timed in the same rounds as '<preset> (baseline)'")
    ap.add_argument("--profile", action="store_true", help="op-type profile of every variant over its goal")
    ap.add_argument("--profile-all", action="store_true")
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)
    out = args.out or tempfile.mkdtemp(prefix="onnxptq_newlat_")
    os.makedirs(out, exist_ok=True)
    print(f"onnxruntime {ort.__version__}, one intra-op thread, median over {args.runs} rounds of the per-round "
          f"ratio of thread CPU time ({args.feeds} held-out feeds); repair={'on' if args.repair else 'False'}; "
          f"load average at start {os.getloadavg()[0]:.2f}\n")
    print("| model | variant | float ms / feed | × float (cpu) | goal | quantize CPU s |")
    print("|---|---|---:|---:|---|---:|")
    profiles = []
    for name in args.models.split(","):
        rel, make, _, _ = newmodels.MODELS[name]
        path = str(newmodels.SRC / rel)
        files = {"float": path}
        quantize_s: dict[str, float] = {}
        calib = None
        for preset in args.presets.split(","):
            file = os.path.join(out, f"{name}.{preset}.onnx")
            try:
                if not (args.reuse and os.path.exists(file)):
                    calib = calib if calib is not None else make(args.calib, 1)
                    config = resolve_config(preset)
                    if not args.repair:
                        config = config.replace(repair=False)
                    c0 = time.process_time()
                    onnxptq.quantize(path, config, data=list(calib), output=file)
                    quantize_s[preset] = time.process_time() - c0
                _session(file)
            except Exception as exc:  # reported, the other presets still run
                print(f"| {name} | {preset} | failed: {str(exc).splitlines()[0][:160]} | | | |", flush=True)
                continue
            files[preset] = file
            old = os.path.join(args.baseline, f"{name}.{preset}.onnx") if args.baseline else ""
            if old and os.path.exists(old):
                files[f"{preset} (baseline)"] = old
        sessions = {k: _session(f) for k, f in files.items()}
        names = {i.name for i in sessions["float"].get_inputs()}
        feeds = [{k: v for k, v in f.items() if k in names} for f in make(args.feeds, 1000)]
        for k, sess in list(sessions.items()):
            try:
                for feed in feeds:
                    sess.run(None, feed)
            except Exception as exc:
                print(f"| {name} | {k} | failed to run: {str(exc).splitlines()[0][:160]} | | | |", flush=True)
                del sessions[k], files[k]
        cpu = _common.cpu_round_robin(sessions, feeds, args.runs)
        base = statistics.median(cpu["float"])
        for k in files:
            ratio = statistics.median(c / f for c, f in zip(cpu[k], cpu["float"]))
            goal = GOALS.get(k.split(" ")[0])
            over = goal is not None and ratio > goal
            g = "" if goal is None else f"≤ {goal:g}× {'**over**' if over else 'met'}"
            q = f"{quantize_s[k]:.1f}" if k in quantize_s else "-"
            print(f"| {name} | {k} | {base:.3f} | {ratio:.2f} | {g} | {q} |", flush=True)
            if k != "float" and (args.profile_all or (args.profile and over)):
                profiles.append((name, k, files[k], feeds))
        del sessions
    print(f"\nload average at end {os.getloadavg()[0]:.2f}")
    for name, k, file, feeds in profiles:
        rows, executed = profile_ops(file, feeds, 5, out)
        _common.print_op_profile(f"{name} {k} ({executed} executed nodes)", rows)


if __name__ == "__main__":
    main()
