"""The accuracy floor on the zoo's streaming models (testkit/zoo.py), for the streamed judgement (analysis/streams.py).

Each (model, preset): quantized with the zoo's calibration feeds (repair as the preset has it), the floor's
verdict (whether it judged streamed, what it warned) and the zoo's task metric on its held-out feeds. Run once
per source tree (``PYTHONPATH``) and compare the JSON rows:

    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/stream_zoo.py --models silero_half \\
        --presets BF16,FP16,A16W8,A8W8,BFP16,MX9,MXINT8,MXFP8_E4M3 --json /tmp/zoo_after.json
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path


def main() -> None:
    import onnxptq
    from testkit import zoo

    ap = argparse.ArgumentParser()
    ap.add_argument("--models", required=True)
    ap.add_argument("--presets", required=True)
    ap.add_argument("--json", required=True)
    a = ap.parse_args()
    rows = []
    for name in a.models.split(","):
        model = next(m for m in zoo.ZOO if m.name == name)
        calib, held = model.samples("calibration"), model.samples("heldout")
        ref = zoo.session_runner(model.path())
        for preset in a.presets.split(","):
            records: list[str] = []
            handler = logging.Handler(logging.WARNING)
            handler.emit = lambda r: records.append(r.getMessage())  # type: ignore[method-assign]
            logging.getLogger("onnxptq").addHandler(handler)
            c0 = time.process_time()
            result = onnxptq.quantize(str(model.path()), preset, data=list(calib))
            cpu = time.process_time() - c0
            logging.getLogger("onnxptq").removeHandler(handler)
            test = zoo.session_runner(result.model)
            verdict = result.floor
            row = {"model": name, "preset": preset, "floor": verdict.floor.top1 if verdict else None,
                   "agreement": round(float(model.metric(ref, test, held, model.root())), 4),
                   "floor_ok": bool(verdict.ok) if verdict else None, "samples": verdict.samples if verdict else 0,
                   "streamed": getattr(verdict, "streamed", None), "warnings": [w[:300] for w in records][:3],
                   "quantize_cpu_s": round(cpu, 2)}
            rows.append(row)
            print(json.dumps(row), flush=True)
            Path(a.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
