"""A model over protobuf's 2 GB limit through the whole pipeline: peak RSS against the weights' size.

Issue 13 asks that a model whose weights live in external data (over 2 GB) loads, calibrates,
quantizes and saves (external data, written atomically) with peak RSS at most about 2.5x the
weights. This script builds such a model without ever holding a >2 GB protobuf: a chain
``x -> MatMul(W0) -> Relu -> MatMul(W1) -> ... `` of ``--layers`` square ``--dim`` x ``--dim`` fp32
weights (default 9 x 8192^2 x 4 B = 2.25 GiB), written straight into one external-data file. Then
a child process quantizes it with ``onnxptq.quantize(path, preset, feeds, output=...)`` under an
address-space cap (``--cap-gib``, so a runaway cannot take the shared machine down) and reports
``VmHWM``, the wall time and, when it succeeds, the cosine of the saved model's output against
float on one feed (both run by onnxruntime from their paths).

    python bench/large_model.py --preset BF16 --cap-gib 14
    python bench/large_model.py --preset BF16,A8W8,A16W8 --cap-gib 14   # one build, a child per preset
    python bench/large_model.py --preset A8W8 --dim 4096 --layers 4   # a small rehearsal (256 MiB)
    python bench/large_model.py --preset W4A16,W4A16_GPTQ --dim 4096 --layers 33   # weight-only (issue 29), 2.06 GiB

A weight-only preset (``onnxptq.weight_only.options.PRESETS``) runs ``onnxptq.quantize_weights``
on 4 feeds of 64 rows (GPTQ/AWQ calibrate on them: one pass per chunk of layers, see
``quantize_weights(calib_memory=...)``).

The model is given by path with an output, its external data is over
``onnxptq.graph.external.STREAM_THRESHOLD``: the quantization takes the streaming path.
"""

from __future__ import annotations

import _common  # the repository root on sys.path (testkit), the bench's session helper
import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def build(folder: Path, dim: int, layers: int, seed: int = 0) -> Path:
    """Write the chain model and its weights (one external file) into ``folder``; return its path."""
    import onnx
    from onnx import TensorProto, helper

    data_name = "weights.bin"
    rng = np.random.default_rng(seed)
    inits, nodes = [], []
    offset = 0
    with open(folder / data_name, "wb") as data:
        for i in range(layers):
            w = (rng.standard_normal((dim, dim), dtype=np.float32) / np.sqrt(dim)).astype(np.float32)
            data.write(w.tobytes())
            t = TensorProto(name=f"W{i}", data_type=TensorProto.FLOAT, dims=[dim, dim])
            t.data_location = TensorProto.EXTERNAL
            for key, value in (("location", data_name), ("offset", str(offset)), ("length", str(w.nbytes))):
                entry = t.external_data.add()
                entry.key, entry.value = key, value
            offset += w.nbytes
            inits.append(t)
            src = "x" if i == 0 else f"r{i - 1}"
            out = "y" if i == layers - 1 else f"m{i}"
            nodes.append(helper.make_node("MatMul", [src, f"W{i}"], [out], name=f"matmul{i}"))
            if i < layers - 1:
                nodes.append(helper.make_node("Relu", [out], [f"r{i}"], name=f"relu{i}"))
            del w
    graph = helper.make_graph(nodes, "large_chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", dim])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", dim])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = folder / "large.onnx"
    onnx.save(model, str(path))  # the proto holds no tensor bytes: far below 2 GB
    return path


def child(args: argparse.Namespace) -> int:
    """Quantize the model in this process (capped) and print a JSON line of figures."""
    cap = int(args.cap_gib * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    import onnxptq

    from onnxptq.weight_only.options import PRESETS as WEIGHT_ONLY

    rng = np.random.default_rng(1)
    weight_only = args.preset.upper() in WEIGHT_ONLY
    # weight-only GPTQ/AWQ need many rows per input width for a Hessian worth solving against
    rows = 64 if weight_only else 1
    feeds = [{"x": rng.standard_normal((rows, args.dim)).astype(np.float32)} for _ in range(4)]
    result: dict = {"preset": args.preset}
    t = time.perf_counter()
    try:
        if weight_only:
            done = onnxptq.quantize_weights(args.model, args.output, preset=args.preset, data=feeds, external_data=True,
                                            progress=False)
            result["timings"] = {k: round(v, 1) for k, v in done.timings.items()}
        else:
            onnxptq.quantize(args.model, args.preset, feeds, output=args.output, eval_samples=1)
        result["ok"] = True
    except BaseException as exc:  # MemoryError included: it is what we measure
        import traceback

        where = [f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in traceback.extract_tb(exc.__traceback__)[-6:]]
        result.update(ok=False, error=f"{type(exc).__name__}: {str(exc)[:400]}", where=where)
    result["quantize_s"] = time.perf_counter() - t
    result["peak_rss_kib"] = _common.status_kib("VmHWM")
    print(json.dumps(result), flush=True)
    return 0


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def _run_one(args: argparse.Namespace, path: Path, work: Path, preset: str, weights: int) -> dict:
    """Quantize ``path`` with ``preset`` in a capped child; figures, and the saved model's cosine."""
    out = work / f"large_{preset}.onnx"
    cmd = [sys.executable, __file__, "--child", "--model", str(path), "--output", str(out), "--preset", preset,
           "--dim", str(args.dim), "--cap-gib", str(args.cap_gib)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    result = json.loads(lines[-1]) if lines else {"preset": preset, "ok": False,
                                                  "error": f"child exited {proc.returncode}: {proc.stderr[-400:]}"}
    result.update(weights_gib=weights / 2**30, dim=args.dim, layers=args.layers, cap_gib=args.cap_gib)
    if result.get("peak_rss_kib", -1) > 0:
        result["rss_over_weights"] = result["peak_rss_kib"] * 1024 / weights
    if result.get("ok"):
        import onnxruntime as ort

        feed = {"x": np.random.default_rng(2).standard_normal((1, args.dim)).astype(np.float32)}
        ref = _common.session(str(path)).run(None, feed)[0]
        got = _common.session(str(out)).run(None, feed)[0]
        result["cosine"] = _cosine(ref, got)
        result["saved_files"] = {p.name: p.stat().st_size for p in sorted(work.iterdir()) if p.name.startswith(out.name)}
        leftovers = [p.name for p in work.iterdir() if p.name.endswith(".tmp")]
        result["temporaries_left"] = leftovers
    if not args.keep:
        for p in work.iterdir():
            if p.name.startswith(out.name):
                p.unlink()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="BF16", help="a preset, or several separated by commas (one child each)")
    parser.add_argument("--dim", type=int, default=8192)
    parser.add_argument("--layers", type=int, default=9)
    parser.add_argument("--cap-gib", type=float, default=12.0, help="address-space cap of the quantizing process")
    parser.add_argument("--workdir", help="where the model and its quantized copy go (default: a temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep the quantized models (default: removed after each preset)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--output", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args)

    work = Path(args.workdir or tempfile.mkdtemp(prefix="onnxptq-large-"))
    work.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    path = build(work, args.dim, args.layers)
    weights = args.dim * args.dim * 4 * args.layers
    print(f"built {path} ({weights / 2**30:.2f} GiB of weights) in {time.perf_counter() - t:.0f} s", flush=True)
    results = []
    for preset in args.preset.split(","):
        result = _run_one(args, path, work, preset.strip(), weights)
        print(json.dumps(result, indent=1), flush=True)
        results.append(result)
    print("| preset | ok | peak RSS | x weights | quantize s | cosine |")
    print("|---|---|---:|---:|---:|---:|")
    for r in results:
        print(f"| {r['preset']} | {'yes' if r.get('ok') else r.get('error', 'no')[:80]} | "
              f"{r.get('peak_rss_kib', -1) / 2**20:.2f} GiB | {r.get('rss_over_weights', float('nan')):.2f} | "
              f"{r.get('quantize_s', float('nan')):.0f} | {r.get('cosine', float('nan')):.6f} |")
    return 0 if all(r.get("ok") for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
