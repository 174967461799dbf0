"""What onnxruntime lets a quantize overlap on a block-format model (issue 26 item 1, third round).

``python bench/session_overlap.py [--calls 25,50,100,200] [--feeds 16] [--rounds 7]`` quantizes PP-OCR cls
(the shared model, uniform random feeds) with MX9 and measures, on the saved model:

1. **the GIL while a session is built**: a session is built on a thread while the main thread counts
   in a Python loop; the loop's iterations and its longest stall say whether the build holds the GIL
   (it does not: the main thread keeps running);
2. **session creation per function call**: a chain of N calls of one of the model's activation
   quantizers (``[1, 8, 24, 96]``), CPU seconds at levels "none" and "all" (functions inlined late,
   as ``finish`` opens it), per call: linear in the calls, i.e. a cost per inlined node;
3. **runs in flight**: the feeds run one after another or two at a time
   (``sessions.run_feeds``), with and without spinning pool threads: median wall and CPU seconds
   (all threads) per pass, and the sha256 of every output of every pass (the same in all four).

Prints Markdown tables. CPU seconds are ``time.process_time`` (all threads of the process).
"""

from __future__ import annotations

import _common  # noqa: F401  (the repository root on sys.path: testkit)
import argparse
import copy
import hashlib
import logging
import statistics
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper


def _model(feeds: int) -> tuple[bytes, list[dict[str, np.ndarray]]]:
    import dataclasses

    from onnxptq import quantize
    from onnxptq.config.presets import get_preset
    from testkit.models import model_path

    path = model_path("cls")
    name = onnx.load(str(path), load_external_data=False).graph.input[0].name
    rng = np.random.default_rng(0)
    data = [{name: rng.random((1, 3, 48, 192), dtype=np.float32)} for _ in range(feeds)]
    cfg = get_preset("MX9")
    cfg = cfg.replace(calibration=dataclasses.replace(cfg.calibration, progress=False))
    out = Path(tempfile.mkdtemp(prefix="session_overlap_")) / "cls.MX9.onnx"
    quantize(path, cfg, data, out)
    return out.read_bytes(), data


def gil(data: bytes, rounds: int) -> None:
    from onnxptq.sessions import open_session

    print("| round | build alone: wall s | build on a thread: wall s | main-thread loop iterations meanwhile | longest stall s |")
    print("|---:|---:|---:|---:|---:|")
    for r in range(rounds):
        t = time.perf_counter()
        open_session(data, log_severity=3, inline_functions_first=False)
        alone = time.perf_counter() - t
        done: list[float] = []

        def build() -> None:
            t0 = time.perf_counter()
            open_session(data, log_severity=3, inline_functions_first=False)
            done.append(time.perf_counter() - t0)

        th = threading.Thread(target=build)
        th.start()
        last, stall, n = time.perf_counter(), 0.0, 0
        while not done:
            now = time.perf_counter()
            stall, last, n = max(stall, now - last), now, n + 1
        th.join()
        print(f"| {r} | {alone:.3f} | {done[0]:.3f} | {n:,} | {stall:.3f} |")


def per_call(data: bytes, calls: list[int]) -> None:
    from onnxptq.sessions import open_session

    model = onnx.load_from_string(data)
    counts = {f.name: sum(1 for n in model.graph.node if n.op_type == f.name) for f in model.functions}
    name = max(counts, key=counts.get)  # the most called quantizer
    body = next(f for f in model.functions if f.name == name)
    call = next(n for n in model.graph.node if n.op_type == name)
    inner = len(body.node) + sum(len(a.g.node) for n in body.node for a in n.attribute if a.type == onnx.AttributeProto.GRAPH)
    print(f"\n{name}: {len(body.node)} nodes in the body, {inner} with its If branches; CPU s of one session creation\n")
    print("| calls | none: s | ms per call | all: s | ms per call |")
    print("|---:|---:|---:|---:|---:|")
    for n_calls in calls:
        nodes, prev = [], "x"
        for i in range(n_calls):
            node = copy.deepcopy(call)
            del node.input[:], node.output[:]
            node.input.append(prev)
            node.output.append(f"y{i}")
            node.name = f"q{i}"
            nodes.append(node)
            prev = f"y{i}"
        graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 24, 96])],
                                  [helper.make_tensor_value_info(prev, TensorProto.FLOAT, None)])
        chain = helper.make_model(graph, opset_imports=list(model.opset_import), functions=[body])
        chain.ir_version = model.ir_version
        raw = chain.SerializeToString()
        cells = []
        for level in ("none", "all"):
            xs = []
            for _ in range(3):
                t = time.process_time()
                open_session(raw, optimization=level, log_severity=3, inline_functions_first=False)
                xs.append(time.process_time() - t)
            cells.append(f"{min(xs):.3f} | {1000 * min(xs) / n_calls:.2f}")
        print(f"| {n_calls} | " + " | ".join(cells) + " |", flush=True)


def runs(data: bytes, feeds: list[dict[str, np.ndarray]], rounds: int) -> None:
    from onnxptq.sessions import open_session, run_feeds

    print(f"\n{len(feeds)} feeds through the finish session (functions inlined late, level all); medians of {rounds} passes\n")
    print("| pool threads | runs | wall s | CPU s | sha256 of all outputs (16 hex) |")
    print("|---|---|---:|---:|---|")
    sessions = {spin: open_session(data, log_severity=3, inline_functions_first=False, spinning=spin) for spin in (True, False)}
    names = [o.name for o in sessions[True].get_outputs()]
    results: dict[tuple[bool, str], list[tuple[float, float, str]]] = {}
    for _ in range(rounds):
        for spin, session in sessions.items():
            for mode in ("one at a time", "two in flight"):
                t, c = time.perf_counter(), time.process_time()
                outs = ([session.run(names, f) for f in feeds] if mode == "one at a time" else run_feeds(session, names, feeds))
                w, cpu = time.perf_counter() - t, time.process_time() - c
                sha = hashlib.sha256(b"".join(np.ascontiguousarray(a).tobytes() for o in outs for a in o)).hexdigest()[:16]
                results.setdefault((spin, mode), []).append((w, cpu, sha))
    for (spin, mode), xs in results.items():
        shas = sorted({x[2] for x in xs})
        print(f"| {'spinning' if spin else 'no spinning'} | {mode} | {statistics.median(x[0] for x in xs):.3f} | "
              f"{statistics.median(x[1] for x in xs):.3f} | {', '.join(shas)} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", default="25,50,100,200")
    ap.add_argument("--feeds", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    logging.disable(logging.WARNING)
    data, feeds = _model(args.feeds)
    gil(data, 3)
    per_call(data, [int(c) for c in args.calls.split(",")])
    runs(data, feeds, args.rounds)


if __name__ == "__main__":
    main()
