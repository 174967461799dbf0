"""Work a block quantize may do twice, or for nothing, measured (issue 26 item 1; bench/RESULTS.md blockq21).

Four measurements, each a subcommand (CPU seconds, ``time.process_time``; run with ``OMP_NUM_THREADS=1``):

``suspects MODEL PRESETS``
    one quantize per preset (repair off, every session one thread as ``quantize_stages.py --one-thread``)
    under cProfile on the CPU clock, after a BF16 warm-up: per preset the calls and CPU seconds of what
    is done twice when it is (serializations, message copies, ``deepcopy``, the ONNX checker, shape
    inference, onnxruntime session creations, tensor conversions) with their largest callers.
``guard-side MODEL PRESET``
    the calibration session's runs over the feeds with the range guard's thinning nodes
    (pipeline/guard.py ``CalibrationCapture``: taken on the first ``MAX_SAMPLES`` feeds only, but
    onnxruntime runs every node of a graph whatever outputs a run asks for) and without them: what
    running them on every feed costs.
``if-gate``
    the same thinning (Shape, Gather, Div, Add, Slice on 55 tensors) run plainly, absent, and behind an
    ``If`` on a per-run flag (false: nothing thinned): whether gating would save what ``guard-side``
    measures.
``lean-session MODEL PRESETS``
    finish's session (its options, one thread) created on the bytes finish serializes and on the
    delivered (lean) file, alternating, best of 3, and both sessions' outputs on three feeds compared.

    OMP_NUM_THREADS=1 PYTHONPATH=src:.:bench python bench/quantize_double_work.py suspects rec BF16,MX9
"""

from __future__ import annotations

import _common  # noqa: F401  (the repository root on sys.path: testkit)
import argparse
import cProfile
import gc
import logging
import os
import pstats
import tempfile
import time
from typing import Any

import numpy as np

SUSPECTS = ("SerializeToString", "CopyFrom", "deepcopy", "infer_shapes", "check_model", "initialize_session",
            "ParseFromString", "load_model_from_string", "save_model", "MergeFrom", "to_array", "from_array")


def _quantize(model: str, preset: str, data: list, out: str) -> Any:
    from quantize_stages import quiet_config

    from onnxptq import quantize

    return quantize(_path(model), quiet_config(preset, repair=False), data, out)


def _path(model: str) -> Any:
    from quantize_stages import _data

    return _data(model, 1)[0]


def suspects(model: str, presets: list[str], samples: int) -> None:
    from quantize_stages import _data, _one_thread

    _, data = _data(model, samples)
    _one_thread()
    tmp = tempfile.mkdtemp(prefix="double_work_")
    _quantize(model, "BF16", data, os.path.join(tmp, "warm.onnx"))
    for preset in presets:
        gc.collect()
        prof = cProfile.Profile(time.process_time)
        prof.enable()
        _quantize(model, preset, data, os.path.join(tmp, f"{preset}.onnx"))
        prof.disable()
        rows = []
        for (_, _, fn), (_, calls, _, cum, callers) in pstats.Stats(prof).stats.items():
            if any(k in fn for k in SUSPECTS):
                top = sorted(((v[3], f"{os.path.basename(c[0])}:{c[1]}:{c[2]}") for c, v in callers.items()), reverse=True)[:4]
                rows.append((cum, fn, calls, top))
        print(f"## {model} {preset} (cProfile on the CPU clock: Python-heavy parts inflated)")
        for cum, fn, calls, top in sorted(rows, reverse=True):
            if cum > 0.004:
                print(f"{cum:.3f} s  n={calls}  {fn}  <- " + "; ".join(f"{w} {c:.3f}" for c, w in top))


def guard_side(model: str, preset: str, samples: int, rounds: int) -> None:
    import onnxruntime as ort
    from quantize_stages import _data

    from onnxptq.calibration import runner
    from onnxptq.calibration.reductions import ROWS_INPUT

    _, data = _data(model, samples)
    got: dict[str, Any] = {}
    original = runner.augment_model

    def augment(m: Any, fetch: Any, *a: Any, side: Any = None, **k: Any) -> Any:
        made = original(m, fetch, *a, side=side, **k)
        if side is not None and "with" not in got:
            got.update({"with": made[0], "without": original(m, fetch, *a, side=None, **k)[0], "outputs": len(side.outputs)})
        return made

    runner.augment_model = augment
    _quantize(model, preset, data, os.path.join(tempfile.mkdtemp(prefix="double_work_"), "q.onnx"))
    runner.augment_model = original
    if "with" not in got:
        print(f"{model} {preset}: no side fetch in the calibration pass")
        return
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    sessions = {k: ort.InferenceSession(got[k].SerializeToString(), so, providers=["CPUExecutionProvider"])
                for k in ("with", "without")}
    fetch = [o.name for o in sessions["without"].get_outputs()]
    inputs = {i.name for i in sessions["with"].get_inputs()}
    rows = {ROWS_INPUT: np.array([1, -1], np.int64)} if ROWS_INPUT in inputs else {}  # one feed a run (runner._fetch)
    feeds = [{**{k: v for k, v in f.items() if k in inputs}, **rows} for f in data]
    cpu: dict[str, list[float]] = {"with": [], "without": []}
    for _ in range(rounds):
        for k in cpu:
            t = time.process_time()
            for f in feeds:
                sessions[k].run(fetch, f)
            cpu[k].append(time.process_time() - t)
    w, wo = min(cpu["with"]), min(cpu["without"])
    print(f"| {model} | {preset} | {got['outputs']} | {len(got['with'].graph.node)} / {len(got['without'].graph.node)} | "
          f"{len(feeds)} | {w:.3f} | {wo:.3f} | {(w - wo) / len(feeds) * 1e3:.2f} | {os.getloadavg()[0]:.0f} |")


def if_gate(tensors: int = 55, runs: int = 50, rounds: int = 5) -> None:
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    def build(mode: str) -> onnx.ModelProto:
        consts = {"st": [0, 0], "en": [2 ** 62] * 2, "ax": [2, 3], "sp": [4, 9]}
        inits = [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in consts.items()]
        nodes, outs, prev = [], [], "x"
        for i in range(tensors):
            nodes.append(helper.make_node("Relu", [prev], [f"a{i}"]))
            prev = f"a{i}"
            thin = [helper.make_node("Shape", [prev], [f"s{i}"]),
                    helper.make_node("Gather", [f"s{i}", "ax"], [f"g{i}"], axis=0),
                    helper.make_node("Div", [f"g{i}", "sp"], [f"d{i}"]), helper.make_node("Add", [f"d{i}", "sp"], [f"e{i}"]),
                    helper.make_node("Slice", [prev, "st", "en", "ax", f"e{i}"], [f"t{i}"])]
            if mode == "plain":
                nodes += thin
                outs.append(f"t{i}")
            elif mode == "if":
                then = helper.make_graph(thin, f"then{i}", [], [helper.make_tensor_value_info(f"t{i}", TensorProto.FLOAT, None)])
                empty = numpy_helper.from_array(np.zeros((0, 0, 0, 0), np.float32))
                other = helper.make_graph([helper.make_node("Constant", [], [f"z{i}"], value=empty)], f"else{i}", [],
                                          [helper.make_tensor_value_info(f"z{i}", TensorProto.FLOAT, None)])
                nodes.append(helper.make_node("If", ["flag"], [f"o{i}"], then_branch=then, else_branch=other))
                outs.append(f"o{i}")
        inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 12, None])]
        if mode == "if":
            inputs.append(helper.make_tensor_value_info("flag", TensorProto.BOOL, []))
        outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in [prev, *outs]]
        return helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, initializer=inits),
                                 opset_imports=[helper.make_opsetid("", 17)])

    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    so.log_severity_level = 3
    sessions = {m: ort.InferenceSession(build(m).SerializeToString(), so, providers=["CPUExecutionProvider"])
                for m in ("none", "plain", "if")}
    x = np.random.default_rng(0).random((1, 64, 12, 80), dtype=np.float32)
    cases = (("no thinning", "none", None), ("thinning", "plain", None), ("If, false", "if", False), ("If, true", "if", True))
    ms: dict[str, list[float]] = {}
    for _ in range(rounds):
        for label, mode, flag in cases:
            feed = {"x": x} if flag is None else {"x": x, "flag": np.array(flag)}
            t = time.process_time()
            for _ in range(runs):
                sessions[mode].run(None, feed)
            ms.setdefault(label, []).append((time.process_time() - t) / runs * 1e3)
    print(f"{tensors} tensors [1, 64, 12, 80], ms a run (best of {rounds} × {runs} runs), load {os.getloadavg()[0]:.0f}:")
    for label, v in ms.items():
        print(f"| {label} | {min(v):.3f} |")


def lean_session(model: str, presets: list[str], samples: int) -> None:
    import onnx  # noqa: F401

    from quantize_stages import _data

    from onnxptq.pipeline.finish import _options
    from onnxptq.sessions import open_session, serialized

    _, data = _data(model, samples)
    tmp = tempfile.mkdtemp(prefix="double_work_")
    options = dict(_options(), threads=1)
    for preset in presets:
        out = os.path.join(tmp, f"{preset}.onnx")
        result = _quantize(model, preset, data, out)
        finish_bytes = serialized(result.model)  # what finish serializes (the in-memory model: lean is undone after the save)
        with open(out, "rb") as fh:
            delivered = fh.read()
        cpu: dict[str, list[float]] = {"finish": [], "lean": []}
        for _ in range(3):
            for key, blob in (("finish", finish_bytes), ("lean", delivered)):
                t = time.process_time()
                open_session(blob, **options)
                cpu[key].append(time.process_time() - t)
        a, b = open_session(finish_bytes, **options), open_session(delivered, **options)
        same = all(all(np.array_equal(x, y) for x, y in zip(a.run(None, f), b.run(None, f))) for f in data[:3])
        print(f"| {model} | {preset} | {len(finish_bytes) / 1e6:.2f} | {min(cpu['finish']):.3f} | {len(delivered) / 1e6:.2f} | "
              f"{min(cpu['lean']):.3f} | {min(cpu['lean']) / min(cpu['finish']):.2f} | {'yes' if same else 'NO'} | "
              f"{os.getloadavg()[0]:.0f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=("suspects", "guard-side", "if-gate", "lean-session"))
    ap.add_argument("model", nargs="?", default="rec")
    ap.add_argument("presets", nargs="?", default="BF16,MX9")
    ap.add_argument("--samples", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    logging.disable(logging.WARNING)
    presets = args.presets.split(",")
    if args.what == "suspects":
        suspects(args.model, presets, args.samples)
    elif args.what == "guard-side":
        print("| model | preset | side outputs | calibration graph nodes with / without | feeds | runs CPU s with | without "
              "| ms a feed | load |")
        print("|---|---|---:|---|---:|---:|---:|---:|---:|")
        for preset in presets:
            guard_side(args.model, preset, args.samples, args.rounds)
    elif args.what == "if-gate":
        if_gate()
    else:
        print("| model | preset | finish bytes MB | finish bytes: creation CPU s | lean file MB | lean file: creation CPU s "
              "| ratio | same outputs | load |")
        print("|---|---|---:|---:|---:|---:|---:|---|---:|")
        lean_session(args.model, presets, args.samples)


if __name__ == "__main__":
    main()
