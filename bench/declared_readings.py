"""An output's declared reading against the structural one, on an outside model (issue 27).

For each preset: quantize with defaults, then with ``floor_output_reading`` (``--reading OUT=KIND``;
none: defaults only), and record the floor's verdict on the output (broken, not judged, warned),
repair's kept nodes, the quantize CPU seconds and the model's task metric on held-out feeds
(bench/newmodels.py's metric), both in one process.

    PYTHONPATH=src:. OMP_NUM_THREADS=1 python bench/declared_readings.py --model dvector_recovered \
        --reading embedding=values --presets A16W8,MXINT8
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import newmodels  # noqa: E402  (the outside models, their feeds and task metrics)
from testkit import zoo  # noqa: E402


def one(name: str, preset: str, readings: dict[str, str], calib, held, out: Path) -> dict:
    import onnxptq
    from onnxptq.config.presets import resolve_config

    rel, _, metric_name, metric = newmodels.MODELS[name]
    path = newmodels.SRC / rel
    config = resolve_config(preset).replace(floor_output_reading=readings) if readings else resolve_config(preset)
    c0 = time.process_time()
    result = onnxptq.quantize(str(path), config, data=list(calib), output=str(out))
    cpu = time.process_time() - c0
    repair = result.repair if isinstance(result.repair, dict) else {}
    ref, test = zoo.session_runner(path), zoo.session_runner(out)
    verdict = result.floor
    return {"model": name, "preset": preset, "declared": readings or None, "floor_ok": None if verdict is None else verdict.ok,
            "broken": None if verdict is None else verdict.broken,
            "unjudged": None if verdict is None else verdict.unjudged, "warned": None if verdict is None else len(verdict.advisories),
            "kept": len(repair.get("kept_float", [])),
            "stepped": len(repair.get("stepped_up", [])) if isinstance(repair.get("stepped_up"), (list, tuple, dict)) else None,
            "cpu_s": round(cpu, 1), "metric": metric_name, "agreement": round(float(metric(ref, test, held, None)), 4),
            "size_x": round(out.stat().st_size / path.stat().st_size, 3)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--reading", action="append", default=[], metavar="OUT=KIND")
    ap.add_argument("--presets", default="A8W8,A16W8,BFP16,MXINT8")
    ap.add_argument("--calib", type=int, default=12)
    ap.add_argument("--held", type=int, default=32)
    ap.add_argument("--json")
    a = ap.parse_args()
    readings = dict(item.rsplit("=", 1) for item in a.reading)
    make = newmodels.MODELS[a.model][1]
    calib, held = make(a.calib, 1), make(a.held, 1000)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for preset in a.presets.split(","):
            for told in ({}, readings) if readings else ({},):
                row = one(a.model, preset, told, calib, held, Path(tmp) / f"{preset}.onnx")
                rows.append(row)
                print(json.dumps(row), flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
