"""Second looks at the thirteenth round's rows, on the models bench/newmodels.py wrote to --out-dir.

Why a script of its own: bench/newmodels.py judges each model on independent feeds with one task metric; four of its
rows need a reading that metric cannot give, and the RESULTS section quotes these numbers:

* ``akiki``: the VAD as its package runs it, streaming, each window fed the quantized model's OWN state from the window
  before (bench/newmodels.py feeds float's state, so a state error cannot compound there);
* ``surfaces``: the decision-tree surrogate's "best of 16 settings": for each changed pick, float's score of the pick the
  quantized model made (the search's regret) against float's gap between its best two;
* ``silero``: faster-whisper's Silero VAD v6, the cosine of each output over the held-out clips (``hn``/``cn``, the LSTM
  state after the whole clip, which faster-whisper reads only past 10,000 windows);
* ``dnsmos``: DNSMOS P.808's MOS error against float's.

    PYTHONPATH=src:. OMP_NUM_THREADS=1 python bench/newmodels13_checks.py --out-dir /work/cache/newmodels13/out \
        --checks akiki,surfaces,silero,dnsmos
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from bench import newmodels as nm

PRESETS = ("BF16", "FP16", "A16W8", "A8W8", "BFP16", "MX9", "MXINT8", "MXFP8_E4M3")


def _session(path):
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def akiki_streaming(out_dir: Path, clips: int = 4) -> dict[str, float]:
    """Share of 16 ms windows whose speech call (p >= 0.5) equals float's when each model carries its own ``h``."""
    ref = _session(nm.AKIKI)
    rng = np.random.default_rng(5)
    audio = [nm._noisy_speech(rng, 16000).astype(np.float32) for _ in range(clips)]
    res = {}
    for preset in PRESETS:
        q = _session(out_dir / f"akiki_vad.{preset}.onnx")
        agree = []
        for a in audio:
            ctx, h1 = np.zeros(320, np.float32), np.zeros((1, 1, 128), np.float32)
            h2 = h1.copy()
            for s in range(0, len(a) - 255, 256):
                w = np.concatenate([ctx, a[s : s + 256]])[None]
                p1, h1 = ref.run(None, {"audio_with_context": w, "h": h1})
                p2, h2 = q.run(None, {"audio_with_context": w, "h": h2})
                agree.append(bool(p1.ravel()[0] >= 0.5) == bool(p2.ravel()[0] >= 0.5))
                ctx = w[0, -320:]
        res[preset] = round(float(np.mean(agree)), 4)
        res["windows"] = len(agree)
    return res


def surfaces_regret(out_dir: Path) -> dict[str, dict]:
    feeds = nm.surfaces_dtc_feeds(32, 1000)
    ref = _session(nm.MODELS["surfaces_dtc"][0])
    res = {}
    for preset in PRESETS:
        q = _session(out_dir / f"surfaces_dtc.{preset}.onnx")
        regret, gap, err = [], [], []
        for f in feeds:
            a, b = ref.run(None, f)[0].ravel(), q.run(None, f)[0].ravel()
            err.append(float(np.abs(a - b).max()))
            if a.argmax() != b.argmax():
                top2 = np.sort(a)[-2:]
                regret.append(round(float(a.max() - a[b.argmax()]), 4))
                gap.append(round(float(top2[1] - top2[0]), 4))
        res[preset] = {"changed": len(regret), "regret": regret, "float_top2_gap": gap, "max_abs_err": round(max(err), 4)}
    return res


def silero_outputs(out_dir: Path) -> dict[str, list]:
    feeds = nm.fw_silero_feeds(32, 1000)
    ref = _session(nm.MODELS["fw_silero_v6"][0])
    res = {}
    for preset in PRESETS:
        q = _session(out_dir / f"fw_silero_v6.{preset}.onnx")
        cos = [[], [], []]
        for f in feeds:
            for i, (u, v) in enumerate(zip(ref.run(None, f), q.run(None, f))):
                u, v = u.ravel().astype(np.float64), v.ravel().astype(np.float64)
                cos[i].append(float(u @ v / max(np.linalg.norm(u) * np.linalg.norm(v), 1e-30)))
        res[preset] = [(name, round(float(np.mean(c)), 4), round(float(np.min(c)), 4))
                       for name, c in zip(("speech_probs", "hn", "cn"), cos)]
    return res


def dnsmos_mos(out_dir: Path) -> dict[str, dict]:
    feeds = nm.dnsmos_p808_feeds(32, 1000)
    ref = _session(nm.MODELS["dnsmos_p808"][0])
    a = np.array([ref.run(None, f)[0].ravel()[0] for f in feeds], np.float64)
    res = {"float_std": round(float(a.std()), 3)}
    for preset in PRESETS:
        q = _session(out_dir / f"dnsmos_p808.{preset}.onnx")
        d = np.abs(a - np.array([q.run(None, f)[0].ravel()[0] for f in feeds], np.float64))
        res[preset] = {"max": round(float(d.max()), 4), "mean": round(float(d.mean()), 4),
                       "within_0.05": round(float(np.mean(d <= 0.05)), 3)}
    return res


CHECKS = {"akiki": akiki_streaming, "surfaces": surfaces_regret, "silero": silero_outputs, "dnsmos": dnsmos_mos}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out-dir", default="/work/cache/newmodels13/out")
    ap.add_argument("--checks", default=",".join(CHECKS))
    a = ap.parse_args()
    for name in a.checks.split(","):
        print(json.dumps({name: CHECKS[name](Path(a.out_dir))}), flush=True)


if __name__ == "__main__":
    main()
