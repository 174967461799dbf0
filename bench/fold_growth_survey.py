"""Which folds the fold-group growth rule (graph/passes/fold_constants.py ``shared_growth``) keeps computed.

For every ONNX model given (files or folders, searched recursively), runs prepare's steps up to
constant folding, lists every fold group whose results are large (``GROWN_FROM`` elements) and
at least ``--min`` times the bytes of its source constants, and for each says whether the rule keeps
its growers computed. ``--fold`` also folds each listed model twice (the rule off, then on) and
prints the initializer bytes either way: the flips, measured.

    PYTHONPATH=src python bench/fold_growth_survey.py /work/shared/models ~/.cache/onnxptq/models --min 2
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

import onnx
import onnx_ir as ir

from onnxptq.graph.passes.cleanup import cse_pass
from onnxptq.graph.passes.eliminate_identity import eliminate_identity_passes, no_op_cast_passes
from onnxptq.graph.passes.lift_constants import lift_constants_pass
from onnxptq.graph.passes.loop_invariants import LoopInvariantsPass
from onnxptq.graph.passes.runner import to_ir
from onnxptq.graph.passes.shape_inference import shape_inference_pass

fc = importlib.import_module("onnxptq.graph.passes.fold_constants")


def _before_folding(path: Path) -> ir.Model:
    model = to_ir(onnx.load(str(path)))  # as prepare reads it
    for p in [lift_constants_pass(), *eliminate_identity_passes(), LoopInvariantsPass(), cse_pass(),
              shape_inference_pass(), *no_op_cast_passes()]:
        model = p(model).model
    return model


def _init_bytes(model: ir.Model) -> int:
    return sum(int(v.const_value.nbytes) for g in model.graphs() for v in g.initializers.values()
               if v.const_value is not None and (v.uses() or v.is_graph_output()))


def survey(path: Path, least: float, fold: bool) -> list[str]:
    model = _before_folding(path)
    fp = fc.FoldConstantsPass()
    rows = []
    for graph in model.graphs():
        graph.sort()
        for g in fc.shared_growth(graph, fp._foldable):
            if g.growers and g.elements >= fc.GROWN_FROM and g.growth >= least:
                ops = sorted({n.op_type for n in g.growers})
                rows.append(f"{path}\t{g.growth:.1f}x\t{g.stored}\t{g.sources}\t{len(g.ends)} ends\t"
                            f"{len(g.growers)} growers {ops}\t{'KEPT' if g.grown else 'folded'}")
    if fold and rows:
        sizes = []
        for shared in (None, fc.SHARED_GROWTH):
            saved, fc.SHARED_GROWTH = fc.SHARED_GROWTH, shared
            try:
                m = _before_folding(path)
                fc.FoldConstantsPass()(m)
                sizes.append(_init_bytes(m))
            finally:
                fc.SHARED_GROWTH = saved
        rows.append(f"{path}\tinitializer bytes after folding: rule off {sizes[0]}, on {sizes[1]}")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+", type=Path)
    ap.add_argument("--min", type=float, default=2.0, help="list groups at least this many times their sources")
    ap.add_argument("--fold", action="store_true", help="fold listed models with the rule off and on")
    args = ap.parse_args()
    files = sorted({f for p in args.paths for f in ([p] if p.is_file() else p.rglob("*.onnx"))})
    print(f"{len(files)} models", flush=True)
    for f in files:
        try:
            rows = survey(f, args.min, args.fold)
        except Exception as exc:  # a model the passes reject is reported, the survey goes on
            rows = [f"{f}\tERROR {type(exc).__name__}: {str(exc)[:120]}"]
        for r in rows:
            print(r, flush=True)


if __name__ == "__main__":
    sys.exit(main())
