"""Issue 26: file size and one-thread latency of each format against the float model, side by side.

For every model and preset: quantize with ``onnxptq.quantize(model, preset, None)`` (the formats
timed here need no calibration data), save, and report the file size against the fp32 file and
the quantize wall time; then time the float model and every quantized model round-robin in one
process (``intra_op_num_threads = inter_op_num_threads = 1``, sequential, default graph
optimisation) on one input: the median CPU time (``thread_time`` around ``sess.run``; the machine
is shared, so CPU time, not wall time, is the figure) and its ratio to the float model's median.

A preset ``P+nbits`` is P with ``weight_runtime="matmulnbits"`` (MXINT8 MatMul weights as blocked
int8 DequantizeLinear, fused by onnxruntime into MatMulNBits: int8 activation arithmetic); a
preset ``P-plain`` is P with ``pack_weights=False`` (one fp32 initializer per weight).

    python bench/packed_runtime.py [--models rec,cls,det,orientation=PATH] [--presets BF16,BFP16,MX9,MXINT8]
                                   [--runs 20] [--out DIR [--reuse]]
"""

from __future__ import annotations

import _common  # noqa: F401  (the repository root on sys.path: testkit)
import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, os.path.dirname(__file__))
from block_latency import session  # noqa: E402  (the same one-thread session as the issue-16 bench)


def model_and_input(spec: str) -> tuple[str, str, np.ndarray]:
    """(label, path, one input) for ``rec``/``cls`` (rendered text), ``det`` or ``label=PATH``."""
    from testkit.models import model_path

    if spec in ("rec", "cls"):
        from block_latency import inputs

        path, _, x = inputs(spec)
        return spec, path, x
    label, _, path = spec.partition("=")
    path = path or str(model_path(label))
    m = onnx.load(path, load_external_data=False)
    inits = {t.name for t in m.graph.initializer}
    first = next(i for i in m.graph.input if i.name not in inits)
    dims = [d.dim_value if d.HasField("dim_value") else None for d in first.type.tensor_type.shape.dim]
    shape = [1] + [d or 320 for d in dims[1:]]  # batch 1; unknown spatial dims 320 (det)
    x = np.random.default_rng(0).uniform(0, 1, shape).astype(np.float32)
    return label, path, x


def quantize(path: str, preset: str, out: str) -> float:
    import onnxptq

    base, _, variant = preset.partition("+") if "+" in preset else preset.partition("-")
    cfg = onnxptq.get_preset(base)
    if variant == "nbits":
        cfg = cfg.replace(weight_runtime="matmulnbits")
    elif variant == "plain":
        cfg = cfg.replace(pack_weights=False)
    start = time.perf_counter()
    result = onnxptq.quantize(path, cfg, None, eval_samples=0)
    seconds = time.perf_counter() - start
    onnx.save(result.model, out)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="rec,cls,det")
    parser.add_argument("--presets", default="BF16,BFP16,MX9,MXINT8,MX4,MXFP4")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--out", default="")
    parser.add_argument("--reuse", action="store_true")
    args = parser.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="onnxptq_packed_")
    os.makedirs(out, exist_ok=True)
    print(f"onnxruntime {ort.__version__}, one intra-op thread, median CPU time of {args.runs} rounds; "
          f"load average at start {os.getloadavg()[0]:.2f}\n")
    print("| model | variant | quantize s | file MB | × fp32 file | cpu ms | × float (cpu) |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for spec in args.models.split(","):
        label, path, x = model_and_input(spec)
        files = {"float": (path, 0.0)}
        for preset in args.presets.split(","):
            file = os.path.join(out, f"{label}_{preset}.onnx")
            seconds = float("nan")
            if not (args.reuse and os.path.exists(file)):
                seconds = quantize(path, preset, file)
            files[preset] = (file, seconds)
        sessions = {k: session(f) for k, (f, _) in files.items()}
        feeds = {sessions["float"].get_inputs()[0].name: x}
        for sess in sessions.values():
            for _ in range(2):
                sess.run(None, feeds)
        cpu: dict[str, list[float]] = {k: [] for k in sessions}
        for _ in range(args.runs):
            for k, sess in sessions.items():
                c0 = time.thread_time()
                sess.run(None, feeds)
                cpu[k].append((time.thread_time() - c0) * 1e3)
        fp_size, fp_cpu = os.path.getsize(path), statistics.median(cpu["float"])
        for k, (file, seconds) in files.items():
            size, c = os.path.getsize(file), statistics.median(cpu[k])
            print(f"| {label} | {k} | {seconds:.1f} | {size / 2**20:.2f} | {size / fp_size:.3f} | {c:.2f} | {c / fp_cpu:.2f} |",
                  flush=True)
        del sessions
    print(f"\nload average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
