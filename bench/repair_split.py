"""Where repair's CPU goes, in one process: the plain quantization, then the search split by stage (issue 27 item 2).

``python bench/repair_split.py MODEL PRESET [prof]`` quantizes MODEL (named as in bench/quantize_stages.py: a zoo
name, ``cls``/``rec``, ``new:<name>``; ``sbcls``: PP-OCR cls on same_bytes' 32 rendered lines, seed 1) with PRESET at
its defaults and prints one JSON line: the call's CPU s (``time.process_time``: every thread of the process), the
plain quantization's (the call less ``enforce_floor``), and ``split``: CPU s of repair's stages, each wrapped where
algorithms/repair.py calls it — ``cand_build`` (a candidate's pipeline build), ``cand_session`` (its onnxruntime
session), ``cand_runs`` (its held-out feeds), ``cand_measure`` (the floor's verdict on them), ``ranking`` (the
error each candidate adds, repair_order.py), ``delivered`` (the delivered build, packed and judged again by
complete()), ``repair_total``; what is left of ``repair_total`` is the calibration feeds' runs of the candidates,
their margins measure, held candidates judged for the delivered build and the search's set-up. ``prof``: a cProfile
of ``enforce_floor`` on the CPU clock, by cumulative time, and the callers of its dearest functions.

    OMP_NUM_THREADS=1 PYTHONPATH=src:.:bench python bench/repair_split.py ddddocr_ocr MXFP8_E4M3
"""

from __future__ import annotations

import collections
import cProfile
import dataclasses
import hashlib
import json
import logging
import os
import pstats
import sys
import tempfile
import time
from typing import Any, Callable

sys.path[:0] = [os.path.dirname(os.path.abspath(__file__))]


def _feeds(model: str) -> tuple[Any, list[dict[str, Any]]]:
    from quantize_stages import _data

    if model != "sbcls":
        return _data(model, 0)
    from testkit import ocr
    from testkit.models import model_path

    calib, _ = ocr.render_cls(32, seed=1)
    return model_path("cls"), [{"x": calib[i:i + 1]} for i in range(len(calib))]


def main() -> None:
    model, preset = sys.argv[1], sys.argv[2]
    prof = len(sys.argv) > 3 and sys.argv[3] == "prof"
    import _common  # noqa: F401
    from onnxptq import quantize
    from onnxptq.algorithms import repair
    from onnxptq.config.presets import get_preset

    logging.disable(logging.WARNING)
    spent: dict[str, float] = collections.defaultdict(float)
    count: collections.Counter[str] = collections.Counter()
    profile = cProfile.Profile(time.process_time)

    def wrap(name: str, label: str, profiled: bool = False) -> None:
        f: Callable[..., Any] = getattr(repair, name)

        def w(*a: Any, **k: Any) -> Any:
            t = time.process_time()
            if profiled and prof:
                profile.enable()
            try:
                return f(*a, **k)
            finally:
                if profiled and prof:
                    profile.disable()
                spent[label] += time.process_time() - t
                count[label] += 1
        setattr(repair, name, w)

    for name, label in (("build_model", "cand_build"), ("judge_session", "cand_session"), ("held_out_outputs", "cand_runs"),
                        ("measure", "cand_measure"), ("added_error", "ranking"), ("complete", "delivered")):
        wrap(name, label)
    wrap("enforce_floor", "repair_total", profiled=True)
    path, data = _feeds(model)
    out = os.path.join(tempfile.mkdtemp(prefix="repair_split_"), "q.onnx")
    cfg = get_preset(preset)
    cfg = cfg.replace(calibration=dataclasses.replace(cfg.calibration, progress=False))
    t = time.process_time()
    result = quantize(str(path), cfg, data, out)
    cpu = time.process_time() - t
    if prof:
        stats = pstats.Stats(profile)
        stats.sort_stats("cumulative").print_stats(70)
        stats.print_callers("run_feeds|shift_share|open_session|build_model")
    rep = result.repair or {}
    print(json.dumps({"model": model, "preset": preset, "cpu": round(cpu, 2), "plain": round(cpu - spent["repair_total"], 2),
                      "split": {k: round(v, 2) for k, v in spent.items()}, "count": count, "evaluations": rep.get("evaluations"),
                      "stepped": len(rep.get("stepped_up") or {}), "kept": len(rep.get("kept_float") or {}),
                      "builds": rep.get("build_cpu_seconds"), "capped": rep.get("capped"), "not_tried": rep.get("not_tried"),
                      "sha": hashlib.sha256(open(out, "rb").read()).hexdigest()[:16], "load": round(os.getloadavg()[0], 1)}))


if __name__ == "__main__":
    main()
