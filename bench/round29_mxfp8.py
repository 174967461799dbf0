"""Round 29: where musicnn's MXFP8_E4M3 error comes from. The tags' probability error against float (each patch's
largest |difference| over the 50 tags: median and worst over 24 held-out patches) and the top-3 set kept, with repair
off, for: groups of nodes kept float (``nodes_to_exclude``), each convolution alone kept float or alone quantized
(``--each``), and the MX activations' exponent rule (``--scale-search``: OCP's, and one up everywhere).

    NEWMODELS29_SRC=/work/cache/newmodels29/src PYTHONPATH=src:.:bench python bench/round29_mxfp8.py musicnn_mtt \
        [--presets MXFP8_E4M3,MXINT8] [--each] [--scale-search]
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import tempfile
from pathlib import Path

import numpy as np
import onnx

import newmodels as nm
from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config
from testkit import zoo


def _groups(model: onnx.ModelProto, each: bool) -> dict[str, tuple[str, ...]]:
    """Named sets of nodes to keep float."""
    ops: dict[str, list[str]] = collections.defaultdict(list)
    for n in model.graph.node:
        ops[n.op_type].append(n.name)
    convs = ops["Conv"]
    if each:
        return {**{f"only {c} float": (c,) for c in convs},
                **{f"every Conv but {c} float": tuple(x for x in convs if x != c) for c in convs}}
    return {"none": (), "BatchNormalization": tuple(ops["BatchNormalization"]), "MatMul": tuple(ops["MatMul"]),
            "Conv (all)": tuple(convs), "first half of the Convs": tuple(convs[:len(convs) // 2]),
            "second half of the Convs": tuple(convs[len(convs) // 2:])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("key")
    ap.add_argument("--presets", default="MXFP8_E4M3")
    ap.add_argument("--each", action="store_true")
    ap.add_argument("--scale-search", action="store_true")
    args = ap.parse_args()
    path = nm.MODELS[args.key][0]
    model = onnx.load(path)
    calib, held = nm.musicnn_feeds(40, 1), nm.musicnn_feeds(24, 1000)
    ref = zoo.session_runner(Path(path))
    r = np.array([ref(f)[0][0] for f in held])
    variants = ([("OCP's exponent", {"mx_activation_scale_search": 0}), ("one up everywhere", {"mx_activation_scale_search": 3})]
                if args.scale_search else [(g, {"nodes_to_exclude": names}) for g, names in _groups(model, args.each).items()])
    print("| model | preset | kept float / rule | error median | error max | top-3 kept (24) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for preset in args.presets.split(","):
        for label, change in variants:
            cfg = dataclasses.replace(resolve_config(preset), repair=False, **change)
            with tempfile.TemporaryDirectory() as d:
                out = Path(d) / "q.onnx"
                quantize(model, cfg, calib, output=out)
                test = zoo.session_runner(out)
                q = np.array([test(f)[0][0] for f in held])
            err = np.abs(q - r).max(axis=1)
            top3 = np.mean([set(np.argsort(a)[-3:]) == set(np.argsort(b)[-3:]) for a, b in zip(r, q)])
            print(f"| {args.key} | {preset} | {label} | {np.median(err):.4f} | {err.max():.4f} | {top3:.3f} |", flush=True)


if __name__ == "__main__":
    main()
