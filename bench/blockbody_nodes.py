"""Nodes per block-quantizer call, per format, and what each body spends them on (issue 26, blockbody11).

``python bench/blockbody_nodes.py MODEL PRESET[,PRESET...] [--samples N] [--keep DIR]`` quantizes ``MODEL``
(as bench/quantize_stages.py reads it; no repair) with each preset and prints, per preset: the calls of
our functions, the nodes onnxruntime holds after inlining them (``If`` branches counted in), nodes per
call, and the op histogram over all calls (what a call runs: views, reductions, scale, rounding,
clamps, NaN/Inf handling, branches). ``--files DIR`` reads ``DIR/<preset>.onnx`` instead of quantizing.

    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/blockbody_nodes.py cls BFP16,MX9,MX6,MXINT8,MXFP8_E4M3,MXFP8_E5M2,MXFP4 --samples 4
"""

from __future__ import annotations

import _common  # noqa: F401  (the repository root on sys.path: testkit)
import argparse
import collections
import dataclasses
import logging
import os
import tempfile

import onnx


def _ops(nodes: list[onnx.NodeProto], hist: collections.Counter) -> int:
    """Count ``nodes`` into ``hist`` (If branch nodes included); returns how many."""
    total = 0
    for n in nodes:
        hist[n.op_type] += 1
        total += 1
        for at in n.attribute:
            if at.type == onnx.AttributeProto.GRAPH:
                total += _ops(list(at.g.node), hist)
    return total


def count(model: onnx.ModelProto) -> dict:
    """Calls, nodes per call and the op histogram of ``model``'s calls to its local functions."""
    functions = {(f.domain, f.name): f for f in model.functions}
    hist: collections.Counter = collections.Counter()
    calls, nodes, bodies = 0, 0, set()
    for n in model.graph.node:
        f = functions.get((n.domain, n.op_type))
        if f is None:
            continue
        calls += 1
        bodies.add(f.name)
        nodes += _ops(list(f.node), hist)
    return {"calls": calls, "definitions": len(bodies), "call_nodes": nodes, "outer": len(model.graph.node),
            "per_call": nodes / calls if calls else 0.0, "hist": hist}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("presets")
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--keep", help="write the quantized files here (DIR/<preset>.onnx)")
    ap.add_argument("--files", help="read DIR/<preset>.onnx instead of quantizing")
    args = ap.parse_args()
    presets = args.presets.split(",")
    if args.files is None:
        from onnxptq import quantize
        from onnxptq.config.presets import get_preset

        import quantize_stages

        path, data = quantize_stages._data(args.model, args.samples)
        logging.disable(logging.WARNING)
        out_dir = args.keep or tempfile.mkdtemp(prefix="blockbody_nodes_")
        os.makedirs(out_dir, exist_ok=True)
    print(f"## {args.model}: our function calls after inlining")
    print("| preset | outer nodes | calls | definitions | nodes in calls | per call | top ops over all calls |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for preset in presets:
        if args.files is None:
            cfg = get_preset(preset)
            cfg = cfg.replace(calibration=dataclasses.replace(cfg.calibration, progress=False), repair=False)
            out = os.path.join(out_dir, f"{preset}.onnx")
            quantize(path, cfg, data, out)
        else:
            out = os.path.join(args.files, f"{preset}.onnx")
        c = count(onnx.load(out))
        top = ", ".join(f"{k} {v}" for k, v in c["hist"].most_common(14))
        print(f"| {preset} | {c['outer']} | {c['calls']} | {c['definitions']} | {c['call_nodes']} | {c['per_call']:.1f} "
              f"| {top} |", flush=True)


if __name__ == "__main__":
    main()
