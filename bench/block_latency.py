"""One-thread latency of the BFP16 and MX9 fake-quant PP-OCR models against the float model.

Quantizes PP-OCRv4 rec and PP-OCR cls with ``onnxptq.quantize(model, "BFP16"/"MX9", data)`` (8
rendered lines of calibration data; block formats need none), then times float and quantized
sessions (``intra_op_num_threads = inter_op_num_threads = 1``, sequential execution, default graph
optimisation) round-robin in one process on one rendered line: median CPU time (``thread_time``
around ``sess.run``) and wall time, and the ratio to the float model of the same round. CPU time is
what the issue-3 targets (≤ 8× on cls, ≤ 3× on rec) are judged on: the machine is shared.

``--profile`` adds, per quantized model, onnxruntime's node profile summed by op type (one-thread
session, ``--runs`` inferences), the ten most costly op types and the function bodies' share.

    python bench/block_latency.py [--runs 40] [--models rec,cls] [--presets BFP16,MX9] [--profile]
                                  [--out DIR [--reuse]] [--baseline OLD_DIR]
"""

from __future__ import annotations

import _common  # the repository root on sys.path (testkit), the bench's session helper
import argparse
import os
import statistics
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort

TARGETS = {"cls": 8.0, "rec": 3.0}


def session(model: str, profile: str | None = None) -> ort.InferenceSession:
    return _common.session(model, 1, inter_op_threads=1, profile=profile or None)


def inputs(name: str) -> tuple[str, np.ndarray, np.ndarray]:
    from testkit import ocr
    from testkit.models import model_path

    path = str(model_path(name))
    if name == "rec":
        images = ocr.render_lines(8, seed=1, characters=ocr.load_characters(onnx.load(path)))[0]
    else:
        images = ocr.render_cls(8, seed=1)[0]
    images = np.asarray(images, np.float32)
    return path, images, images[:1]


def quantize(path: str, preset: str, images: np.ndarray, out: str) -> tuple[str, int, float]:
    import onnxptq

    start = time.perf_counter()
    result = onnxptq.quantize(path, preset, [{"x": images}], eval_samples=0)
    seconds = time.perf_counter() - start
    onnx.save(result.model, out)
    calls = sum(1 for n in result.model.graph.node if n.domain == "onnxptq")
    return out, calls, seconds



def profile_ops(model: str, feeds: dict, runs: int, workdir: str) -> list[tuple[str, float, int]]:
    """(op type, µs per inference, nodes) from onnxruntime's profile, most costly first."""
    return _common.profile_ops(session(model, profile=os.path.join(workdir, "prof")), [feeds], runs)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40, help="timed rounds (each runs every variant once)")
    parser.add_argument("--models", default="rec,cls")
    parser.add_argument("--presets", default="BFP16,MX9")
    parser.add_argument("--out", default="", help="where to save the quantized models (default: a temp dir)")
    parser.add_argument("--reuse", action="store_true", help="reuse models already saved in --out")
    parser.add_argument("--profile", action="store_true", help="also print onnxruntime's per-op-type profile")
    parser.add_argument("--baseline", default="", help="a folder of models saved by an earlier run (e.g. another "
                        "commit's --out): timed in the same rounds, as '<preset> (baseline)'")
    args = parser.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="onnxptq_latency_")
    os.makedirs(out, exist_ok=True)
    print(f"onnxruntime {ort.__version__}, one intra-op thread, median of {args.runs} rounds; "
          f"load average at start {os.getloadavg()[0]:.2f}\n")
    print("| model | variant | onnxptq calls | session s | cpu ms | wall ms | × float (cpu) | × float (wall) | target | met |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    profiles = {}
    for name in args.models.split(","):
        path, images, x = inputs(name)
        variants = {"float": (path, 0)}
        for preset in args.presets.split(","):
            file = os.path.join(out, f"{name}_{preset}.onnx")
            if not (args.reuse and os.path.exists(file)):
                quantize(path, preset, images, file)
            calls = sum(1 for n in onnx.load(file).graph.node if n.domain == "onnxptq")
            variants[preset] = (file, calls)
            old = os.path.join(args.baseline, f"{name}_{preset}.onnx") if args.baseline else ""
            if old and os.path.exists(old):
                variants[f"{preset} (baseline)"] = (old, sum(1 for n in onnx.load(old).graph.node if n.domain == "onnxptq"))
        sessions, created = {}, {}
        for k, (file, _) in variants.items():
            start = time.perf_counter()
            sessions[k] = session(file)
            created[k] = time.perf_counter() - start
        feeds = {sessions["float"].get_inputs()[0].name: x}
        for sess in sessions.values():
            for _ in range(3):
                sess.run(None, feeds)
        cpu: dict[str, list[float]] = {k: [] for k in sessions}
        wall: dict[str, list[float]] = {k: [] for k in sessions}
        ratio: dict[str, list[float]] = {k: [] for k in sessions}
        for _ in range(args.runs):
            for k, sess in sessions.items():
                w0, c0 = time.perf_counter(), time.thread_time()
                sess.run(None, feeds)
                cpu[k].append((time.thread_time() - c0) * 1e3)
                wall[k].append((time.perf_counter() - w0) * 1e3)
            for k in sessions:
                ratio[k].append(cpu[k][-1] / cpu["float"][-1])
        base_c, base_w = statistics.median(cpu["float"]), statistics.median(wall["float"])
        for k, (file, calls) in variants.items():
            c, w = statistics.median(cpu[k]), statistics.median(wall[k])
            target = TARGETS[name] if k != "float" else None
            met = "" if target is None else ("yes" if c / base_c <= target else "NO")
            print(f"| {name} | {k} | {calls} | {created[k]:.2f} | {c:.2f} | {w:.2f} | {c / base_c:.2f} | "
                  f"{w / base_w:.2f} | {'' if target is None else f'≤ {target:g}×'} | {met} |", flush=True)
        if args.profile:
            for k, (file, _) in variants.items():
                profiles[(name, k)] = profile_ops(file, feeds, min(args.runs, 20), out)
    print(f"\nload average at end {os.getloadavg()[0]:.2f}")
    for (name, k), rows in profiles.items():
        _common.print_op_profile(f"{name} {k}", rows)


if __name__ == "__main__":
    main()
