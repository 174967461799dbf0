"""Round 28: what the floor's arg-max class-mask judgement (analysis/class_maps.ArgMaxMasks) would read on BiSeNet's
per-pixel logits, had it recognised them (it recognises a simplex only: probabilities summing to 1 along an axis; BiSeNet
ends in a Conv and a bilinear Resize, no softmax, so its [1, 19, 512, 512] output is judged by its cosine alone).

    NEWMODELS28_SRC=/work/cache/newmodels28/src PYTHONPATH=src:.:bench python bench/round28_classmaps.py QUANTIZED.onnx ...
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import newmodels as nm
from onnxptq.analysis.class_maps import ArgMaxMasks
from onnxptq.analysis.maps import MIN_MASK
from testkit import zoo


def softmax(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def main() -> None:
    feeds = nm.face_parsing_feeds(16, 1000)
    ref = zoo.session_runner(Path(nm.MODELS["face_parsing"][0]))
    refs = [ref(f)[0] for f in feeds]
    for path in sys.argv[1:]:
        run = zoo.session_runner(Path(path))
        masks = ArgMaxMasks(axis=1, classes=19)
        pix = []
        for f, r in zip(feeds, refs):
            g = run(f)[0]
            masks.add(softmax(r, 1), softmax(g, 1))
            pix.append(np.mean(r.argmax(1) == g.argmax(1)))
        bg = int(np.argmax(masks.counts))
        iou = {c: masks.inter[c] / masks.union[c] for c in range(19) if c != bg and masks.union[c] >= MIN_MASK}
        worst = min(iou, key=iou.get)
        print(f"{Path(path).name}: pixels' class equal to float's {np.mean(pix):.4f}; per-class IoU (pooled, 16 portraits) "
              + ", ".join(f"{c}: {v:.3f}" for c, v in sorted(iou.items())) + f"; worst class {worst} ({iou[worst]:.3f})")


if __name__ == "__main__":
    main()
