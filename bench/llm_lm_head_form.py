"""The tied int8 lm_head's ONNX form and decode latency (issue 29 follow-up), on SmolLM2-135M.

Before: ``form="dq-strict"`` (the old default ``dq``): the tied table is one int8
``DequantizeLinear`` feeding the Gather and ``Transpose → MatMul``, which onnxruntime 1.32 does not
fuse, so every step dequantizes the whole 49152×576 table. After: the default ``form="dq"``
(``GatherBlockQuantized`` + 8-bit ``MatMulNBits`` on one stored table). Both: int4 sym b128 RTN
body, lm_head int8. Reference rows: fp32 and the int4 body with a float lm_head.

Latency: bench/llm.py's ``latency`` (1 thread, batch 1, default session, interleaved rounds,
median of single-token steps): ``seq1`` = the plain model on a ``--seq``-token input, ``kv`` = a
decode step of the KV model with a ``--past``-token past. Perplexity: bench/llm.py's
``perplexity`` (windows of 512 on GPL-3), default session and level 1.
``--micro``: only the lm_head alone (x [1, 1, 576] · W [576, 49152], random int8 weights, b128)
as fp32 ``MatMul`` and as 8-bit ``MatMulNBits`` at accuracy level 0, 1 and 4 — why the table's
``MatMulNBits`` carries level 4 by default.

    PYTHONPATH=src python bench/llm_lm_head_form.py --seq 8
    PYTHONPATH=src python bench/llm_lm_head_form.py --micro
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import llm  # noqa: E402

OUT = Path("/work/cache/llm_lm_head_form")
VARIANTS = {"before_dq_strict": {"form": "dq-strict", "lm_head": "int8"},
            "after_dq": {"form": "dq", "lm_head": "int8"},
            "lm_head_float": {"form": "dq", "lm_head": "float"}}


def quantize(name: str, src: Path, kw: dict) -> tuple[Path, float]:
    import onnxptq

    dst = OUT / name / "model.onnx"
    dst.parent.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    onnxptq.quantize_weights(str(src), output=str(dst), bits=4, block_size=128, symmetric=True, method="rtn",
                             external_data=True, progress=False, **kw)
    return dst, round(time.perf_counter() - t, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--windows", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--past", type=int, default=128)
    ap.add_argument("--seq", type=int, default=1)
    ap.add_argument("--micro", action="store_true")
    args = ap.parse_args()
    if args.micro:
        micro()
        return
    plain, kv = llm.MODEL_DIR / "model.onnx", llm.MODEL_DIR / "model_kv.onnx"
    res: dict = {"args": vars(args), "variants": {}}
    paths = {"fp32": (plain, kv)}
    for name, kw in VARIANTS.items():
        p, tp = quantize(name, plain, kw)
        k, tk = quantize(name + "_kv", kv, kw)
        paths[name] = (p, k)
        res["variants"][name] = {"quantize_s": tp, "kv_quantize_s": tk, "bytes": llm.model_size(p)}
        print(name, res["variants"][name], flush=True)
    ids = llm.tokens([llm.EVAL_TEXT])
    entries = []
    for name, (p, k) in paths.items():
        entries += [(f"{name}/seq{args.seq}", p, None, False), (f"{name}/kv", k, None, True)]
    res["latency_ms"] = latency(entries, args)
    for key, ms in res["latency_ms"].items():
        base = res["latency_ms"][f"fp32/{key.split('/')[1]}"]
        print(f"{key:28s} {ms:8.3f} ms  {ms / base:5.2f}x fp32", flush=True)
    res["ppl"] = {}
    for name, (p, _) in paths.items():
        for level in ((None,) if name == "fp32" else (None, 1)):
            r = llm.perplexity(p, level, ids, args.windows, threads=2)
            res["ppl"][f"{name}/level{level or 'default'}"] = r
            print(name, level, r, flush=True)
    (OUT / "results.json").write_text(json.dumps(res, indent=1))


def latency(entries, args) -> dict:
    """bench/llm.py's latency with a ``--seq``-token input for the plain model."""
    if args.seq == 1:
        return llm.latency(entries, args.rounds, args.steps, args.past)
    sessions = []
    for key, path, level, is_kv in entries:
        s = llm.session(path, level, threads=1)
        feed = llm.kv_feed(s, args.past) if is_kv else {"input_ids": np.full((1, args.seq), 42, np.int64)}
        out = [s.get_outputs()[0].name]
        for _ in range(3):
            s.run(out, feed)
        sessions.append((key, s, feed, out))
    times: dict = {k: [] for k, *_ in sessions}
    for _ in range(args.rounds):
        for key, s, feed, out in sessions:
            for _ in range(args.steps):
                t = time.perf_counter()
                s.run(out, feed)
                times[key].append((time.perf_counter() - t) * 1e3)
    return {k: round(float(np.median(v)), 3) for k, v in times.items()}


def micro(v: int = 49152, h: int = 576, runs: int = 20) -> None:
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from onnxptq.formats.int_blocks import BlockFormat
    from onnxptq.onnx_ops import weight_blocks

    rng = np.random.default_rng(0)
    fmt = BlockFormat(8, 128, True)
    q = rng.integers(-127, 128, (h, v)).astype(np.int8)
    scale = (rng.random((fmt.blocks(h), v)) * 0.01).astype(np.float32)
    x_info = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, h])
    y_info = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    feed = {"x": rng.standard_normal((1, 1, h)).astype(np.float32)}

    def run(nodes, inits, label):
        model = helper.make_model(helper.make_graph(nodes, "g", [x_info], [y_info], inits),
                                  opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        for _ in range(3):
            sess.run(None, feed)
        t = time.perf_counter()
        for _ in range(runs):
            sess.run(None, feed)
        print(f"{label:24s} {(time.perf_counter() - t) / runs * 1e3:8.2f} ms", flush=True)

    run([helper.make_node("MatMul", ["x", "w"], ["y"])], [numpy_helper.from_array(q.astype(np.float32), "w")], "fp32 MatMul")
    for level in (0, 1, 4):
        nodes, inits = weight_blocks.matmul_nbits("l", "x", "y", q, scale, None, fmt, accuracy_level=level)
        run(nodes, inits, f"MatMulNBits 8-bit lvl {level}")


if __name__ == "__main__":
    main()
