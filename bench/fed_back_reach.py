"""Where plan/fed_back_outputs.py changes anything: plans of the zoo and the outside models.

The rule keeps float a graph output that a dot product reads again in FP-element MX blocks shorter
than the format's (LORE's cell transformer: its first stage's logical spans, read again by the
stacker). For each model and preset the model is prepared and planned as ``quantize`` does (no
calibration) and the tensors the rule kept float are listed; a model with an empty list is planned,
and so emitted and judged, exactly as before (issue 27 item 5, bench/RESULTS.md "... branch mxfp8e").
Integer-element presets cannot change (the rule reads FP elements only); listing them checks that.

    PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 nice -n 5 python bench/fed_back_reach.py --presets MXFP8_E4M3,MXFP4,BFP16,MXINT8 --json /work/cache/mxfp8e/reach.json
"""

from __future__ import annotations

from pathlib import Path

import onnx

import onnxptq
from onnxptq.pipeline.plan import make_plan
from onnxptq.pipeline.prepare import prepare_for_quantization

from _plan_scan import scan_main  # bench/: every zoo model and outside model whose file is here


def check(path: Path, preset: str) -> dict:
    config = onnxptq.get_preset(preset)
    plan = make_plan(prepare_for_quantization(onnx.load(str(path)), config), config)
    kept = sorted(n for n, why in plan.float_tensors.items() if "fed_back_outputs.py" in why)
    return {"kept_float": kept, "activations": sum(1 for t in plan.tensors.values() if t.role == "activation")}


def main() -> None:
    scan_main(__doc__.splitlines()[0], check, "MXFP8_E4M3,MXFP4,BFP16,MXINT8", quiet=True)


if __name__ == "__main__":
    main()
