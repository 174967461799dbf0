"""Which models the project runs hold a lookup table: a ``Gather`` whose data is a float constant of
rank ≥ 2 (``pipeline/plan/select.is_lookup_table``), in any graph, and its float bytes.

Those are the models whose integer-preset files change with the table rule (stored int8 per row,
dequantized after the lookup); every other model's plan is unchanged by it.

    PYTHONPATH=src:. python bench/lookup_tables_scan.py
"""

from __future__ import annotations

import glob
import os

import numpy as np
import onnx

import newmodels as nm  # bench/newmodels.py
from testkit import zoo as tz


def tables(model: onnx.ModelProto) -> list[tuple[str, list[int]]]:
    """(name, dims) of each float constant a Gather reads as its data, in any graph."""
    from onnxptq.graph.ops import FLOAT_TYPES
    from onnxptq.graph.walk import all_graphs

    found = []
    for g in all_graphs(model.graph):
        inits = {t.name: t for t in g.initializer}
        for node in g.node:
            t = inits.get(node.input[0]) if node.op_type == "Gather" and node.input else None
            if t is not None and t.data_type in FLOAT_TYPES and len(t.dims) >= 2:
                found.append((t.name, list(t.dims)))
    return found


def main() -> None:
    paths = {k: str(nm.SRC / v[0]) for k, v in nm.MODELS.items()}  # a relative path is under round 1's source
    paths.update({os.path.basename(p): p for p in glob.glob("/work/shared/models/*.onnx")})
    paths.update({f"zoo:{m.name}": str(m.path()) for m in tz.ZOO})
    for key, path in sorted(paths.items()):
        if not os.path.exists(path) or not path.endswith(".onnx"):
            print(f"{key}: not scanned ({path})", flush=True)
            continue
        found = tables(onnx.load(path))
        size = sum(int(np.prod(d)) for _, d in found)
        print(f"{key}: {len(found)} table(s), {size * 4 / 1e6:.2f} MB float32 {found[:4]}", flush=True)


if __name__ == "__main__":
    main()
