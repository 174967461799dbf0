"""Where the ninth round's two fixes change anything: plans of the zoo and the outside models.

For each model and CPU integer preset (A8W8, A16W8: the placements whose elementwise constants
are per-tensor), the model is prepared and planned as ``quantize`` does (no calibration) and two
things are listed: the gain constants ``pipeline/plan/gain_vectors.py`` keeps float, and the
quantizer parameter names (``<tensor>_scale``, ``<tensor>_zero_point``) that already name another
tensor of the prepared model, the clashes ``pipeline/emit.py`` now renames. A model whose list is
empty is planned and emitted as before.

    PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 nice -n 5 python bench/gain_vectors_check.py --json /work/cache/newmodels9/gain_check.json
"""

from __future__ import annotations

from pathlib import Path

import onnx

import onnxptq
from onnxptq.pipeline.emit import _safe
from onnxptq.pipeline.plan import make_plan
from onnxptq.pipeline.prepare import prepare_for_quantization

from _plan_scan import scan_main  # bench/


def check(path: Path, preset: str) -> dict:
    config = onnxptq.get_preset(preset)
    prepared = prepare_for_quantization(onnx.load(str(path)), config)
    plan = make_plan(prepared, config)
    gains = sorted(n for n, why in plan.float_tensors.items() if "gain_vectors.py" in why)
    names = {i.name for i in prepared.graph.initializer} | {i.name for i in prepared.graph.input}
    names |= {o for n in prepared.graph.node for o in n.output}
    clashes = sorted(f"{_safe(t)}_{suffix}" for t in plan.tensors for suffix in ("scale", "zero_point")
                     if f"{_safe(t)}_{suffix}" in names)
    return {"gain_float": gains, "name_clashes": clashes, "planned": len(plan.tensors)}


def main() -> None:
    scan_main(__doc__.splitlines()[0], check, "A8W8,A16W8")


if __name__ == "__main__":
    main()
