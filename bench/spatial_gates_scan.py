"""Which outputs analysis/spatial_gates.py gates, over every local ONNX model with a sigmoid output.

Why: the rule must change nothing it should not. It changes a verdict only for the outputs
``spatially_gated_outputs`` lists (``measure`` is unchanged for the others), so listing them over the
zoo, the outside models and the shipped ones shows where it can act at all.

    PYTHONPATH=src:. python bench/spatial_gates_scan.py [--max-mb 150]
"""

from __future__ import annotations

import argparse

import _common
from onnxptq.analysis.confidence_gates import from_sigmoid
from onnxptq.analysis.spatial_gates import spatially_gated_outputs
from onnxptq.graph.walk import constant_names


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-mb", type=float, default=150)
    args = ap.parse_args()
    scanned = with_sigmoid = gated = 0
    for path, model in _common.local_models(args.max_mb):
        scanned += 1
        g = model.graph
        producer = {o: n for n in g.node for o in n.output if o}
        constants = constant_names(g)
        sigmoids = [o.name for o in g.output if from_sigmoid(o.name, producer, constants)]
        if not sigmoids:
            continue
        with_sigmoid += 1
        gates = spatially_gated_outputs(model)
        gated += bool(gates)
        print(f"{path}\toutputs {len(g.output)}\tsigmoid outputs {len(sigmoids)}\tgated {gates or '-'}")
    print(f"scanned {scanned} models, {with_sigmoid} with a sigmoid output, {gated} with a gated value map")


if __name__ == "__main__":
    main()
