"""Where plan/short_blocks.py changes anything: plans of the zoo and the outside models under MX presets.

For each model and preset the model is prepared and planned as ``quantize`` does (no calibration),
once with the default (``mx_activation_scale_search=None``: FP8-element MX activations whose block
axis is shorter than the block take the unsaturated exponent) and once with OCP's rule everywhere (``0``, what main planned), and the
activations whose quantizer differs are listed. A model with an empty list is planned, and so
emitted and judged, exactly as before (issue 27, bench/RESULTS.md "... branch mxfp8d").

    PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 nice -n 5 python bench/short_blocks_reach.py --presets MXFP8_E4M3,BFP16,MXINT8 --json /work/cache/mxfp8d/reach.json
"""

from __future__ import annotations

from pathlib import Path

import onnx

import onnxptq
from onnxptq.pipeline.plan import make_plan
from onnxptq.pipeline.prepare import prepare_for_quantization

from _plan_scan import scan_main  # bench/: every zoo model and outside model whose file is here


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
    scan_main(__doc__.splitlines()[0], check, "MXFP8_E4M3,BFP16,MXINT8",
              printable=lambda row: {**row, "changed": len(row.get("changed", []))}, quiet=True)


if __name__ == "__main__":
    main()
