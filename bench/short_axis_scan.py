"""Which models' block plans the dynamic-axis fallback of ``plan/short_blocks.off_unit_axis`` changes (degen21): for each model, the
activations of a block-format plan whose planned axis has length 1 and no other axis a known length > 1, i.e. where
main's plan kept one element per block and the branch's blocks run along the last dynamic axis (not the batch):
the plan made with both rules on this tree, every planned tensor whose axis differs listed.

    PYTHONPATH=src:.:bench python bench/short_axis_scan.py --presets MXINT8,MXFP8_E4M3 [--models zoo,shipped,new]
"""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path

import onnx

import _common  # noqa: F401  (the repository root on sys.path)

from onnxptq.config.presets import resolve_config
from onnxptq.pipeline import prepare
from onnxptq.pipeline.plan import make_plan


def sources(kinds: set[str]) -> list[tuple[str, str]]:
    """(name, path) of every model of the chosen kinds that exists on this machine."""
    out: list[tuple[str, str]] = []
    if "zoo" in kinds:
        from testkit import zoo

        for m in zoo.ZOO:
            try:
                p = m.path()
            except Exception:  # noqa: BLE001  (a member not fetched here)
                continue
            if Path(p).exists():
                out.append((f"zoo:{m.name}", str(p)))
    if "shipped" in kinds:
        for p in sorted(Path("/work/shared/models").glob("*.onnx")):
            out.append((f"shipped:{p.stem}", str(p)))
    if "new" in kinds:
        import newmodels

        for name, row in newmodels.MODELS.items():
            if Path(row[0]).exists() and (f"new:{name}", str(row[0])) not in out:
                out.append((f"new:{name}", str(row[0])))
    return out


def _main_rule(axis: int, dims: tuple[int | None, ...] | None) -> int:
    """main's ``_off_unit_axis`` (before degen21): only an axis of known length > 1 is taken."""
    if not dims or not -len(dims) <= axis < len(dims) or dims[axis] != 1:
        return axis
    for i in range(len(dims) - 1, -1, -1):
        if dims[i] is not None and dims[i] > 1:
            return i - len(dims)
    return axis


def fallback_tensors(path: str, preset: str) -> list[str]:
    """The planned tensors whose block axis (or producer-side axis) main's rule and the branch's decide differently:
    ``name dims: main's axis -> the branch's``; the plan made twice on this tree, once with main's rule patched in."""
    from onnxptq.pipeline.plan import assign

    cfg = resolve_config(preset)
    model = prepare.prepare_for_quantization(onnx.load(path), cfg)
    dims = {vi.name: [d.dim_value if d.HasField("dim_value") else None for d in vi.type.tensor_type.shape.dim]
            for vi in list(model.graph.value_info) + list(model.graph.input) + list(model.graph.output)}
    branch = make_plan(model, cfg)
    real = assign.off_unit_axis
    assign.off_unit_axis = _main_rule
    try:
        main_plan = make_plan(model, cfg)
    finally:
        assign.off_unit_axis = real
    hits = []
    for name in sorted(set(branch.tensors) | set(main_plan.tensors)):
        a, b = main_plan.tensors.get(name), branch.tensors.get(name)
        was = None if a is None else (a.axis, a.producer_axis)
        now = None if b is None else (b.axis, b.producer_axis)
        if was != now:
            hits.append(f"{name} {dims.get(name)}: {was} -> {now}")
    return hits


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--presets", default="MXINT8,MXFP8_E4M3")
    ap.add_argument("--models", default="zoo,shipped,new")
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)
    rows = sources(set(args.models.split(",")))
    print(f"{len(rows)} models, load {os.getloadavg()[0]:.1f}")
    for name, path in rows:
        for preset in args.presets.split(","):
            try:
                hits = fallback_tensors(path, preset)
            except Exception as exc:  # noqa: BLE001  (a scan: say which model it could not plan, go on)
                print(f"{name} {preset}: not planned ({type(exc).__name__}: {str(exc)[:80]})")
                continue
            if hits:
                print(f"{name} {preset}: {len(hits)}: " + "; ".join(hits[:6]), flush=True)


if __name__ == "__main__":
    main()
