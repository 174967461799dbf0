"""Wall time of A8W8 + AdaRound on PP-OCR cls through the compatible API against the own API.

Issue 16 measured 62 s for ``get_default_config("A8W8_ADAROUND")`` with ``FastFinetune``
``NumIterations`` 1000 (calibration through save) against 26 s through ``onnxptq.quantize`` with
the same preset (bench/finetune.py). This runs both, one after the other, on the same 32 rendered
cls lines (seed 11, one line per sample, as bench/finetune.py), the compatible one through
``ModelQuantizer.quantize_model`` with a ``get_next()`` reader and an output file, and prints the
wall and process CPU time of each (the CPU time is what a loaded machine disturbs less).

    python bench/compat_finetune.py [--iterations 1000] [--out /tmp/cls_adaround.onnx]
"""

from __future__ import annotations

import _common  # noqa: F401  (puts the repository root on sys.path: testkit)
import argparse
import os
import tempfile
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=1000)
    parser.add_argument("--out", default=os.path.join(tempfile.mkdtemp(prefix="onnxptq_compat_"), "cls_adaround.onnx"))
    args = parser.parse_args()

    from onnxptq.api import quantize
    from onnxptq.compat import get_default_config
    from onnxptq.compat.legacy import Config
    from onnxptq.config.presets import get_preset
    from onnxptq.quantization.api import ModelQuantizer
    from testkit import ocr
    from testkit.models import model_path

    model = str(model_path("cls"))
    images, _ = ocr.render_cls(32, seed=11)
    calib = [{"x": images[i:i + 1]} for i in range(len(images))]

    class Reader:
        def __init__(self) -> None:
            self.samples = iter(calib)

        def get_next(self):
            return next(self.samples, None)

    print(f"load average {os.getloadavg()[0]:.1f}; PP-OCR cls, 32 lines, AdaRound {args.iterations} iterations\n")
    print("| path | wall s | CPU s |\n|---|---:|---:|")
    config = get_preset("A8W8_ADAROUND")
    config.finetune.num_iterations = args.iterations
    wall, cpu = time.perf_counter(), time.process_time()
    quantize(model, config, calib)
    print(f"| onnxptq.quantize(model, A8W8_ADAROUND) | {time.perf_counter() - wall:.1f} | {time.process_time() - cpu:.1f} |", flush=True)
    compat = get_default_config("A8W8_ADAROUND")
    compat.extra_options["FastFinetune"]["NumIterations"] = args.iterations
    wall, cpu = time.perf_counter(), time.process_time()
    ModelQuantizer(Config(global_quant_config=compat)).quantize_model(model, args.out, Reader())
    print(f"| ModelQuantizer(get_default_config('A8W8_ADAROUND')).quantize_model(..., output) | "
          f"{time.perf_counter() - wall:.1f} | {time.process_time() - cpu:.1f} |")
    print(f"\nload average at end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
