"""Where a block format loses a net of narrow convolutions (issue 27, degen21): per-tensor float-back and class
ablations of a plain build (``repair=False``) of one bench/newmodels.py row, read by its task metric and by each
fresh feed's largest |output difference| against float (median over feeds), which moves long before a 4 % tempo
or a top-3 set does.

Variants over the plain plan: every activation float (``acts_float``: the built file's activation quantizer calls
replaced by Identity), every weight BF16 (``w_bf16``), every bias BF16 (``b_bf16``), every activation MXINT8 (``acts_int8``), and per activation
tensor: that one float (``--each``). Also ``axis=N`` variants: every Conv input whose planned block axis has known
length below the block size blocked along axis N instead (the plan patched after make_plan; bench only).

    NEWMODELS30_SRC=/work/cache/newmodels30/src NEWMODELS29_SRC=/work/cache/newmodels29/src \\
    PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 nice -n 5 python bench/short_axis_ablation.py tempocnn_fcn \\
        --presets MXINT8,MXFP8_E4M3 --calib 40 --fresh 48 --each
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
from typing import Any

import numpy as np
import onnx

import _common  # noqa: F401  (the repository root on sys.path)

import newmodels as nm
from mxfp8_floatback import activation_calls, float_back
from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config
from onnxptq.config.schema import TensorQuant
from testkit import zoo

BF16 = TensorQuant(format="bf16")


def max_errors(ref: list, test: Any, feeds: list) -> np.ndarray:
    """Each feed's largest |difference| of the first output against float's."""
    return np.array([float(np.abs(np.asarray(test(f)[0], np.float64) - np.asarray(r[0], np.float64)).max()) for f, r in zip(feeds, ref)])


def read(model: Any, ref: list, feeds: list, metric: Any, ref_run: Any) -> tuple[float, float]:
    """(task metric, median max |error|) of ``model`` on ``feeds``."""
    test = zoo.session_runner(model)
    got = {id(f): test(f) for f in feeds}
    known = {id(f): r for f, r in zip(feeds, ref)}
    agree = metric(lambda f: known.get(id(f)) or ref_run(f), lambda f: got.get(id(f)) or test(f), feeds, None)
    return float(agree), float(np.median(max_errors(ref, lambda f: got[id(f)], feeds)))


def kernel_axis(model: onnx.ModelProto, name: str, block: int) -> int | None:
    """For a tensor every reader of which is a Conv whose per-group input channels (the weight's dims[1]) are fewer
    than ``block`` and fewer than its kernel's largest spatial extent: that spatial axis (negative), else None."""
    inits = {i.name: tuple(i.dims) for i in model.graph.initializer}
    axes = set()
    for n in model.graph.node:
        if name not in n.input:
            continue
        w = inits.get(n.input[1]) if n.op_type == "Conv" and n.input[0] == name and len(n.input) > 1 else None
        if w is None or len(w) < 3:
            return None
        spatial = w[2:]
        k = max(range(len(spatial)), key=lambda i: spatial[i])
        if not (w[1] < block and w[1] < spatial[k]):
            return None
        axes.add(k - len(spatial))
    return axes.pop() if len(axes) == 1 else None


def with_conv_input_axis(axis: int | None, build: Any) -> Any:
    """``build()`` with every block-format activation a Conv reads blocked along ``axis`` (None: along
    :func:`kernel_axis` where it gives one; the plan patched after make_plan: a measurement of what the axis does,
    not a plan rule)."""
    import onnxptq.pipeline.calibrate as calibrate

    original = calibrate.make_plan

    def patched(model: onnx.ModelProto, cfg: Any) -> Any:
        plan = original(model, cfg)
        convs = {n.name for n in model.graph.node if n.op_type == "Conv"}
        for t in plan.tensors.values():
            if t.role == "activation" and t.quant.format in ("mx", "bfp") and t.consumers and set(t.consumers) <= convs:
                if axis is not None:
                    t.axis = axis
                elif (k := kernel_axis(model, t.name, int(t.quant.attr_dict.get("block_size", 32)))) is not None:
                    t.axis = k
        return plan

    calibrate.make_plan = patched
    try:
        return build()
    finally:
        calibrate.make_plan = original


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("key")
    for option, kind, default in (("--presets", str, "MXINT8,MXFP8_E4M3"), ("--calib", int, 40), ("--fresh", int, 48),
                                  ("--fresh-seed", int, 1000), ("--variants", str, "plain,acts_float,w_bf16,acts_int8")):
        ap.add_argument(option, type=kind, default=default)
    ap.add_argument("--each", action="store_true")
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)
    rel, make, _, metric = nm.MODELS[args.key]
    path = str(rel)
    calib, fresh = make(args.calib, 1), make(args.fresh, args.fresh_seed)
    ref_run = zoo.session_runner(path)
    ref = [ref_run(f) for f in fresh]
    print(f"{args.key}: {args.calib} calibration feeds (seed 1), {args.fresh} fresh (seed {args.fresh_seed}), load {os.getloadavg()[0]:.1f}")
    print("| preset | variant | task metric | max |error| median |")
    print("| --- | --- | --- | --- |")
    for preset in args.presets.split(","):
        base = dataclasses.replace(resolve_config(preset), repair=False)
        plain = quantize(path, base, calib)
        acts = [n for n, t in plain.plan.tensors.items() if t.role == "activation"]
        weights = [n for n, t in plain.plan.tensors.items() if t.role == "weight"]
        biases = [n for n, t in plain.plan.tensors.items() if t.role == "bias"]
        for v in args.variants.split(","):
            if v == "plain":
                model = plain.model
            elif v == "acts_float":
                model = float_back(plain.model, set(activation_calls(plain.model)))
            elif v == "w_bf16":
                model = quantize(path, base.replace(tensor_overrides={n: BF16 for n in weights}), calib).model
            elif v == "b_bf16":
                model = quantize(path, base.replace(tensor_overrides={n: BF16 for n in biases}), calib).model
            elif v == "kernel_axis":
                model = with_conv_input_axis(None, lambda: quantize(path, base, calib)).model
            elif v.startswith("axis="):
                model = with_conv_input_axis(int(v.split("=")[1]), lambda: quantize(path, base, calib)).model
            elif v == "acts_int8":
                over = {n: plain.plan.tensors[n].quant.with_(attrs={**dict(plain.plan.tensors[n].quant.attrs), "element_dtype": "int8",
                                                                       "scale_search": 0}) for n in acts}
                model = quantize(path, base.replace(tensor_overrides=over), calib).model
            else:
                raise SystemExit(f"unknown variant {v!r}")
            a, e = read(model, ref, fresh, metric, ref_run)
            print(f"| {preset} | {v} | {a:.4f} | {e:.4f} |", flush=True)
        if args.each:
            for name in activation_calls(plain.model):
                a, e = read(float_back(plain.model, {name}), ref, fresh, metric, ref_run)
                t = plain.plan.tensors.get(name)
                print(f"| {preset} | only `{name}` float (axis {t.axis if t else '?'}) | {a:.4f} | {e:.4f} |", flush=True)


if __name__ == "__main__":
    main()
