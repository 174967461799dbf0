"""Captcha reads kept per preset on captcha-whisperer 0.1.0's CRNN (issue 20).

    python bench/captcha_reads.py [--count 200] [--presets A8W8 A16W8 BF16 BFP16 MX9 MXINT8] [--no-guard]
    python bench/captcha_reads.py --presets A8W8 --per-tensor        # our A8W8 with per-tensor weights
    python bench/captcha_reads.py --presets A8W8 --reference         # the reference tool's A8W8 (issue 27.6)

Of the seeded captchas (``captcha`` package, seed 1) the float model reads right, the fraction
each quantized model still reads right; calibration on 16 other captchas (seed 2).
"""

from __future__ import annotations

import _common  # noqa: F401  (puts the repository root on sys.path: testkit)
import argparse
import dataclasses
import time

from onnxptq.api import quantize
from onnxptq.config.presets import get_preset
from onnxptq.sessions import open_session
from testkit import captcha


def _reference(preset: str):
    """The reference tool's A8W8 / A16W8 (spec §1.5), translated by the compatible API."""
    from onnxptq.compat import QuantizationConfig
    from onnxptq.compat.enums import CalibrationMethod, ExtendedQuantFormat, ExtendedQuantType, QuantType
    from onnxptq.compat.options import to_quant_config

    extra = {"ActivationSymmetric": True, "ForceQuantizeNoInputCheck": True, "AlignSlice": False, "FoldRelu": True,
             "AlignConcat": True}
    if preset == "A16W8":
        extra["AlignEltwiseQuantType"] = True
    return to_quant_config(QuantizationConfig(
        calibrate_method=CalibrationMethod.MinMax, quant_format=ExtendedQuantFormat.QDQ,
        activation_type=QuantType.QInt8 if preset == "A8W8" else ExtendedQuantType.QInt16,
        weight_type=QuantType.QInt8, per_channel=False, extra_options=extra))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--presets", nargs="+", default=["A8W8", "A16W8", "BF16", "BFP16", "MX9", "MXINT8"])
    parser.add_argument("--no-guard", action="store_true", help="range guard off (to compare)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the evaluation captchas")
    parser.add_argument("--per-tensor", action="store_true", help="integer weights per tensor")
    parser.add_argument("--reference", action="store_true",
                        help="the reference tool's A8W8/A16W8 as its compatible API builds them: MinMax, symmetric "
                             "activations, per-tensor weights")
    args = parser.parse_args()
    model = str(captcha.model_path())
    test, calib = captcha.make_captchas(args.count, seed=args.seed), captcha.make_captchas(16, seed=2)
    data = [{"image": calib.images[i:i + 1]} for i in range(len(calib.texts))]
    floats = captcha.read(open_session(model), test.images)
    print(f"| preset | reads kept vs float | float-right captchas | guard actions | seconds |")
    print("|---|---|---|---|---|")
    for preset in args.presets:
        cfg = _reference(preset) if args.reference else get_preset(preset)
        cfg = cfg.replace(range_guard=not args.no_guard)  # the bench measures with the guard on unless --no-guard
        if args.per_tensor:
            cfg = cfg.replace(weight=dataclasses.replace(cfg.weight, per_channel=False))
        start = time.perf_counter()
        result = quantize(model, cfg, data=data)
        reads = captcha.read(open_session(result.model), test.images)
        kept, right = captcha.kept_fraction(floats, reads, test.texts)
        actions: dict[str, int] = {}
        for decision in result.plan.guard.values():
            actions[decision["action"]] = actions.get(decision["action"], 0) + 1
        print(f"| {preset} | {kept:.3f} | {right} | {actions or '-'} | {time.perf_counter() - start:.0f} |", flush=True)


if __name__ == "__main__":
    main()
