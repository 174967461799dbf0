"""Which outputs of every zoo and outside model two floor rules reach, on float's own values.

Why: a floor rule that never applies to an output cannot change its verdict, so the false-alarm
check of a rule starts by naming the outputs it reaches (float only, the floor's kind of feeds: the
first calibration feeds, seed 1). The two rules (branch refpreset):

* kept sets count a threshold only where float has candidates on both sides of it
  (``maps.kept_agreement``), and a detector whose images decide nothing is *not judged*
  (``maps.undecided``): printed per detector-rows / two-class-map output, the thresholds counted
  before (float keeps ``MIN_KEPT`` above) and after (and leaves as many below), and ``undecided``;
* a regression output gated by a sibling two-class head (``row_gates.gated_outputs``): printed with
  the share of rows float gives the object.

    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/floor_reach.py --feeds 12 [--models a,b]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _levels_counted(r, both: bool) -> int:
    import numpy as np
    from onnxptq.analysis.maps import BAND, BAND_STEPS, MIN_KEPT

    if r.size == 0 or float(r.max()) <= 0:
        return 0
    count = 0
    for t in np.linspace(BAND[0], BAND[1], BAND_STEPS) * float(r.max()):
        kept = int(np.count_nonzero(r > t))
        count += kept >= MIN_KEPT and (not both or r.size - kept >= MIN_KEPT)
    return count


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--feeds", type=int, default=12)
    ap.add_argument("--models", default="")
    a = ap.parse_args()

    import newmodels as nm
    import numpy as np
    import onnx
    from onnxptq.analysis.floor import readings_of
    from onnxptq.analysis.maps import RareMapAgreement, undecided
    from onnxptq.analysis.row_gates import object_rows
    from onnxptq.analysis.score_rows import ScoreRows
    from testkit import zoo

    entries = [(m.name, m.path, lambda n, m=m: m.make(m.root(), n, 1)) for m in zoo.ZOO]
    entries += [(name, lambda rel=rel: nm.SRC / rel, lambda n, make=make: make(n, 1)) for name, (rel, make, _, _) in nm.MODELS.items()]
    for name, path, make in entries:
        if a.models and name not in a.models.split(","):
            continue
        try:
            model = onnx.load(str(path()))
            readings = readings_of(model)
            if not (readings["score_rows"] or readings["softmax_maps"] or readings["row_gates"]):
                print(json.dumps({"model": name, "reached": []}), flush=True)
                continue
            run, feeds = zoo.session_runner(path()), make(a.feeds)
            names = [o.name for o in model.graph.output]
            outs = [dict(zip(names, run(f))) for f in feeds]
        except Exception as exc:  # noqa: BLE001 - a model whose source is absent here: said, not fatal
            print(json.dumps({"model": name, "error": f"{type(exc).__name__}: {str(exc)[:120]}"}), flush=True)
            continue
        reached = []
        for out in sorted({*readings["score_rows"], *readings["softmax_maps"]}):
            rows = readings["score_rows"].get(out)
            collector = ScoreRows(rows) if rows is not None else RareMapAgreement()
            for o in outs:
                v = np.asarray(o[out])
                if np.issubdtype(v.dtype, np.floating) and np.isfinite(v).all():
                    collector.add(v, v)
            if not collector.valid or not collector.ref:
                reached.append({"output": out, "kind": "no such data"})
                continue
            if rows is not None:
                r = np.concatenate(collector.ref)
            else:
                ref = np.concatenate(collector.ref)
                r = ref[:, int(np.argmin(np.bincount(np.argmax(ref, -1), minlength=2)))]
            reached.append({"output": out, "kind": "detector rows" if rows is not None else "two-class map",
                            "candidates": int(r.size), "levels_before": _levels_counted(r, False),
                            "levels_after": _levels_counted(r, True), "undecided": undecided(r) is not None})
        for out, gate in sorted(readings["row_gates"].items()):
            keeps = [object_rows(o[gate], np.asarray(o[out]).shape[0]) for o in outs if np.asarray(o[out]).ndim == 2]
            share = float(np.mean(np.concatenate(keeps))) if keeps and all(k is not None for k in keeps) else None
            reached.append({"output": out, "kind": f"gated by {gate}", "object_share": share})
        print(json.dumps({"model": name, "reached": reached}), flush=True)


if __name__ == "__main__":
    main()
