"""A zoo model's presets with repair off or on (``PRESET+r``): this process's CPU seconds for the
quantization, the zoo metric on its held-out feeds, and the summary's floor and repair lines.

CPU seconds (``time.process_time``) rather than wall time: the machine is shared, and the repair's
own budget is counted in this process's CPU time too.

    PYTHONPATH=src:. nice -n 5 python bench/floor_cpu.py BF16,A16W8,A16W8+r,MXINT8+r ddddocr_ocr
"""

from __future__ import annotations

import logging
import sys
import time

import _common  # noqa: F401 - the repository root (testkit/) on sys.path

from onnxptq.api import quantize  # noqa: E402
from onnxptq.config.presets import resolve_config  # noqa: E402
from testkit import zoo  # noqa: E402


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(name)s %(message)s")
    model = zoo.get(sys.argv[2] if len(sys.argv) > 2 else "ddddocr_ocr")
    calib, held = list(model.samples("calibration")), list(model.samples("heldout"))
    ref = zoo.session_runner(model.path())
    for preset in sys.argv[1].split(","):
        repair = preset.endswith("+r")
        preset = preset.removesuffix("+r")
        t0 = time.process_time()
        result = quantize(str(model.path()), resolve_config(preset).replace(repair=repair), data=list(calib))
        cpu = time.process_time() - t0
        metric = model.metric(ref, zoo.session_runner(result.model), held, model.root())
        lines = [line for line in result.summary().splitlines() if any(w in line for w in ("floor", "REPAIR", "note", "before"))]
        print(f"== {preset} repair={repair} metric {metric:.3f} cpu {cpu:.1f}\n" + "\n".join(lines), flush=True)


if __name__ == "__main__":
    main()
