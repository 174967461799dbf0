"""fp32 -> bfloat16 -> fp32 rounding in onnxruntime: what each standard-op form costs on one activation, and which
forms give the format's bits (fp16lat, issue 26 item 3).

Forms, each a one-node-chain model on an NCHW float32 tensor, one intra-op thread, timed round-robin (median of
rounds, ``time.thread_time``):

* ``Identity``: the session's own overhead, subtracted in the ``us over Identity`` column;
* ``Cast pair BF16``: ``Cast(BFLOAT16) -> Cast(FLOAT)``, the BF16 preset's form;
* ``Cast pair FP16``: ``Cast(FLOAT16) -> Cast(FLOAT)``, the FP16 preset's (another format: for its cost only);
* ``Veltkamp split``: ``g = x * (2^16 + 1); y = g + (x - g)`` (``Mul``, ``Sub``, ``Add``): rounds a float32 to 8
  significant bits with ties to even by arithmetic alone, the only kind of rounding onnxruntime's NCHWc layout could
  carry (its NCHWc nodes: Conv, pools, BatchNormalization as a depthwise Conv, Add/Sum/Mul of two NCHWc tensors,
  Concat, Relu/Sigmoid/Tanh, Upsample; a Cast has none).

``--check N``: each arithmetic form's bits against ``ml_dtypes.bfloat16`` on N random float32 bit patterns plus
exact ties, by class of input (normal and in range; above 2^128/65537, where ``x * C`` overflows; subnormal; ±Inf; −0);
and the same split with ``C = 2^13 + 1`` against float16 (the FP16 Cast form's question), by float16's ranges.

    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/bf16_rounding_forms.py --shape 1,64,56,56 --rounds 30 --check 2000000
"""

from __future__ import annotations

import argparse
import time

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

C = 65537.0  # 2^16 + 1: splits a 24-bit significand into its top 8 bits (Veltkamp)


def _model(shape: list[int], nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto] = ()) -> bytes:
    graph = helper.make_graph(nodes, "rounding", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model.SerializeToString()


def forms(shape: list[int]) -> dict[str, bytes]:
    c = helper.make_tensor("c", TensorProto.FLOAT, [], [C])
    return {
        "Identity": _model(shape, [helper.make_node("Identity", ["x"], ["y"])]),
        "Cast pair BF16": _model(shape, [helper.make_node("Cast", ["x"], ["b"], to=TensorProto.BFLOAT16),
                                         helper.make_node("Cast", ["b"], ["y"], to=TensorProto.FLOAT)]),
        "Cast pair FP16": _model(shape, [helper.make_node("Cast", ["x"], ["b"], to=TensorProto.FLOAT16),
                                         helper.make_node("Cast", ["b"], ["y"], to=TensorProto.FLOAT)]),
        "Veltkamp split": _model(shape, [helper.make_node("Mul", ["x", "c"], ["g"]), helper.make_node("Sub", ["x", "g"], ["d"]),
                                         helper.make_node("Add", ["g", "d"], ["y"])], [c]),
    }


def check(n: int) -> None:
    """The Veltkamp split's bits against ml_dtypes' fp32 -> bf16 rounding (NumPy float32 arithmetic, as onnxruntime's
    element-wise kernels compute it), by class of input."""
    rng = np.random.default_rng(0)
    x = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    ties = ((rng.integers(0, 2**15, n // 10).astype(np.uint32) << 16) | 0x8000).view(np.float32)  # ...x.8000: exact ties
    x = np.concatenate([x, ties, np.float32([np.inf, -np.inf, -0.0])])
    with np.errstate(all="ignore"):
        g = x * np.float32(C)
        y = g + (x - g)
        want = x.astype(ml_dtypes.bfloat16).astype(np.float32)
    differ = y.view(np.uint32) != want.view(np.uint32)
    differ &= ~(np.isnan(y) & np.isnan(want))
    big = np.float32(np.finfo(np.float32).max / np.float32(C))
    classes = {
        "normal, |x| <= 2^128/65537": np.isfinite(x) & (np.abs(x) >= np.finfo(np.float32).tiny) & (np.abs(x) <= big),
        "|x| > 2^128/65537": np.isfinite(x) & (np.abs(x) > big),
        "subnormal": np.isfinite(x) & (x != 0) & (np.abs(x) < np.finfo(np.float32).tiny),
        "±Inf": np.isinf(x),
        "−0": (x == 0) & np.signbit(x),
    }
    print(f"\nVeltkamp split against ml_dtypes.bfloat16 ({x.size} inputs, of them {ties.size} exact ties):")
    for name, mask in classes.items():
        print(f"  {name}: {int((differ & mask).sum())} of {int(mask.sum())} differ")
    # FP16's question: the split with C = 2^13 + 1 keeps 11 significant bits, but float16's range is not float32's
    with np.errstate(all="ignore"):
        g = x * np.float32(2**13 + 1)
        y = g + (x - g)
        want = x.astype(np.float16).astype(np.float32)
    differ = (y.view(np.uint32) != want.view(np.uint32)) & ~(np.isnan(y) & np.isnan(want))
    normal16 = np.isfinite(x) & (np.abs(x) >= np.float32(2**-14)) & (np.abs(x) <= np.float32(65504))
    below = np.isfinite(x) & (x != 0) & (np.abs(x) < np.float32(2**-14))
    above = np.isfinite(x) & (np.abs(x) > np.float32(65504))
    print("the same split with C = 2^13 + 1 against float16:")
    for name, mask in (("float16-normal range", normal16), ("below 2^-14 (float16 subnormal or zero)", below),
                       ("above 65504 (float16 Inf)", above)):
        print(f"  {name}: {int((differ & mask).sum())} of {int(mask.sum())} differ")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="1,64,56,56")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--check", type=int, default=0, help="inputs for the bit check (0: none)")
    args = ap.parse_args()
    shape = [int(d) for d in args.shape.split(",")]
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    so.log_severity_level = 3
    sessions = {k: ort.InferenceSession(m, so, providers=["CPUExecutionProvider"]) for k, m in forms(shape).items()}
    x = (np.random.default_rng(0).standard_normal(shape) * 3).astype(np.float32)
    want = x.astype(ml_dtypes.bfloat16).astype(np.float32).view(np.uint32)
    times: dict[str, list[float]] = {k: [] for k in sessions}
    for _ in range(args.rounds):
        for k, s in sessions.items():
            c0 = time.thread_time()
            for _ in range(args.repeat):
                s.run(None, {"x": x})
            times[k].append((time.thread_time() - c0) / args.repeat * 1e6)
    base = float(np.median(times["Identity"]))
    print(f"onnxruntime {ort.__version__}, one thread, float32 {shape}: median of {args.rounds} rounds of {args.repeat} runs")
    print("| form | us a run | us over Identity | bits = bf16 (normal values) |\n|---|---:|---:|---|")
    for k, s in sessions.items():
        same = np.array_equal(s.run(None, {"x": x})[0].view(np.uint32), want)
        print(f"| {k} | {np.median(times[k]):.1f} | {np.median(times[k]) - base:.1f} | {'yes' if same else 'no'} |")
    if args.check:
        check(args.check)


if __name__ == "__main__":
    main()
