"""Issue 26 item 3: one-thread latency of zoo models per format, by onnxruntime thread CPU time.

The zoo table (``bench/zoo.py``) times each pair by wall clock, best of two passes over four
feeds, with nothing else beside it: on a tiny model (a wake-word head runs in tens of µs) one
pass of the shared machine's noise is the whole figure. Here every model is quantized with each
preset (its calibration feeds, as the zoo does), then the float and every quantized session are
timed round-robin in one process on the same held-out feeds: ``thread_time`` around ``sess.run``,
one intra-op thread, the median over ``--runs`` rounds of the per-round sum over the feeds.
Each row also counts the session's executed nodes, the number that a tiny model's time follows
(onnxruntime spends ~1 µs per executed node on this machine).

A preset written ``NAME:every`` is quantized with the every-op placement of the block formats
(``int_block_dot_operands_only=False``, what main did before branch blockdot), so both placements
are timed side by side in one process. Each row also gives the quantize CPU seconds
(``time.process_time`` around ``onnxptq.quantize``; "-" for a reused file).

    PYTHONPATH=src:. python bench/zoo_latency.py --models oww_hey_jarvis,romanizer_encoder \
        --presets BF16,BFP16,MX9,MXINT8 [--runs 30] [--feeds 4] [--out DIR [--reuse]] [--baseline OLD_DIR]
    PYTHONPATH=src:. python bench/zoo_latency.py --models lac --presets BF16,MX9:every,MX9
"""

from __future__ import annotations

import _common  # noqa: F401  (the repository root on sys.path: testkit)
import argparse
import json
import logging
import os
import statistics
import tempfile
import time

import onnxruntime as ort


def _session(path: str) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.log_severity_level = 3
    return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])


def _executed_nodes(path: str, feed: dict) -> int:
    """Nodes onnxruntime runs for one inference (its profiler's node events, functions inlined)."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    opts.enable_profiling = True
    opts.profile_file_prefix = os.path.join(tempfile.gettempdir(), "zoo_latency_prof")
    opts.log_severity_level = 3
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    sess.run(None, feed)
    prof = sess.end_profiling()
    with open(prof) as f:
        events = json.load(f)
    os.remove(prof)
    return sum(1 for e in events if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"))


def main() -> None:
    from testkit import zoo

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", required=True)
    ap.add_argument("--presets", default="BF16,BFP16,MX9,MXINT8")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--feeds", type=int, default=4)
    ap.add_argument("--out", default="")
    ap.add_argument("--reuse", action="store_true")
    ap.add_argument("--baseline", default="", help="a folder of files from an earlier run (another commit's --out): "
                    "timed in the same rounds as '<preset> (baseline)'")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    out = args.out or tempfile.mkdtemp(prefix="onnxptq_zoo_lat_")
    os.makedirs(out, exist_ok=True)
    by_name = {m.name: m for m in zoo.ZOO}
    print(f"onnxruntime {ort.__version__}, one intra-op thread, median over {args.runs} rounds of the CPU time "
          f"of {args.feeds} held-out feeds; load average at start {os.getloadavg()[0]:.2f}\n")
    print("| model | variant | executed nodes | cpu ms (per feed) | × float (cpu) | quantize CPU s |")
    print("|---|---|---:|---:|---:|---:|")
    for name in args.models.split(","):
        import onnxptq

        model = by_name[name]
        files = {"float": str(model.path())}
        quantize_s: dict[str, float] = {}
        calib = None
        for preset in args.presets.split(","):
            file = os.path.join(out, f"{name}.{preset.replace(':', '.')}.onnx")
            try:
                if not (args.reuse and os.path.exists(file)):
                    calib = calib if calib is not None else model.samples("calibration")
                    config = preset
                    if preset.endswith(":every"):
                        from onnxptq.config.presets import resolve_config

                        config = resolve_config(preset.split(":")[0]).replace(int_block_dot_operands_only=False)
                    c0 = time.process_time()
                    onnxptq.quantize(str(model.path()), config, data=list(calib), output=file)
                    quantize_s[preset] = time.process_time() - c0
                _session(file)
            except Exception as exc:  # reported, the other presets still run
                print(f"| {name} | {preset} | failed: {str(exc).splitlines()[0][:160]} | | |", flush=True)
                continue
            files[preset] = file
            old = os.path.join(args.baseline, os.path.basename(file)) if args.baseline else ""
            if old and os.path.exists(old):
                files[f"{preset} (baseline)"] = old
        sessions = {k: _session(f) for k, f in files.items()}
        names = {i.name for i in sessions["float"].get_inputs()}
        feeds = [{k: v for k, v in f.items() if k in names} for f in model.samples("heldout")[: args.feeds]]
        for k, sess in list(sessions.items()):
            try:
                for feed in feeds:
                    sess.run(None, feed)
            except Exception as exc:  # a model that fails to run is reported, not timed
                print(f"| {name} | {k} | failed: {str(exc).splitlines()[0][:160]} | | |", flush=True)
                del sessions[k], files[k]
        cpu = _common.cpu_round_robin(sessions, feeds, args.runs)
        base = statistics.median(cpu["float"])
        for k, f in files.items():
            c = statistics.median(cpu[k])
            q = f"{quantize_s[k]:.1f}" if k in quantize_s else "-"
            print(f"| {name} | {k} | {_executed_nodes(f, feeds[0])} | {c:.3f} | {c / base:.2f} | {q} |", flush=True)
        del sessions
    print(f"\nload average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
