"""DAT-light x2's quantized file sizes with the fold-group growth rule off and on (foldgrow16).

Quantizes the model once per preset and rule setting (repair off: it does not touch folding, and
the model's repair builds take minutes each), prints each file's size over the float file's, and
the outputs' largest difference between the two settings and against float on the calibration
tiles (smooth synthetic 64x64 pictures: the file sizes do not depend on them).

    PYTHONPATH=src python bench/fold_shared_growth_dat.py /work/cache/newmodels26/src/round26_onnx/dat_light_x2.onnx \
        --presets BF16 MXINT8 --out /work/cache/foldgrow16
"""

from __future__ import annotations

import argparse
import importlib
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

import onnxptq

fc = importlib.import_module("onnxptq.graph.passes.fold_constants")


def _tiles(n: int, shape: tuple[int, ...]) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(26)
    b, c, h, w = shape
    out = []
    for _ in range(n):
        coarse = rng.uniform(0, 1, (b, c, h // 8, w // 8)).astype(np.float32)
        out.append(np.repeat(np.repeat(coarse, 8, axis=2), 8, axis=3)
                   + rng.normal(0, 0.02, (b, c, h, w)).astype(np.float32))
    return out


def _run(path: Path, name: str, xs: list[np.ndarray]) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return [sess.run(None, {name: x})[0] for x in xs]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", type=Path)
    ap.add_argument("--presets", nargs="+", default=["BF16", "MXINT8"])
    ap.add_argument("--samples", type=int, default=2)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    model = onnx.load(str(args.model))
    inp = model.graph.input[0]
    shape = tuple(d.dim_value for d in inp.type.tensor_type.shape.dim)
    xs = _tiles(args.samples, shape)
    feeds = [{inp.name: x} for x in xs]
    float_size = args.model.stat().st_size
    ref = _run(args.model, inp.name, xs)
    print(f"float file {float_size} B")
    for preset in args.presets:
        outs = {}
        for label, shared in (("off", None), ("on", fc.SHARED_GROWTH)):
            saved, fc.SHARED_GROWTH = fc.SHARED_GROWTH, shared
            path = args.out / f"dat.{preset}.rule_{label}.onnx"
            t0, c0 = time.time(), time.process_time()
            try:
                onnxptq.quantize(model, onnxptq.get_preset(preset).replace(repair=False), feeds, output=str(path))
            finally:
                fc.SHARED_GROWTH = saved
            outs[label] = _run(path, inp.name, xs)
            err = max(float(np.abs(a - r).max()) for a, r in zip(outs[label], ref))
            print(f"{preset} rule {label}: {path.stat().st_size} B = {path.stat().st_size / float_size:.3f}x float; "
                  f"max |out - float| {err:.3g}; {time.time() - t0:.0f} s wall, {time.process_time() - c0:.0f} CPU s",
                  flush=True)
        same = all(np.array_equal(a, b) for a, b in zip(outs["off"], outs["on"]))
        diff = max(float(np.abs(a - b).max()) for a, b in zip(outs["off"], outs["on"]))
        print(f"{preset}: outputs rule off vs on bit-identical: {same}; max difference {diff:.3g}", flush=True)


if __name__ == "__main__":
    main()
