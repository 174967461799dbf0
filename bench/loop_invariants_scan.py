"""graph/passes/loop_invariants on every model the project runs: which ones it can change.

For each bench/newmodels.py model (rounds 1-8), zoo model and /work/shared/models file: how many
Loop/Scan nodes it holds (in any body) and how many carried states its bodies return unchanged
that something reads (what the pass rewires). A model with none is left as it was: the pass makes
no rewrite and reports the model unmodified, so its prepared form, plan and output cannot change.

    NEWMODELS8_SRC=/work/cache/newmodels8/src PYTHONPATH=src:. python bench/loop_invariants_scan.py
"""

from __future__ import annotations

import glob
import os

import onnx

import newmodels as nm  # bench/newmodels.py
from testkit import zoo as tz


def _env_src(rel: str) -> str:
    return str(nm.SRC / rel)


def main() -> None:
    import onnx_ir as ir

    from onnxptq.graph.passes._common import to_ir
    from onnxptq.graph.passes.loop_invariants import LoopInvariantsPass

    paths = {k: _env_src(v[0]) for k, v in nm.MODELS.items()}
    paths.update({os.path.basename(p): p for p in glob.glob("/work/shared/models/*.onnx")})
    paths.update({f"zoo:{m.name}": str(m.path()) for m in tz.ZOO})
    for key, path in sorted(paths.items()):
        if not os.path.exists(path):
            print(f"{key}: missing ({path})")
            continue
        model = to_ir(onnx.load(path))
        loops = sum(1 for n in ir.traversal.RecursiveGraphIterator(model.graph) if n.op_type in ("Loop", "Scan"))
        result = LoopInvariantsPass()(model)
        print(f"{key}: {loops} Loop/Scan node(s), modified={result.modified}", flush=True)


if __name__ == "__main__":
    main()
