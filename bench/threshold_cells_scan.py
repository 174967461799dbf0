"""Where analysis/threshold_cells.py can act, over every local ONNX model.

Why: the rule must change nothing it should not. ``measure`` changes only (a) for a sigmoid heat map
that gates a sibling value map (``threshold_cells.thresholded_maps`` of
``spatial_gates.spatially_gated_outputs``), judged by the cells its thresholds keep, and (b) for a
detector's score-rows output (``score_rows.detector_score_rows``) that is also judged field by field
(``fields.declared_field_axes``: at most ``fields.MAX_FIELDS`` rows), whose score fields' cosines are
taken on the candidates that matter. Every other output is judged as before, so listing these two
over the zoo cache, the outside models and the shipped ones shows where a verdict can change at all.

    PYTHONPATH=src:. python bench/threshold_cells_scan.py [--max-mb 150]
"""

from __future__ import annotations

import argparse

import _common
from onnxptq.analysis.confidence_gates import from_sigmoid
from onnxptq.analysis.fields import declared_field_axes
from onnxptq.analysis.score_rows import detector_score_rows
from onnxptq.analysis.spatial_gates import spatially_gated_outputs
from onnxptq.analysis.threshold_cells import thresholded_maps
from onnxptq.graph.walk import constant_names


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-mb", type=float, default=150)
    args = ap.parse_args()
    scanned = with_sigmoid = acted = 0
    for path, model in _common.local_models(args.max_mb):
        scanned += 1
        g = model.graph
        producer = {o: n for n in g.node for o in n.output if o}
        constants = constant_names(g)
        sigmoids = [o.name for o in g.output if from_sigmoid(o.name, producer, constants)]
        rows = detector_score_rows(model)
        if not sigmoids and not rows:
            continue
        with_sigmoid += 1
        heats = sorted(thresholded_maps(spatially_gated_outputs(model)))
        axes = declared_field_axes(model)
        fielded = sorted(n for n in rows if n in axes)
        acted += bool(heats or fielded)
        print(f"{path}\tsigmoid outputs {len(sigmoids)}\tscore rows {sorted(rows) or '-'}\t"
              f"thresholded heat maps {heats or '-'}\tscore rows judged by fields {fielded or '-'}")
    print(f"scanned {scanned} models, {with_sigmoid} with a sigmoid output or score rows, {acted} where threshold_cells acts")


if __name__ == "__main__":
    main()
