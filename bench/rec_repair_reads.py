"""PP-OCRv4 rec under a preset, repair on and off: what repair kept, each candidate's verdict, and
the delivered models judged on the 200 evaluation lines by the floor's own judge and against the truth.

Why (issue 27 item 2, bench/RESULTS.md "False breaks on few reads"): with repair the suite's A16W8
CER was 0.0444, without 0.0393 (float 0.0387). Repair judges its candidates on the 64 calibration
lines (fewer than 12 feeds: all reused); this says whether the repaired model is worse than the
plain one by that judgement on lines it never saw, and where its CER goes.

The data of tests/test_quantize_ppocr.py (64 calibration lines, seed 1, in batches of 8; 200
evaluation lines, seed 3). Per run one JSON line: ``repair`` (nodes kept float / stepped up, builds,
every candidate's judged figure on the 64 lines), ``eval200`` (bench/rec_floor_strings.py's figures:
the floor's strings judge, exact agreement with float's strings after the CER's normalisation, CER),
and ``edits``: over the lines whose normalised string differs from float's, the candidate's edit
distance to the truth minus float's (the lines' share of the CER change), and how many of those
lines end in characters float's string does not have.

    PYTHONPATH=$PWD/src:$PWD OMP_NUM_THREADS=1 nice -n 5 python bench/rec_repair_reads.py A16W8
"""

from __future__ import annotations

import _common  # noqa: F401  (the repository root on sys.path: testkit)
import dataclasses
import json
import sys
import time
from typing import Any

import numpy as np

from onnxptq import get_preset, quantize
from onnxptq.algorithms import repair as repair_mod
from onnxptq.analysis.class_scores import collapse, edit_distance
from rec_floor_strings import _compare, _outputs, _session
from testkit import ocr, ocr_reference
from testkit.models import model_path


def _texts(outs: list[np.ndarray], chars: list[str]) -> list[str]:
    return [ocr.normalize_text("".join(chars[i - 1] for i in collapse(np.argmax(s, -1), 0))) for s in np.concatenate(outs)]


def _edits(ref: list[str], got: list[str], truth: list[str]) -> dict[str, Any]:
    changed = [(f, q, t) for f, q, t in zip(ref, got, truth) if f != q]
    delta = [edit_distance(list(q), list(t)) - edit_distance(list(f), list(t)) for f, q, t in changed]
    return {"lines_changed": len(changed), "edits_vs_truth_minus_float": int(sum(delta)),
            "lines_worse": sum(d > 0 for d in delta), "lines_better": sum(d < 0 for d in delta),
            "appended_at_end": sum(q.startswith(f) and len(q) > len(f) for f, q, _ in changed),
            "truth_chars": sum(len(t) for t in truth)}


def main(presets: list[str]) -> None:
    path = model_path("rec")
    rec = ocr_reference.rec_reference(path, 64, 1, 200, 3)
    chars, images, texts = rec["chars"], rec["images"], rec["texts"]
    batches = [{"x": rec["calib"][i:i + 8]} for i in range(0, 64, 8)]
    ref = _outputs(_session(str(path)), images)
    ref_texts, truth = _texts(ref, chars), [ocr.normalize_text(t) for t in texts]
    judged: list[dict[str, Any]] = []
    real = repair_mod.measure

    def spy(*args: Any, **kwargs: Any) -> Any:  # every candidate's verdict, as repair judged it
        verdict = real(*args, **kwargs)
        for check in verdict.outputs.values():
            if check.positions is not None:
                p = check.positions
                judged.append({"ok": verdict.ok, "strings": round(p.agreement, 4), "sure_changed": p.changed - p.unsure_changed,
                               "changed": p.changed, "cosine": round(check.cosine, 5)})
        return verdict

    repair_mod.measure = spy
    for preset in presets:
        for repair in (False, True):
            judged.clear()
            cfg = get_preset(preset)
            cfg = cfg.replace(calibration=dataclasses.replace(cfg.calibration, progress=False), repair=repair)
            c0 = time.process_time()
            result = quantize(str(path), cfg, batches)
            cpu = time.process_time() - c0
            record = result.plan.repair or {}
            got = _outputs(_session(result.model.SerializeToString()), images)
            print(json.dumps({"preset": preset, "repair": repair, "quantize_cpu": round(cpu, 1),
                              "floor_ok": result.floor.ok if result.floor is not None else None,
                              "kept_float": len(record.get("kept_float", {})), "stepped_up": len(record.get("stepped_up", {})),
                              "of": record.get("candidates"), "finished": record.get("finished"), "candidates_judged": list(judged),
                              "eval200": _compare(ref, got, chars, texts), "edits": _edits(ref_texts, _texts(got, chars), truth)}),
                  flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
