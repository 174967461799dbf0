"""Two trees' quantized files compute the same bits (issue 26, blockhint15): a change that alters the graph
but not the values (the bodies a size hint picks) is shown equal on feeds, not by file hashes.

``python bench/blockbody_bits.py MODEL DIR_A DIR_B PRESET[,PRESET...] [--feeds N]`` reads
``DIR/<preset>.onnx`` from both directories and runs each on ``N`` feeds of ``MODEL`` as
bench/quantize_stages.py makes them (PP-OCR cls: lines rendered by ``testkit.ocr.render_cls``, seed 7), a batch
of the first 8 (where the model takes a batch), each feed with ±Inf, NaN, -0 and subnormals written in, and for
an image input a feed three times as wide (larger than any calibration saw); prints per preset how many
feeds gave every output equal bit for bit (NaN where NaN).

    PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 python bench/blockbody_bits.py cls base_dir new_dir BFP16,MX9,MXINT8
"""

from __future__ import annotations

import _common  # noqa: F401  (the repository root on sys.path: testkit)
import argparse
import os

import numpy as np

from blockbody_nodes import _same_bits  # every output equal bit for bit, NaN where NaN


def _session(path: str):
    import onnxruntime as ort

    o = ort.SessionOptions()
    o.intra_op_num_threads = 1
    o.log_severity_level = 3
    return ort.InferenceSession(path, o, providers=["CPUExecutionProvider"])


def _odd(x: np.ndarray) -> np.ndarray:
    y = x.copy().reshape(-1)
    y[::97], y[5::89], y[7::53], y[3::61], y[11::71] = np.inf, np.nan, -0.0, 1e-40, -np.inf
    return y.reshape(x.shape)


def feeds_for(model: str, n: int, names: list[str]) -> list[dict[str, np.ndarray]]:
    """``n`` feeds of ``model`` and the harder ones the module doc lists."""
    import quantize_stages

    if model == "cls":
        from testkit import ocr

        imgs, _ = ocr.render_cls(n, seed=7)
        base = [{names[0]: imgs[i:i + 1]} for i in range(n)]
    else:
        _, data = quantize_stages._data(model, n)
        base = [{k: v for k, v in d.items() if k in names} for d in data[:n]]
    out = list(base)
    first = base[0]
    if (len(base) >= 8 and all(isinstance(v, np.ndarray) and v.ndim >= 1 and v.shape[0] == 1 for v in first.values())
            and all(b[k].shape == first[k].shape for b in base[:8] for k in first)):
        out.append({k: np.concatenate([b[k] for b in base[:8]]) for k in first})  # a batch (may be refused: skipped)
    out += [{k: (_odd(v) if v.dtype.kind == "f" else v) for k, v in f.items()} for f in base[:4]]
    if len(first) == 1 and next(iter(first.values())).ndim == 4:  # an image: three times as wide
        k, v = next(iter(first.items()))
        out.append({k: np.concatenate([v] * 3, axis=3)})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("presets")
    ap.add_argument("--feeds", type=int, default=32)
    args = ap.parse_args()
    for preset in args.presets.split(","):
        sa, sb = (_session(os.path.join(d, f"{preset}.onnx")) for d in (args.a, args.b))
        names = [i.name for i in sa.get_inputs()]
        same = ran = refused = 0
        for f in feeds_for(args.model, args.feeds, names):
            try:
                ya = sa.run(None, f)
            except Exception:  # noqa: BLE001 - a feed the model does not take (a fixed batch)
                refused += 1
                continue
            ran += 1
            same += _same_bits(ya, sb.run(None, f))
        print(f"{args.model} {preset}: {same} of {ran} feeds equal bit for bit" + (f" ({refused} refused)" if refused else ""),
              flush=True)


if __name__ == "__main__":
    main()
