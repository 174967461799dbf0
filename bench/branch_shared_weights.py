"""A model whose If branches read the same main-graph weights: file size ÷ fp32 per preset, and the
outputs on held-out feeds saved so two trees can be compared bit for bit.

Why: silero VAD's two LSTM branches each slice/concat/unsqueeze the one set of main-graph LSTM
weights; folded per branch, the delivered file held every LSTM weight twice (fuzz17: BF16 0.71x fp32
where ~0.5x is the format's share). Run once per tree (``--tag``), then ``--compare`` the two tags:
the sizes side by side and whether every preset's outputs are identical.

    PYTHONPATH=<tree>/src:.:bench OMP_NUM_THREADS=1 nice -n 5 python bench/branch_shared_weights.py \
        --tag main --out-dir /work/cache/x --presets BF16,FP16,BFP16,MX9,MXINT8,A8W8
    python bench/branch_shared_weights.py --out-dir /work/cache/x --compare main,branch --presets ...
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from pathlib import Path

import _common  # noqa: F401 - the repository root (testkit/, bench/) on sys.path
import numpy as np

PRESETS = "BF16,FP16,BFP16,MX9,MXINT8,MXFP8_E4M3,A8W8"


def run(model: str, tag: str, presets: list[str], out_dir: Path, held: int) -> None:
    """Quantize ``model`` (zoo name) with defaults per preset; write the file, its held-out outputs
    and one JSON row per preset under ``out_dir``."""
    import onnxruntime as ort

    import onnxptq
    from testkit import zoo

    logging.disable(logging.WARNING)
    m = zoo.get(model)
    path = m.path()
    cal = m.samples("calibration")
    feeds = m.samples("heldout")[:held]
    fp32 = os.path.getsize(path)
    rows = []
    for preset in presets:
        out = out_dir / f"{model}_{tag}_{preset}.onnx"
        t = time.perf_counter()
        res = onnxptq.quantize(str(path), preset, cal, str(out))
        wall = time.perf_counter() - t
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        sess = ort.InferenceSession(str(out), so, providers=["CPUExecutionProvider"])
        ys = [np.stack([sess.run(None, f)[i] for f in feeds]) for i in range(len(sess.get_outputs()))]
        np.savez(out_dir / f"{model}_{tag}_{preset}.npz", *ys)
        row = {"preset": preset, "bytes": os.path.getsize(out), "fp32": fp32,
               "ratio": os.path.getsize(out) / fp32, "wall_s": round(wall, 1),
               "floor_ok": None if res.floor is None else bool(res.floor.ok)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    (out_dir / f"{model}_{tag}.json").write_text(json.dumps(rows, indent=1))


def compare(model: str, tags: list[str], presets: list[str], out_dir: Path) -> None:
    """Print a Markdown table: each tag's file ratio per preset and whether the outputs are identical."""
    a, b = tags
    rows = {t: {r["preset"]: r for r in json.loads((out_dir / f"{model}_{t}.json").read_text())} for t in tags}
    print(f"| preset | {a} bytes | {a} ÷ fp32 | {b} bytes | {b} ÷ fp32 | outputs |")
    print("| --- | --- | --- | --- | --- | --- |")
    for p in presets:
        x = np.load(out_dir / f"{model}_{a}_{p}.npz")
        y = np.load(out_dir / f"{model}_{b}_{p}.npz")
        same = all(np.array_equal(x[k], y[k]) for k in x.files) and x.files == y.files
        ra, rb = rows[a][p], rows[b][p]
        print(f"| {p} | {ra['bytes']} | {ra['ratio']:.3f} | {rb['bytes']} | {rb['ratio']:.3f} | "
              f"{'bit-identical' if same else 'DIFFER'} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="silero_half")
    ap.add_argument("--tag", help="name of this tree's run")
    ap.add_argument("--presets", default=PRESETS)
    ap.add_argument("--out-dir", type=Path, required=True)
    ap.add_argument("--held", type=int, default=64, help="held-out feeds whose outputs are saved")
    ap.add_argument("--compare", help="two tags: print their table")
    args = ap.parse_args()
    presets = args.presets.split(",")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    if args.compare:
        compare(args.model, args.compare.split(","), presets, args.out_dir)
    else:
        if not args.tag:
            ap.error("--tag names this run (or give --compare)")
        run(args.model, args.tag, presets, args.out_dir, args.held)


if __name__ == "__main__":
    main()
