"""How often a mask below the floor on its figure, its bound straddling it, reads below on fresh pages, and what acting
on it costs (issue 27 item 2, branch repair18; analysis/floor.below_on_figure).

tests/test_floor_maps.py's planted text detector (``Conv_2``'s channel 0 weights ``outlier`` times the others, that
channel as much weaker: float unchanged) under A8W8 at outliers near the floor's edge, on 24 calibration pages of each
seed (8 held out + 8 calibration pages judged), quantized with repair off (``plain``: the verdict as judged, its
figure and bound) and with the defaults; each delivered model read by the floor's own ``measure`` on ``fresh`` pages of
another seed (99). One JSON line per (outlier, seed): per run the verdict's state (``below``: acted on as broken;
``not judged``: the bound straddles with the figure at or above the floor), figure, bound, the fresh figure and its
state, CPU s, nodes stepped up or kept float and the file's bytes.

    PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 nice -n 5 python bench/repair_below.py 149,150,151,152,153,154,155 \\
        0,1,2,3,4,5,6,7 200 > /work/cache/repair18/planted_sweep2.jsonl
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

import _common  # noqa: F401  (the repository root on sys.path)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def main(argv: list[str] | None = None) -> int:
    import onnxruntime as ort

    from onnxptq.analysis.floor import floor_for, measure
    from onnxptq.api import quantize
    from test_floor_maps import A8W8, pages, text_detector

    argv = sys.argv[1:] if argv is None else argv
    outliers, seeds, fresh_n = [float(v) for v in argv[0].split(",")], [int(v) for v in argv[1].split(",")], int(argv[2])
    logging.basicConfig(level=logging.ERROR)
    fresh = pages(fresh_n, seed=99)

    def run(model):
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        return [{"prob": session.run(None, f)[0]} for f in fresh]

    for outlier in outliers:
        model = text_detector(outlier=outlier)
        ref = run(model)
        for seed in seeds:
            row = {"outlier": outlier, "seed": seed}
            for label, cfg in (("plain", A8W8.replace(repair=False)), ("default", A8W8)):
                t = time.process_time()
                result = quantize(model, cfg, pages(24, seed=seed))
                cpu = time.process_time() - t
                check, rep = result.floor.outputs["prob"], result.repair or {}
                bound = check.mask_bound
                judged = measure(ref, run(result.model), floor_for(result.config), prob_maps={"prob": ()}).outputs["prob"]
                state = ("below" if getattr(check, "below", False) else "broken" if not check.ok
                         else "not judged" if check.top1_unjudged else "holds")
                row[label] = {"state": state, "figure": round(bound.iou, 4) if bound else None,
                              "bound": (round(bound.low, 4), round(bound.high, 4)) if bound else None,
                              "fresh": round(judged.mask_bound.iou, 4) if judged.mask_bound else None,
                              "fresh_state": "broken" if not judged.ok else "not judged" if judged.top1_unjudged else "holds",
                              "cpu": round(cpu, 2), "stepped": len(rep.get("stepped_up") or {}),
                              "kept": len(rep.get("kept_float") or {}), "size": len(result.model.SerializeToString())}
            print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
