"""A mask below the floor on its figure with its bound across it: how a second look on the reserve decides it, against
fresh pages, and what acting costs (issue 27 item 2, branch repair19; pipeline/second_look.py, analysis/floor.below_on_figure).

tests/test_floor_maps.py's planted text detector (``Conv_2``'s channel 0 weights ``outlier`` times the others) under
A8W8 on ``n`` calibration pages of each seed (with 46 or more the floor holds a reserve out beside its first 8 held-out
pages: every third page from the 25th, up to 56), quantized with repair off (``plain``) and with the defaults. Each
delivered model is read by the floor's own ``measure`` on ``fresh`` pages of another seed (99): the truth. One JSON
line per (outlier, seed): the first look's state and figure (the branch keeps it in ``Verdict.first_below``; on a
tree without it, the verdict as judged is the first look), the second look's, the reserve's pages judged alone (the
rule not adopted: the first look's pages left out), the fresh figure and its state, CPU s, nodes stepped up or kept
float, the file's bytes.

    PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 nice -n 5 python bench/repair_second_look.py 150,151,152,153,154 \\
        0,1,2,3,4,5,6,7 96 200 > /work/cache/repair19/look96.jsonl
    PYTHONPATH=src:.:bench ... python bench/repair_second_look.py 150,151,152,153 8,...,31 96 200 plain   # verdicts only
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

import _common  # noqa: F401  (the repository root on sys.path)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def _state(check) -> str:
    return ("below" if getattr(check, "below", False) else "broken" if not check.ok
            else "below on figure" if check.top1_unjudged and check.mask_bound is not None and check.mask_bound.iou < check.mask_floor
            else "not judged" if check.top1_unjudged else "could not confirm" if check.unconfirmed is not None else "holds")


def _figure(check) -> dict:
    b = check.mask_bound
    return {"state": _state(check), "figure": round(b.iou, 4) if b else None,
            "bound": (round(b.low, 4), round(b.high, 4)) if b else None, "pages": b.pages if b else None}


def reserve_pages(feeds: list, first: int = 8, most: int = 56) -> list:
    """The pages calibrate.reserve_stream holds out past the first ``3 × first``: every third, up to ``most``."""
    return feeds[3 * first::3][:most]


def main(argv: list[str] | None = None) -> int:
    import onnxruntime as ort

    from onnxptq.analysis.floor import floor_for, measure
    from onnxptq.api import quantize
    from test_floor_maps import A8W8, pages, text_detector

    argv = sys.argv[1:] if argv is None else argv
    outliers, seeds = [float(v) for v in argv[0].split(",")], [int(v) for v in argv[1].split(",")]
    n, fresh_n = int(argv[2]), int(argv[3])
    runs = argv[4].split(",") if len(argv) > 4 else ["plain", "default"]  # "plain": the verdicts alone, no repair's cost
    logging.basicConfig(level=logging.ERROR)
    fresh = pages(fresh_n, seed=99)

    def run(model, feeds):
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        return [{"prob": session.run(None, f)[0]} for f in feeds]

    for outlier in outliers:
        model = text_detector(outlier=outlier)
        ref = run(model, fresh)
        for seed in seeds:
            data = pages(n, seed=seed)
            reserve = reserve_pages(data)
            row = {"outlier": outlier, "seed": seed, "pages": n, "reserve": len(reserve) if len(reserve) >= 8 else 0}
            for label, cfg in (("plain", A8W8.replace(repair=False)), ("default", A8W8)):
                if label not in runs:
                    continue
                t = time.process_time()
                result = quantize(model, cfg, data)
                cpu = time.process_time() - t
                verdict, rep = result.floor, result.repair or {}
                check = verdict.outputs["prob"]
                first = getattr(verdict, "first_below", {}).get("prob")
                judged = measure(ref, run(result.model, fresh), floor_for(result.config), prob_maps={"prob": ()}).outputs["prob"]
                entry = {"first": _figure(first) if first is not None else None, "judged": _figure(check),
                         "samples": verdict.samples, "fresh": round(judged.mask_bound.iou, 4) if judged.mask_bound else None,
                         "fresh_state": "broken" if not judged.ok else "not judged" if judged.top1_unjudged else "holds",
                         "cpu": round(cpu, 2), "stepped": len(rep.get("stepped_up") or {}),
                         "kept": len(rep.get("kept_float") or {}), "held_on_second_look": rep.get("held_on_second_look"),
                         "size": len(result.model.SerializeToString())}
                if label == "plain" and row["reserve"]:
                    alone = measure(run(model, reserve), run(result.model, reserve), floor_for(result.config),
                                    prob_maps={"prob": ()}).outputs["prob"]
                    entry["reserve_alone"] = _figure(alone)
                row[label] = entry
            print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
