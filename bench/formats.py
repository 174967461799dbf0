"""Latency of every format's ONNX realisation in onnxruntime CPU, one thread.

Each format's one-op model (``onnxptq.onnx_ops.qdq_model``) runs on a 1×64×112×112 float32 tensor
(standard-normal values) with ``intra_op_num_threads = inter_op_num_threads = 1``, beside a plain
copy of the tensor (``Identity``). Variants are timed in round-robin rounds (so a drift in machine
load hits all of them alike); each figure is the median over ``--runs`` rounds of:

* **wall ms** — ``time.perf_counter`` around ``session.run``;
* **cpu ms** — ``time.thread_time`` around the same call. With one intra-op thread onnxruntime
  runs the graph on the calling thread, so this is the work itself; on a shared, oversubscribed
  machine it is the trustworthy figure (wall time then includes waiting for a core).

Block formats (``bfp``, ``mx``) get a second row, "static shape": the body specialised to the
input's shape, as the emitter builds it from shape inference (no Pad/Slice when the block axis
divides); ``qdq_model`` builds the generic body, which always pads and slices back.

Families whose module is not importable yet are skipped with a note. Every model's output is
also checked against the NumPy reference (bit for bit; NaN where NaN) so a fast but wrong
realisation cannot slip into the table. Prints a markdown table.

    python bench/formats.py [--runs 30] [--only bfp,mx]
"""

from __future__ import annotations

import _common  # the repository root on sys.path (testkit), the bench's session helper
import argparse
import importlib
import statistics
import time
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

SHAPE = (1, 64, 112, 112)

#: (label, format, attributes, family module). Integer/float scales suit N(0, 1) data.
VARIANTS: tuple[tuple[str, str, dict[str, Any], str], ...] = (
    ("int8 per-tensor", "int8", {"scale": 4.0 / 127}, "integer"),
    ("int16 per-tensor", "int16", {"scale": 4.0 / 32767}, "integer"),
    ("bf16", "bf16", {}, "floating"),
    ("fp16", "fp16", {}, "floating"),
    ("fp8_e4m3 (scale 1/64)", "fp8_e4m3", {"scale": 1.0 / 64}, "floating"),
    ("BFP16 (to_bfp, bs 8, rm 2)", "bfp",
     dict(bfp_method="to_bfp", axis=1, bit_width=16, block_size=8, rounding_mode=2), "bfp"),
    ("BFP16, rounding_mode 0 (op default)", "bfp",
     dict(bfp_method="to_bfp", axis=1, bit_width=16, block_size=8, rounding_mode=0), "bfp"),
    ("MX9 (to_bfp_prime, bw 16)", "bfp",
     dict(bfp_method="to_bfp_prime", axis=1, bit_width=16, block_size=16, sub_block_size=2,
          sub_block_shift_bits=1, rounding_mode=2), "bfp"),
    ("MX6 (to_bfp_prime, bw 13)", "bfp",
     dict(bfp_method="to_bfp_prime", axis=1, bit_width=13, block_size=16, sub_block_size=2,
          sub_block_shift_bits=1, rounding_mode=2), "bfp"),
    ("MX4 (to_bfp_prime, bw 11)", "bfp",
     dict(bfp_method="to_bfp_prime", axis=1, bit_width=11, block_size=16, sub_block_size=2,
          sub_block_shift_bits=1, rounding_mode=2), "bfp"),
    ("MXINT8 (bs 32)", "mx", dict(element_dtype="int8", axis=1, block_size=32, rounding_mode=2), "mx"),
    ("MXFP8 e4m3 (bs 32)", "mx", dict(element_dtype="fp8_e4m3", axis=1, block_size=32), "mx"),
    ("MXFP6 e3m2 (bs 32)", "mx", dict(element_dtype="fp6_e3m2", axis=1, block_size=32), "mx"),
    ("MXFP4 e2m1 (bs 32)", "mx", dict(element_dtype="fp4_e2m1", axis=1, block_size=32), "mx"),
)


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    return _common.session(model, 1, inter_op_threads=1)


def _identity_model() -> onnx.ModelProto:
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])], "copy",
        [vi("x", TensorProto.FLOAT, list(SHAPE))], [vi("y", TensorProto.FLOAT, list(SHAPE))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model


def _static_model(fmt: str, attrs: dict[str, Any], opset: int) -> onnx.ModelProto:
    """One quantizer built with ``shape=SHAPE`` (what the emitter passes), static input shape."""
    from onnxptq.onnx_ops import build_qdq

    frag = build_qdq(fmt, "x", "y", name="qdq", opset=opset, shape=SHAPE, **attrs)
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(frag.nodes, "static", [vi("x", TensorProto.FLOAT, list(SHAPE))],
                              [vi("y", TensorProto.FLOAT, list(SHAPE))])
    imports = {"": opset, **frag.opset_imports}
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in imports.items()],
                              functions=frag.functions)
    model.ir_version = 10
    return model


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    nan = np.isnan(a)
    return bool(np.array_equal(nan, np.isnan(b)) and np.array_equal(a[~nan].view(np.uint32), b[~nan].view(np.uint32)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30, help="timed rounds (median reported; >= 20)")
    parser.add_argument("--only", default="", help="comma-separated families to keep (integer,floating,bfp,mx)")
    parser.add_argument("--opset", type=int, default=21)
    args = parser.parse_args()
    keep = {f for f in args.only.split(",") if f}

    try:
        from onnxptq import formats, onnx_ops
    except ImportError as exc:  # the package itself is broken: nothing to time
        raise SystemExit(f"cannot import onnxptq.formats: {exc}")

    x = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)
    sessions: list[tuple[str, ort.InferenceSession, str]] = [("copy (Identity)", _session(_identity_model()), "—")]
    notes: list[str] = []
    for label, fmt, attrs, family in VARIANTS:
        if keep and family not in keep:
            continue
        try:
            importlib.import_module(f"onnxptq.formats.{family}")
            importlib.import_module(f"onnxptq.onnx_ops.{family}")
        except ImportError as exc:
            notes.append(f"skipped {label}: family '{family}' not implemented yet ({exc})")
            continue
        try:
            model = onnx_ops.qdq_model(fmt, SHAPE, opset=args.opset, **attrs)
            sess = _session(model)
            got = sess.run(None, {"x": x})[0]
        except Exception as exc:  # a family under construction must not stop the others
            notes.append(f"skipped {label}: {type(exc).__name__}: {exc}")
            continue
        try:
            want = formats.fake_quantize(x, fmt, **attrs)
            check = "bit-exact" if _same(got, want) else "MISMATCH"
        except Exception as exc:
            want, check = None, f"no reference ({type(exc).__name__})"
        sessions.append((label, sess, check))
        if fmt in ("bfp", "mx"):
            try:
                static = _session(_static_model(fmt, attrs, max(args.opset, 18)))
                got = static.run(None, {"x": x})[0]
                check = "bit-exact" if want is not None and _same(got, want) else "MISMATCH"
                sessions.append((f"{label}, static shape", static, check))
            except Exception as exc:
                notes.append(f"skipped {label}, static shape: {type(exc).__name__}: {exc}")

    feeds = {"x": x}
    for _, sess, _ in sessions:  # warm-up
        for _ in range(3):
            sess.run(None, feeds)
    wall: dict[str, list[float]] = {label: [] for label, _, _ in sessions}
    cpu: dict[str, list[float]] = {label: [] for label, _, _ in sessions}
    for _ in range(max(args.runs, 20)):
        for label, sess, _ in sessions:
            t0, c0 = time.perf_counter(), time.thread_time()
            sess.run(None, feeds)
            c1, t1 = time.thread_time(), time.perf_counter()
            wall[label].append((t1 - t0) * 1e3)
            cpu[label].append((c1 - c0) * 1e3)

    base = statistics.median(cpu["copy (Identity)"])
    print(f"onnxruntime {ort.__version__}, input float32 {'x'.join(map(str, SHAPE))}, 1 thread, "
          f"median of {max(args.runs, 20)} rounds\n")
    print("| variant | cpu ms | wall ms | cpu / copy | check vs reference |")
    print("|---|---:|---:|---:|---|")
    for label, _, check in sessions:
        c, w = statistics.median(cpu[label]), statistics.median(wall[label])
        print(f"| {label} | {c:.2f} | {w:.2f} | {c / base:.1f}× | {check} |")
    for note in notes:
        print(f"\nnote: {note}")


if __name__ == "__main__":
    main()
