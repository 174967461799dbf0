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

import argparse
import json
import logging
import time
from pathlib import Path

import onnx

import onnxptq
from onnxptq.pipeline.emit import _safe
from onnxptq.pipeline.plan import make_plan
from onnxptq.pipeline.prepare import prepare_for_quantization


def models() -> dict[str, Path]:
    """Every zoo model and every outside model whose file is here."""
    from testkit import zoo

    import newmodels  # bench/newmodels.py

    out: dict[str, Path] = {}
    for m in zoo.ZOO:
        try:
            out[f"zoo:{m.name}"] = m.path()
        except Exception as exc:  # noqa: BLE001 - a wheel missing here is listed, not fatal
            logging.warning("zoo %s: %s", m.name, exc)
    for name, (rel, *_rest) in newmodels.MODELS.items():
        path = newmodels.SRC / rel
        if path.is_file():
            out[f"new:{name}"] = path
    return out


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
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", required=True)
    ap.add_argument("--presets", default="A8W8,A16W8")
    ap.add_argument("--only", default="", help="comma-separated model keys (zoo:NAME, new:NAME); default all")
    a = ap.parse_args()
    rows = []
    todo = models()
    if a.only:
        todo = {k: v for k, v in todo.items() if k in a.only.split(",")}
    for key, path in todo.items():
        for preset in a.presets.split(","):
            t0 = time.process_time()
            try:
                row = {"model": key, "preset": preset, **check(path, preset)}
            except Exception as exc:  # noqa: BLE001 - recorded
                row = {"model": key, "preset": preset, "error": f"{type(exc).__name__}: {str(exc)[:200]}"}
            row["cpu_s"] = round(time.process_time() - t0, 1)
            rows.append(row)
            print(json.dumps(row), flush=True)
            Path(a.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
