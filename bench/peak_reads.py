"""A heat map declared ``peaks`` (analysis/peak_reads.py) against its task, repair off: does the verdict hold where
the task holds and break where it breaks (issue 27, branch peaks)?

Each preset is one quantize in this process (repair off), judged with the heat map's structural reading and with
it declared ``peaks``; the task metric is bench/newmodels.py's on the held-out feeds.

    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/peak_reads.py --model centerface --output 537 \
        --presets FP16,BF16,A16W8,A8W8,MX9 --held 16 --json /work/cache/peaks/centerface.json
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


def row(name: str, preset: str, output: str, kind: str, calib, held, out: Path) -> dict:
    """One preset quantized with repair off, the floor measured plain and with ``output`` declared ``kind``."""
    import onnxptq
    from onnxptq.config.presets import resolve_config

    rel, _, metric_name, metric = newmodels.MODELS[name]
    path = newmodels.SRC / rel
    verdicts = {}
    for label, readings in (("structural", {}), (kind, {output: kind})):
        config = resolve_config(preset).replace(repair=False, floor_output_reading=readings)
        c0 = time.process_time()
        result = onnxptq.quantize(str(path), config, data=list(calib), output=str(out))
        check = result.floor.outputs.get(output) if result.floor is not None else None
        verdicts[label] = {"ok": None if result.floor is None else bool(result.floor.ok),
                           "output_ok": None if check is None else bool(check.ok),
                           "text": "" if check is None else check.describe()[:400],
                           "cpu_s": round(time.process_time() - c0, 1)}
    ref, test = zoo.session_runner(path), zoo.session_runner(out)
    return {"model": name, "preset": preset, "metric": metric_name,
            "agreement": round(float(metric(ref, test, held, None)), 4), **verdicts}


def _plain(value: object) -> object:
    """A NumPy scalar (a verdict's ``ok`` may be ``np.bool_``) as its Python value, for JSON."""
    return value.item() if hasattr(value, "item") else str(value)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--output", required=True, help="the heat map output declared")
    ap.add_argument("--kind", default="peaks", help="its declared reading (default peaks)")
    ap.add_argument("--presets", required=True)
    ap.add_argument("--calib", type=int, default=12)
    ap.add_argument("--held", type=int, default=16)
    ap.add_argument("--json")
    a = ap.parse_args()
    make = newmodels.MODELS[a.model][1]
    calib, held = make(a.calib, 1), make(a.held, 1000)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for preset in a.presets.split(","):
            r = row(a.model, preset, a.output, a.kind, calib, held, Path(tmp) / f"{preset}.onnx")
            print(json.dumps(r, default=_plain), flush=True)
            rows.append(r)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1, default=_plain))


if __name__ == "__main__":
    main()
