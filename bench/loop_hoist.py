"""Loop-body weight decodes hoisted (graph/passes/hoist_loop_constants.py): latency ÷ float before and after, same bits.

For each model and preset the quantizer runs twice in one process: once as it ships, once with the hoist
replaced by a no-op (the "before" file). Both files are run on the same held-out feeds: their outputs must be
bit-identical; and each is timed against the float source on one thread, alternating (CPU seconds, so load
drift hits both), as bench/newmodels.py's ``latency x`` does.

    NEWMODELS21_SRC=/work/cache/newmodels21/src PYTHONPATH=src:. OMP_NUM_THREADS=1 \
        python bench/loop_hoist.py --models mk8dx_digits,nakdimon --presets A8W8,A16W8,MXINT8,A8W8:fp16

A preset written ``NAME:fp16`` keeps a float16 source in float16 inside (``QuantConfig.widen_fp16=False``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))

import newmodels  # noqa: E402  (bench/newmodels.py: the round's models and feeds)

import onnxptq  # noqa: E402
from onnxptq.graph.passes import hoist_loop_constants as hoist_module  # noqa: E402
from onnxptq.config.presets import get_preset  # noqa: E402
from testkit import zoo  # noqa: E402


def _cpu(run, feeds, rounds: int) -> float:
    t = 0.0
    for _ in range(rounds):
        for f in feeds:
            c = time.process_time()
            run(f)
            t += time.process_time() - c
    return t


def _plain_runner(path: Path):
    """onnxruntime with its graph optimizations off: each op computed as written."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    names = {i.name for i in sess.get_inputs()}
    return lambda feed: sess.run(None, {k: v for k, v in feed.items() if k in names})


def _body_dq(path: Path) -> int:
    """DequantizeLinear nodes left inside Loop/Scan bodies."""
    from onnxptq.graph.walk import all_graphs

    m = onnx.load(str(path), load_external_data=False)
    return sum(n.op_type == "DequantizeLinear" for g in list(all_graphs(m.graph))[1:] for n in g.node)


def measure(model: str, preset: str, calib: int, held: int, rounds: int, out_dir: Path) -> dict:
    path, make_feeds, _, _ = newmodels.MODELS[model]
    config = preset
    if preset.endswith(":fp16"):  # the float16 source kept in float16 inside (QuantConfig.widen_fp16=False)
        config = dataclasses.replace(get_preset(preset.split(":")[0]), widen_fp16=False)
    cal, test = make_feeds(calib, 1), make_feeds(held, 2)
    files = {}
    for kind in ("before", "after"):
        dst = out_dir / f"{model}.{preset}.{kind}.onnx"
        if kind == "before":
            with mock.patch.object(hoist_module, "hoist_loop_constants", lambda m: 0):
                onnxptq.quantize(path, config, data=cal, output=str(dst))
        else:
            onnxptq.quantize(path, config, data=cal, output=str(dst))
        files[kind] = dst
    ref, before, after = zoo.session_runner(path), zoo.session_runner(files["before"]), zoo.session_runner(files["after"])
    same = all(a.tobytes() == b.tobytes() and a.dtype == b.dtype
               for f in test for a, b in zip(before(f), after(f)))
    plain = [_plain_runner(files[k]) for k in ("before", "after")]  # op by op: no folding, no kernel choice
    same_plain = all(a.tobytes() == b.tobytes() for f in test for a, b in zip(plain[0](f), plain[1](f)))
    diff = max(float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) for f in test
               for a, b in zip(before(f), after(f)) if a.dtype.kind == "f")
    for r in (ref, before, after):
        r(test[0])
    tf = tb = ta = 0.0
    for f in test[: min(len(test), 4)]:  # alternating, so drift hits all three
        tf += _cpu(ref, [f], rounds)
        tb += _cpu(before, [f], rounds)
        ta += _cpu(after, [f], rounds)
    return {"model": model, "preset": preset, "bit_identical": same, "bit_identical_unoptimized": same_plain,
            "max_abs_diff": diff,
            "body_dq_before": _body_dq(files["before"]), "body_dq_after": _body_dq(files["after"]),
            "latency_x_before": round(tb / tf, 2), "latency_x_after": round(ta / tf, 2),
            "float_cpu_s": round(tf, 3)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="mk8dx_digits,nakdimon")
    ap.add_argument("--presets", default="A8W8,A16W8,MXINT8")
    ap.add_argument("--calib", type=int, default=16)
    ap.add_argument("--held", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models.split(","):
            for preset in args.presets.split(","):
                row = measure(model, preset, args.calib, args.held, args.rounds, Path(tmp))
                print(json.dumps(row), flush=True)
                rows.append(row)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print("| model | preset | body DQ before → after | latency × float before → after | outputs bit-identical "
          "(optimized / ops as written) | max abs diff |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['model']} | {r['preset']} | {r['body_dq_before']} → {r['body_dq_after']} | "
              f"{r['latency_x_before']} → {r['latency_x_after']} | {r['bit_identical']} / {r['bit_identical_unoptimized']} | "
              f"{r['max_abs_diff']:.3g} |")


if __name__ == "__main__":
    main()
