"""Which plans a source tree changes: every zoo and outside model planned per preset, one line each.

Run it once per source tree (PYTHONPATH=<tree>/src) with ``--json``, then ``--compare A.json B.json``
lists the models and presets whose plan differs (a tensor's format, exponent rule or block axis, or
the float set) and the tensors that differ. A model whose plan is the same is emitted, calibrated and
judged exactly as before, so only the listed ones need an end-to-end run (issue 27 item 5,
bench/RESULTS.md "... branch mxfp8e").

    PYTHONPATH=/work/cache/mxfp8e/base/src:.:bench OMP_NUM_THREADS=1 nice -n 5 python bench/plan_signatures.py --presets MXFP8_E4M3,MXFP4,BFP16,MXINT8 --json base.json
    PYTHONPATH=src:.:bench ... python bench/plan_signatures.py ... --json branch.json
    python bench/plan_signatures.py --compare base.json branch.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def check(path: Path, preset: str) -> dict:
    import onnx

    import onnxptq
    from onnxptq.pipeline.plan import make_plan
    from onnxptq.pipeline.prepare import prepare_for_quantization

    config = onnxptq.get_preset(preset)
    plan = make_plan(prepare_for_quantization(onnx.load(str(path)), config), config)
    tensors = {n: repr((t.quant.format, t.quant.attrs, t.axis, t.producer_quant and t.producer_quant.attrs))
               for n, t in plan.tensors.items()}
    return {"tensors": tensors, "float": sorted(plan.float_tensors)}


def compare(a_path: str, b_path: str) -> None:
    a = {(r["model"], r["preset"]): r for r in json.loads(Path(a_path).read_text())}
    b = {(r["model"], r["preset"]): r for r in json.loads(Path(b_path).read_text())}
    same = 0
    for key in sorted(set(a) & set(b)):
        ra, rb = a[key], b[key]
        if "error" in ra or "error" in rb:
            print(key, "error", ra.get("error"), rb.get("error"))
            continue
        ta, tb = ra["tensors"], rb["tensors"]
        diff = sorted(n for n in set(ta) | set(tb) if ta.get(n) != tb.get(n))
        fl = sorted(set(ra["float"]) ^ set(rb["float"]))
        if diff or fl:
            print(f"{key[0]} {key[1]}: {len(diff)} of {len(tb)} tensors differ {diff[:8]}; float set differs {fl[:8]}")
        else:
            same += 1
    print(f"{same} of {len(set(a) & set(b))} plans identical")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--compare"]:
        compare(sys.argv[2], sys.argv[3])
    else:
        from _plan_scan import scan_main  # bench/: every zoo model and outside model whose file is here

        scan_main(__doc__.splitlines()[0], check, "MXFP8_E4M3,MXFP4,BFP16,MXINT8",
                  printable=lambda row: {"model": row["model"], "preset": row["preset"], "n": len(row.get("tensors", {})),
                                         "error": row.get("error", "")}, quiet=True)
