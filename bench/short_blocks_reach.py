"""Where plan/short_blocks.py changes anything: plans of the zoo and the outside models under MX presets.

For each model and preset the model is prepared and planned as ``quantize`` does (no calibration),
once with the default (``mx_activation_scale_search=None``: FP8-element MX activations whose block
axis is shorter than the block take the unsaturated exponent) and once with OCP's rule everywhere (``0``, what main planned), and the
activations whose quantizer differs are listed. A model with an empty list is planned, and so
emitted and judged, exactly as before (issue 27, bench/RESULTS.md "... branch mxfp8d").

    PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 nice -n 5 python bench/short_blocks_reach.py --presets MXFP8_E4M3,BFP16,MXINT8 --json /work/cache/mxfp8d/reach.json
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

import onnx

import onnxptq
from onnxptq.pipeline.plan import make_plan
from onnxptq.pipeline.prepare import prepare_for_quantization

from gain_vectors_check import models  # bench/: every zoo model and outside model whose file is here


def _quants(plan) -> dict[str, tuple]:
    return {n: (t.quant, t.producer_quant) for n, t in plan.tensors.items()}


def check(path: Path, preset: str) -> dict:
    config = onnxptq.get_preset(preset)
    prepared = prepare_for_quantization(onnx.load(str(path)), config)
    new, ocp = make_plan(prepared, config), make_plan(prepared, config.replace(mx_activation_scale_search=0))
    a, b = _quants(new), _quants(ocp)
    changed = sorted(n for n in set(a) | set(b) if a.get(n) != b.get(n))
    acts = sum(1 for t in new.tensors.values() if t.role == "activation")
    return {"changed": changed, "activations": acts, "same_float": new.float_tensors.keys() == ocp.float_tensors.keys()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", required=True)
    ap.add_argument("--presets", default="MXFP8_E4M3,BFP16,MXINT8")
    ap.add_argument("--only", default="", help="comma-separated model keys (zoo:NAME, new:NAME); default all")
    a = ap.parse_args()
    logging.disable(logging.WARNING)
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
            print(json.dumps({**row, "changed": len(row.get("changed", []))}), flush=True)
            Path(a.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
