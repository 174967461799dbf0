"""Captcha reads kept per preset on captcha-whisperer 0.1.0's CRNN (issue 20).

    python bench/captcha_reads.py [--count 200] [--presets A8W8 A16W8 BF16 BFP16 MX9 MXINT8] [--no-guard]

Of the seeded captchas (``captcha`` package, seed 1) the float model reads right, the fraction
each quantized model still reads right; calibration on 16 other captchas (seed 2).
"""

from __future__ import annotations

import _common  # noqa: F401  (puts the repository root on sys.path: testkit)
import argparse
import time

from onnxptq.api import quantize
from onnxptq.config.presets import get_preset
from onnxptq.sessions import open_session
from testkit import captcha


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--presets", nargs="+", default=["A8W8", "A16W8", "BF16", "BFP16", "MX9", "MXINT8"])
    parser.add_argument("--no-guard", action="store_true", help="range guard off (to compare)")
    args = parser.parse_args()
    model = str(captcha.model_path())
    test, calib = captcha.make_captchas(args.count, seed=1), captcha.make_captchas(16, seed=2)
    data = [{"image": calib.images[i:i + 1]} for i in range(len(calib.texts))]
    floats = captcha.read(open_session(model), test.images)
    print(f"| preset | reads kept vs float | float-right captchas | guard actions | seconds |")
    print("|---|---|---|---|---|")
    for preset in args.presets:
        cfg = get_preset(preset).replace(range_guard=not args.no_guard)  # the bench measures with the guard on unless --no-guard
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
