"""plan/peak_nms and plan/zero_guards on every model the project runs: which ones they change.

For each bench/newmodels.py model (rounds 1-8 and later), zoo model and /work/shared/models file:
the comparisons ``plan.peak_nms.peak_suppressions`` finds (a tensor compared with an
order-preserving selection of itself) and the divisors ``plan.zero_guards.guarded_divisors`` finds
(a value plus a zero guard derived from it), with how many tensors each keeps float. A model where
they find none gets the plan it had: the rules remove nothing from the plan and add no reason.

Read on the models as shipped (not prepared): preparation folds constants and drops Identity nodes
but makes no comparison, selection or data movement where there was none.

    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/peak_nms_scan.py
"""

from __future__ import annotations

import glob
import os

import onnx

import newmodels as nm  # bench/newmodels.py
from testkit import zoo as tz


def main() -> None:
    from onnxptq.pipeline.plan.peak_nms import peak_suppressions
    from onnxptq.pipeline.plan.select import _Graph
    from onnxptq.pipeline.plan.zero_guards import guarded_divisors

    paths = {k: str(nm.SRC / v[0]) for k, v in nm.MODELS.items()}
    paths.update({os.path.basename(p): p for p in glob.glob("/work/shared/models/*.onnx")})
    paths.update({f"zoo:{m.name}": str(m.path()) for m in tz.ZOO})
    hits = 0
    for key, path in sorted(paths.items()):
        if not os.path.exists(path):
            print(f"{key}: missing ({path})", flush=True)
            continue
        g = _Graph(onnx.load(path, load_external_data=False))
        found, guards = peak_suppressions(g), guarded_divisors(g)
        hits += bool(found or guards)
        detail = "; ".join(f"{c}: {len(t)} tensors float" for c, t in {**found, **guards}.items())
        print(f"{key}: {len(found)} peak suppression(s), {len(guards)} zero-guarded divisor(s)"
              f"{' (' + detail + ')' if detail else ''}", flush=True)
    print(f"{hits} of {len(paths)} models hold either pattern")


if __name__ == "__main__":
    main()
