"""compute_range remembers a collector's range, and forgets it when the collector takes more data (issue 26, branch terrain).

Every build of a plan solved every activation's range again from the same statistics: on
terrain_unet's A8W8 repair (10 builds, 1325 activations) 22 of 175 CPU s were the same percentile
ranges recomputed (bench/RESULTS.md, "terrain_unet").
"""

from __future__ import annotations

import numpy as np

from onnxptq.calibration import methods


def test_a_range_is_computed_once_per_state_and_options(monkeypatch):
    calls = []
    for helper in ("_percentile_range", "_tail_percentile_range"):  # histogram or tails, whichever the collector is
        def counting(*a, _real=getattr(methods, helper), **k):
            calls.append(1)
            return _real(*a, **k)

        monkeypatch.setattr(methods, helper, counting)
    rng = np.random.default_rng(0)
    c = methods.make_collector("percentile", percentile=99.9)
    c.update(rng.standard_normal(10000).astype(np.float32))
    first = methods.compute_range(c, "percentile", percentile=99.9)
    assert methods.compute_range(c, "percentile", percentile=99.9) == first and len(calls) == 1
    methods.compute_range(c, "percentile", percentile=99.0)  # other options: computed
    assert len(calls) == 2
    c.update((rng.standard_normal(10000) * 10).astype(np.float32))  # more data: a new range, not the remembered one
    wider = methods.compute_range(c, "percentile", percentile=99.9)
    assert len(calls) == 3 and wider[1] > first[1] * 2
