"""Nodes per block-quantizer call, per format, and what each body spends them on (issue 26, blockbody11).

``python bench/blockbody_nodes.py MODEL PRESET[,PRESET...] [--samples N] [--keep DIR]`` quantizes ``MODEL``
(as bench/quantize_stages.py reads it; no repair) with each preset and prints, per preset: the calls of
our functions, the nodes onnxruntime holds after inlining them (``If`` branches counted in), nodes per
call, and the op histogram over all calls (what a call runs: views, reductions, scale, rounding,
clamps, NaN/Inf handling, branches). ``--files DIR[,DIR...]`` reads ``DIR/<preset>.onnx`` instead of
quantizing; with ``--create N`` each file's session creation (CPU s of the process, one thread, level all, as
finish opens it) and one-thread run latency (``--runs``, per feed, ÷ the float model's in the same rounds) are
timed with the directories interleaved round by round (before/after trees side by side), and the file size;
``--profile N`` adds onnxruntime's kernel time per op type over N one-thread runs of the float model and each file.

    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/blockbody_nodes.py cls BFP16,MX9,MX6,MXINT8,MXFP8_E4M3,MXFP8_E5M2,MXFP4 --samples 4
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

import numpy as np
import onnx


def _ops(nodes: list[onnx.NodeProto], hist: collections.Counter) -> int:
    """Count ``nodes`` into ``hist`` (If branch nodes included); returns how many."""
    total = 0
    for n in nodes:
        hist[n.op_type] += 1
        total += 1
        for at in n.attribute:
            if at.type == onnx.AttributeProto.GRAPH:
                total += _ops(list(at.g.node), hist)
    return total


def count(model: onnx.ModelProto) -> dict:
    """Calls, nodes per call and the op histogram of ``model``'s calls to its local functions."""
    functions = {(f.domain, f.name): f for f in model.functions}
    hist: collections.Counter = collections.Counter()
    calls, nodes, bodies = 0, 0, set()
    for n in model.graph.node:
        f = functions.get((n.domain, n.op_type))
        if f is None:
            continue
        calls += 1
        bodies.add(f.name)
        nodes += _ops(list(f.node), hist)
    return {"calls": calls, "definitions": len(bodies), "call_nodes": nodes, "outer": len(model.graph.node),
            "per_call": nodes / calls if calls else 0.0, "hist": hist}


def _create(data: bytes) -> tuple[object, float]:
    from onnxptq.sessions import open_session

    t = time.process_time()
    session = open_session(data, log_severity=3, inline_functions_first=False, spinning=False, threads=1)
    return session, time.process_time() - t


def _latency(session: object, feed: dict, runs: int) -> float:
    t = time.process_time()
    for _ in range(runs):
        session.run(None, feed)
    return (time.process_time() - t) / runs


def _same_bits(a: list, b: list) -> bool:
    """Every output equal bit for bit (NaN where NaN)."""
    for u, v in zip(a, b):
        u, v = np.asarray(u), np.asarray(v)
        if u.shape != v.shape or u.dtype != v.dtype:
            return False
        if u.dtype.kind == "f":
            if not np.array_equal(np.isnan(u), np.isnan(v)):
                return False
            u, v = np.where(np.isnan(u), 0, u), np.where(np.isnan(v), 0, v)
            u, v = u.view(f"u{u.itemsize}"), v.view(f"u{v.itemsize}")
        if not np.array_equal(u, v):
            return False
    return True


def profile(data: bytes, feed: dict, runs: int) -> tuple[float, collections.Counter, float]:
    """onnxruntime's kernel time per inference (µs), in all and per op type, of one-thread runs of
    ``data`` (the finish session's options, profiling on; ``If`` rows include their branches'
    nodes, which are listed again under their own op types), and the nodes executed per inference."""
    import json

    from onnxptq.sessions import session_options
    import onnxruntime as ort

    options = session_options(log_severity=3, inline_functions_first=False, spinning=False, threads=1)
    options.enable_profiling = True
    options.profile_file_prefix = os.path.join(tempfile.mkdtemp(prefix="blockbody_prof_"), "p")
    session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    session.run(None, feed)
    for _ in range(runs):
        session.run(None, feed)
    path = session.end_profiling()
    by: collections.Counter = collections.Counter()
    events = [e for e in json.load(open(path)) if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
    os.remove(path)
    kept = events[len(events) // (runs + 1):]  # the first run (allocations) left out
    for e in kept:
        by[e["args"].get("op_name")] += e["dur"] / runs
    return sum(v for k, v in by.items() if k != "If"), by, len(kept) / runs


def compare(args: argparse.Namespace) -> None:
    """Nodes per call, creation CPU, latency ÷ float and bytes of each preset's file in each directory."""
    import quantize_stages

    path, data = quantize_stages._data(args.model, 4)
    logging.disable(logging.WARNING)
    dirs = args.files.split(",")
    float_bytes = onnx.load(str(path)).SerializeToString()  # external data read in (khmersm's)
    names = {i.name for i in onnx.load_from_string(float_bytes).graph.input}
    feeds = [{k: v for k, v in d.items() if k in names} for d in data[:4]]
    feed = feeds[0]
    print(f"## {args.model}: per preset, each directory ({', '.join(dirs)}); creation best of {args.create}, "
          f"latency best of {args.create} rounds of {args.runs} runs")
    print("| preset | dir | calls | nodes per call | creation CPU s | latency ÷ float | bytes | outputs = first dir's |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for preset in args.presets.split(","):
        blobs = [open(os.path.join(d, f"{preset}.onnx"), "rb").read() for d in dirs]
        outputs = [_create(b)[0].run(None, f) for b in blobs for f in feeds]
        per = len(feeds)
        same = [all(_same_bits(a, b) for a, b in zip(outputs[k * per:(k + 1) * per], outputs[:per]))
                for k in range(len(dirs))]
        created = [[] for _ in dirs]
        ratios = [[] for _ in dirs]
        for r in range(args.create):
            order = list(range(len(dirs)))
            if r % 2:
                order.reverse()
            fs, _ = _create(float_bytes)
            f_lat = _latency(fs, feed, args.runs)
            for k in order:
                s, dt = _create(blobs[k])
                created[k].append(dt)
                ratios[k].append(_latency(s, feed, args.runs) / f_lat)
        for k, d in enumerate(dirs):
            c = count(onnx.load_from_string(blobs[k]))
            print(f"| {preset} | {d} | {c['calls']} | {c['per_call']:.1f} | {min(created[k]):.3f} | "
                  f"{float(np.median(ratios[k])):.3f} | {len(blobs[k])} | {'yes' if same[k] else 'NO'} |", flush=True)
        if args.profile:
            for k, d in enumerate(["float"] + dirs):
                total, by, executed = profile(float_bytes if k == 0 else blobs[k - 1], feed, args.profile)
                top = ", ".join(f"{op} {us:.0f} ({100 * us / total:.0f} %)" for op, us in by.most_common(14) if op != "If")
                print(f"<!-- profile {preset} {d}: {executed:.0f} nodes executed per run, kernels {total:.0f} µs per run "
                      f"(If rows left out); {top} -->", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("presets")
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--keep", help="write the quantized files here (DIR/<preset>.onnx)")
    ap.add_argument("--files", help="read DIR/<preset>.onnx (comma-separated DIRs: compared) instead of quantizing")
    ap.add_argument("--create", type=int, default=0, help="time N session creations per file (best of)")
    ap.add_argument("--runs", type=int, default=20, help="runs per timing round of the latency")
    ap.add_argument("--profile", type=int, default=0, help="with --create: onnxruntime's kernel time per op type over N runs")
    args = ap.parse_args()
    if args.files and args.create:
        compare(args)
        return
    presets = args.presets.split(",")
    if args.files is None:
        from onnxptq import quantize
        from onnxptq.config.presets import get_preset

        import quantize_stages

        path, data = quantize_stages._data(args.model, args.samples)
        logging.disable(logging.WARNING)
        out_dir = args.keep or tempfile.mkdtemp(prefix="blockbody_nodes_")
        os.makedirs(out_dir, exist_ok=True)
    print(f"## {args.model}: our function calls after inlining")
    print("| preset | outer nodes | calls | definitions | nodes in calls | per call | top ops over all calls |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for preset in presets:
        if args.files is None:
            cfg = get_preset(preset)
            cfg = cfg.replace(calibration=dataclasses.replace(cfg.calibration, progress=False), repair=False)
            out = os.path.join(out_dir, f"{preset}.onnx")
            quantize(path, cfg, data, out)
        else:
            out = os.path.join(args.files, f"{preset}.onnx")
        c = count(onnx.load(out))
        top = ", ".join(f"{k} {v}" for k, v in c["hist"].most_common(14))
        print(f"| {preset} | {c['outer']} | {c['calls']} | {c['definitions']} | {c['call_nodes']} | {c['per_call']:.1f} "
              f"| {top} |", flush=True)


if __name__ == "__main__":
    main()
