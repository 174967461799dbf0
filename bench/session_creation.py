"""Session-creation time of models with many block-format quantizers (BFP/MX function calls).

1. A chain of N quantizers on one [1,64,8,8] tensor (``build_qdq``, as in the issue report), with
   the generic body (no shape) and the body specialised to the static shape (what ``emit``
   passes): median of ``--repeat`` session creations, default session options.
2. ``--models``: PP-OCR rec and cls quantized with MX9 and BFP16 (``onnxptq.quantize``, 8 rendered
   lines of calibration data), saved to ``--out``; then their session creation (best of 2) and
   one-thread latency on one image, float and quantized interleaved (median cpu ms).

    python bench/session_creation.py [--n 20,80] [--models] [--out DIR] [--runs 20]
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
from onnx import TensorProto, helper

from onnxptq.onnx_ops import build_qdq

FORMATS = {
    "BFP16": ("bfp", dict(bfp_method="to_bfp", axis=1, bit_width=16, block_size=8, rounding_mode=2)),
    "MX9": ("bfp", dict(bfp_method="to_bfp_prime", axis=1, bit_width=16, block_size=16, sub_block_size=2,
                        sub_block_shift_bits=1, rounding_mode=2)),
    "MXINT8": ("mx", dict(element_dtype="int8", axis=1, block_size=32, rounding_mode=2)),
    "MXFP8": ("mx", dict(element_dtype="fp8_e4m3", axis=1, block_size=32)),
}
SHAPE = (1, 64, 8, 8)


def chain(label: str, n: int, static: bool) -> onnx.ModelProto:
    fmt, attrs = FORMATS[label]
    nodes, functions, imports, prev = [], {}, {"": 21}, "x"
    for i in range(n):
        frag = build_qdq(fmt, prev, f"t{i}", name=f"q{i}", opset=21, shape=SHAPE if static else None, **attrs)
        nodes += frag.nodes
        functions.update({f.name: f for f in frag.functions})
        imports.update(frag.opset_imports)
        prev = f"t{i}"
    graph = helper.make_graph(nodes + [helper.make_node("Identity", [prev], ["y"])], "chain",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(SHAPE))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(SHAPE))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in imports.items()],
                              functions=list(functions.values()))
    model.ir_version = 10
    return model


def create(model: onnx.ModelProto | str, threads: int | None = None) -> tuple[float, ort.InferenceSession]:
    start = time.perf_counter()
    sess = _common.session(model, threads, inter_op_threads=1 if threads else None)
    return time.perf_counter() - start, sess


def bench_chains(ns: list[int], repeat: int) -> None:
    print(f"onnxruntime {ort.__version__}: session creation of N chained quantizers on {SHAPE}, "
          f"median of {repeat}\n")
    print("| format | body | " + " | ".join(f"N={n} s" for n in ns) + f" | ms per call (N={ns[-1]}) |")
    print("|---|---|" + "---:|" * (len(ns) + 1))
    for label in FORMATS:
        for static in (False, True):
            times = [statistics.median(create(chain(label, n, static))[0] for _ in range(repeat)) for n in ns]
            print(f"| {label} | {'static shape' if static else 'generic'} | "
                  + " | ".join(f"{t:.2f}" for t in times) + f" | {times[-1] / ns[-1] * 1e3:.1f} |", flush=True)


def bench_models(out: str, runs: int) -> None:
    import onnxptq
    from testkit import ocr
    from testkit.models import model_path

    print("\n| model | preset | quantize s | session s | onnxptq nodes | latency cpu ms | × float |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name in ("rec", "cls"):
        path = model_path(name)
        if name == "rec":
            images = ocr.render_lines(8, seed=1, characters=ocr.load_characters(onnx.load(path)))[0]
        else:
            images = ocr.render_cls(8, seed=1)[0]
        x = np.asarray(images[:1], np.float32)
        sessions = {"float": create(str(path), threads=1)[1]}
        rows = {}
        for preset in ("MX9", "BFP16"):
            start = time.perf_counter()
            result = onnxptq.quantize(str(path), preset, [{"x": images}])
            quantize_s = time.perf_counter() - start
            file = os.path.join(out, f"{name}_{preset}.onnx")
            onnx.save(result.model, file)
            session_s = min(create(file)[0] for _ in range(2))
            sessions[preset] = create(file, threads=1)[1]
            calls = sum(1 for n in result.model.graph.node if n.domain == "onnxptq")
            rows[preset] = (quantize_s, session_s, calls)
        feeds = {sessions["float"].get_inputs()[0].name: x}
        for sess in sessions.values():
            sess.run(None, feeds)
        lat: dict[str, list[float]] = {k: [] for k in sessions}
        for _ in range(runs):
            for k, sess in sessions.items():
                start = time.thread_time()
                sess.run(None, feeds)
                lat[k].append((time.thread_time() - start) * 1e3)
        base = statistics.median(lat["float"])
        print(f"| {name} | float | | | | {base:.1f} | 1.00 |")
        for preset, (quantize_s, session_s, calls) in rows.items():
            ms = statistics.median(lat[preset])
            print(f"| {name} | {preset} | {quantize_s:.1f} | {session_s:.2f} | {calls} | {ms:.1f} | {ms / base:.2f} |",
                  flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", default="20,80", help="chain lengths")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--models", action="store_true", help="also quantize and time PP-OCR rec/cls")
    parser.add_argument("--out", default="", help="where to save the quantized models (default: a temp dir)")
    parser.add_argument("--runs", type=int, default=20, help="latency rounds for --models")
    args = parser.parse_args()
    bench_chains([int(v) for v in args.n.split(",")], args.repeat)
    if args.models:
        out = args.out or tempfile.mkdtemp(prefix="onnxptq_bench_")
        os.makedirs(out, exist_ok=True)
        bench_models(out, args.runs)


if __name__ == "__main__":
    main()
