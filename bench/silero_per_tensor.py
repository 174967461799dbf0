"""silero VAD with per-tensor int8 weights (issue 27.6): share of speech decisions (0.5) that
agree with the float model on a 30 s clip (``testkit.audio.speech_mix`` seed 2; calibration: 1.5 s,
seed 1, as tests/test_quantize_silero.py). Prints one line per run.

    python bench/silero_per_tensor.py if|ifless preset A8W8|A16W8 [pc] [key=value ...]   # our preset, per-tensor weights
    python bench/silero_per_tensor.py if|ifless reference A8W8|A16W8 [pc]                # the reference tool's preset via ModelQuantizer

``pc`` keeps per-channel weights (the comparison); ``key=value`` changes a QuantConfig field
(``outlier_split.min_gain=4.0``, ``split_outliers=False``, ``equalize=False``). The accuracy
floor's repair is off on both routes (the figure is the integer model's); ``repair`` turns it on.
"""

from __future__ import annotations

import _common  # noqa: F401  (the repository root on sys.path: testkit)
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

from onnxptq import get_preset, quantize
from onnxptq.sessions import open_session
from testkit import audio
from testkit.models import SILERO, SILERO_IFLESS, model_path
from testkit.reference import quantize_reference

EVAL_SECONDS = 30.0


def _reference(path: Path, feeds: list, preset: str, per_channel: bool, repair: bool) -> str:
    out = str(Path(tempfile.mkdtemp()) / "silero_ref.onnx")
    quantize_reference(path, out, feeds, preset, per_channel=per_channel, repair=repair)
    return out


def main(argv: list[str]) -> int:
    variant, route, preset = argv[:3]
    per_channel = "pc" in argv[3:]
    repair = "repair" in argv[3:]
    changes = {k: _common.cli_value(v) for k, v in (a.split("=", 1) for a in argv[3:] if "=" in a)}
    path = model_path({"if": SILERO, "ifless": SILERO_IFLESS}[variant])
    calib, _ = audio.speech_mix(seed=1, seconds=1.5)
    clip, _ = audio.speech_mix(seed=2, seconds=EVAL_SECONDS)
    feeds = audio.vad_feeds(str(path), calib)
    reference = audio.run_vad(str(path), clip)[0]
    start = time.perf_counter()
    if route == "reference":
        model = _reference(path, feeds, preset, per_channel, repair)
    else:
        cfg = get_preset(preset)
        cfg = cfg.replace(calibration=dataclasses.replace(cfg.calibration, progress=False),
                          weight=dataclasses.replace(cfg.weight, per_channel=per_channel), repair=repair)
        for key, value in changes.items():
            if "." in key:
                outer, inner = key.split(".", 1)
                cfg = cfg.replace(**{outer: dataclasses.replace(getattr(cfg, outer), **{inner: value})})
            else:
                cfg = cfg.replace(**{key: value})
        model = quantize(path, cfg, feeds, eval_samples=1).model
    probs, _ = audio.run_vad(open_session(model), clip)
    figures = audio.compare_probs(reference, probs)
    print(f"silero {variant} {route} {preset} {'pc' if per_channel else 'pt'}{' repair' if repair else ''} {changes or ''}: "
          f"agreement {figures['agreement']:.4f} cosine {figures['cosine']:.4f} ({time.perf_counter() - start:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
