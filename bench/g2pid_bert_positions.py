"""Where g2pid_bert's flips against float are, by position kind, and what the reads judgement says
on each kind (bench/RESULTS.md, "The reads advisory on a masked-LM's unread positions").

g2p-id reads its character BERT only at the masked positions (every 'e'); the floor's reads
advisory judges every position of a row. Per preset (the quantized models ``bench/newmodels.py
--out-dir`` wrote), on the first 12 calibration feeds (seed 1, the feeds the floor's held-out
samples come from): flips at padding / plain-letter / masked positions, split by float's
probability margin (under ``class_scores.UNSURE`` or not), and the reads judgement
(``class_scores.judge_positions``) on every position, without padding, without padding and the
float-unsure positions, and on the masked positions alone.

    PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 nice -n 5 python bench/g2pid_bert_positions.py --models-dir /work/cache/padmask/out_after
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))

PAD, MASK, SCHWA = 0, 30, 4  # token2id: "" (the pad token), "[mask]", "ə" (float's background class)
PRESETS = "BF16,FP16,A16W8,A8W8,BFP16,MX9,MXINT8,MXFP8_E4M3"


def main() -> None:
    import newmodels as nm
    from onnxptq.analysis.class_scores import UNSURE, judge_positions
    from onnxptq.sessions import open_session

    ap = argparse.ArgumentParser()
    ap.add_argument("--models-dir", required=True, help="where g2pid_bert.<PRESET>.onnx are")
    ap.add_argument("--presets", default=PRESETS)
    ap.add_argument("--feeds", type=int, default=12)
    a = ap.parse_args()
    rel = nm.MODELS["g2pid_bert"][0]
    float_run = open_session(onnx.load(str(nm.SRC / rel)))
    feeds = nm.g2pid_bert_feeds(a.feeds, 1)
    refs = [float_run.run(None, f)[0] for f in feeds]
    ids = [f["input_1"] for f in feeds]
    kinds = [np.where(i == PAD, "padding", np.where(i == MASK, "masked", "letter")) for i in ids]
    print(f"| preset | flips at padding (sure / unsure) | at letters (sure / unsure) | at masked (sure / unsure) | "
          f"reads: every position | no padding | no padding, no unsure | masked only |")
    print("|---|---|---|---|---|---|---|---|")
    for preset in a.presets.split(","):
        path = Path(a.models_dir) / f"g2pid_bert.{preset}.onnx"
        if not path.exists():
            continue
        run = open_session(onnx.load(str(path)))
        gots = [run.run(None, f)[0] for f in feeds]
        cells = []
        for kind in ("padding", "letter", "masked"):
            counts = {True: [0, 0], False: [0, 0]}
            for r, g, k in zip(refs, gots, kinds):
                top2 = np.sort(r, -1)[..., -2:]
                sure = top2[..., 1] - top2[..., 0] >= UNSURE
                flip = np.argmax(r, -1) != np.argmax(g, -1)
                for s in (True, False):
                    m = (k == kind) & (sure == s)
                    counts[s][0] += int((flip & m).sum())
                    counts[s][1] += int(m.sum())
            cells.append(f"{counts[True][0]} of {counts[True][1]} / {counts[False][0]} of {counts[False][1]}")
        for keep, unsure_out in ((lambda i: np.ones_like(i, bool), False), (lambda i: i != PAD, False),
                                 (lambda i: i != PAD, True), (lambda i: i == MASK, False)):
            rs, gs = [], []
            for r, g, i in zip(refs, gots, ids):
                k = keep(i)[..., None]
                if unsure_out:
                    top2 = np.sort(r, -1)[..., -2:]
                    k = k & (top2[..., 1] - top2[..., 0] >= UNSURE)[..., None]
                one = np.zeros_like(r)
                one[..., SCHWA] = 1.0  # a position left out: float's background class in both, no decision
                rs.append(np.where(k, r, one))
                gs.append(np.where(k, g, one))
            p = judge_positions(rs, gs)
            cells.append("-" if p is None else f"{p.agreement:.4f} ({p.flipped} of {p.positions})")
        print(f"| {preset} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
