"""Why the accuracy floor breaks on PP-OCRv4 rec's CTC reads under 16-bit presets: the floor's own
verdict beside what a user measures on the 200 held-out lines.

The data of tests/test_quantize_ppocr.py (64 calibration lines, seed 1, in batches of 8; 200
evaluation lines, seed 3). Per preset (``PRESET``, or ``A16W16``: A16W8 with int16 per-channel
weights, to tell weights from activations), quantized with ``repair=False``, one JSON line:

* ``floor``: the verdict ``quantize`` returned (which judge, on which samples, the strings' figures:
  reads, strings changed, those changed only where float is unsure, the margins' estimate of the
  reads against the strings seen);
* ``eval200``: the same judge (``class_scores.judge_positions``) on the 200 evaluation lines, the
  strings that differ from float's raw and after the test harness's CER normalisation
  (``testkit.ocr.normalize_text``: NFKC, leading/trailing spaces stripped, space runs merged), the
  CER against the truth, the lines float read right (normalised) that the candidate reads wrong
  (``right_lost``) and the other way round (``right_won``), and the judge's CPU seconds;
* one line ``float+noise``: float's own reads under ±½ grey level of uniform input noise, the
  same figures (how unstable float's strings are by themselves).

    PYTHONPATH=$PWD/src:$PWD OMP_NUM_THREADS=1 nice -n 5 python bench/rec_floor_strings.py A16W8 A16W16 BF16 BFP16 MX9 MXINT8
"""

from __future__ import annotations

import _common  # noqa: F401  (the repository root on sys.path: testkit)
import dataclasses
import json
import sys
import time
from typing import Any

import numpy as np
import onnxruntime as ort

from onnxptq import get_preset, quantize
from onnxptq.analysis.class_scores import collapse, judge_positions
from testkit import ocr, ocr_reference
from testkit.models import model_path


def _session(model: Any) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def _outputs(session: ort.InferenceSession, images: np.ndarray) -> list[np.ndarray]:
    name = session.get_inputs()[0].name
    return [session.run(None, {name: images[i:i + 8]})[0] for i in range(0, len(images), 8)]


def _compare(ref: list[np.ndarray], got: list[np.ndarray], chars: list[str], texts: list[str]) -> dict[str, Any]:
    def text(scores: np.ndarray) -> str:
        return "".join(chars[i - 1] for i in collapse(np.argmax(scores, -1), 0))

    c0 = time.process_time()
    p = judge_positions(ref, got)
    judge_cpu = time.process_time() - c0
    pairs = [(text(a), text(b)) for a, b in zip(np.concatenate(ref), np.concatenate(got))]
    normalised = sum(ocr.normalize_text(a) != ocr.normalize_text(b) for a, b in pairs)
    truth = [ocr.normalize_text(t) for t in texts]
    norm = [(ocr.normalize_text(a), ocr.normalize_text(b)) for a, b in pairs]
    lost = sum(a == t != b for (a, b), t in zip(norm, truth))  # float read the line right, the candidate not
    won = sum(b == t != a for (a, b), t in zip(norm, truth))  # the other way round
    cer = ocr.cer([ocr.normalize_text(b) for _, b in pairs], [ocr.normalize_text(t) for t in texts])
    return {"floor_strings": round(p.agreement, 4), "estimated_reads": None if p.estimated_reads is None else round(p.estimated_reads, 4),
            "changed": p.changed, "unsure_changed": p.unsure_changed, "sure_changed": p.changed - p.unsure_changed, "reads": p.reads,
            "normalised_changed": int(normalised), "normalised_agreement": round(1 - normalised / len(pairs), 4),
            "right_lost": int(lost), "right_won": int(won), "float_right": int(sum(a == t for (a, _), t in zip(norm, truth))),
            "cer": round(cer, 4), "judge_cpu": round(judge_cpu, 2)}


def main(presets: list[str]) -> None:
    path = model_path("rec")
    rec = ocr_reference.rec_reference(path, 64, 1, 200, 3)
    chars, images, texts = rec["chars"], rec["images"], rec["texts"]
    batches = [{"x": rec["calib"][i:i + 8]} for i in range(0, 64, 8)]
    float_session = _session(str(path))
    ref = _outputs(float_session, images)
    step = (float(images.max()) - float(images.min())) / 255
    noisy = (images + np.random.default_rng(0).uniform(-step / 2, step / 2, images.shape)).astype(images.dtype)
    print(json.dumps({"preset": "float+noise", "float_cer": round(rec["float"], 4),
                      "eval200": _compare(ref, _outputs(float_session, noisy), chars, texts)}), flush=True)
    for preset in presets:
        cfg = get_preset("A16W8" if preset == "A16W16" else preset)
        if preset == "A16W16":
            cfg = cfg.replace(weight=dataclasses.replace(cfg.weight, format="int16"))
        cfg = cfg.replace(calibration=dataclasses.replace(cfg.calibration, progress=False), repair=False)
        result = quantize(str(path), cfg, batches)
        verdict = result.floor
        checks = {name: {"ok": c.ok, "seen_feeds": c.seen_feeds, "judged": c.describe(),
                         "positions": c.positions.to_json() if c.positions is not None else None}
                  for name, c in verdict.outputs.items()}
        got = _outputs(_session(result.model.SerializeToString()), images)
        print(json.dumps({"preset": preset, "floor": {"ok": verdict.ok, "samples": verdict.samples, "reused": verdict.reused,
                                                       "checks": checks},
                          "eval200": _compare(ref, got, chars, texts)}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
