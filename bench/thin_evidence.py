"""The floor's first verdict on a plain build, judged by two library trees on the same outputs (tail22, issue 27).

Why: a change to how the floor judges thin evidence (few held-out feeds, calibration feeds pooled in) changes verdicts,
not builds; judging one set of saved outputs with each tree's ``floor.measure`` isolates that change from the builds'
noise and costs one quantization per row, not two. ``save`` quantizes a model with ``repair=False`` (the plain build the
floor judges first) with the library on ``PYTHONPATH``, runs float and the build on the data the library saw, split as
the library splits it (``calibrate.split_holdout``: every third of the first feeds held out; the first ``eval_samples``
of the others are the calibration feeds the floor may pool), and saves both to an ``.npz``; ``judge`` reads it and
prints the verdict as the pipeline reaches it (measured on the held-out feeds, then again with the calibration feeds
where the verdict asks for them: ``pipeline/verify.judgement``). Models: a zoo member (testkit/zoo.py) or one of
bench/newmodels.py's (their environment variables as there), or the shipped PP-OCR
``cls``/``rec``.

    PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 nice -n 5 python bench/thin_evidence.py save terrain_unet MXINT8 --out DIR
    PYTHONPATH=<tree>/src:.:bench python bench/thin_evidence.py judge DIR/terrain_unet.MXINT8.npz
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np

import _common  # noqa: F401  (the repository root on sys.path)

EVAL_SAMPLES = 8  # calibrate.DEFAULT_EVAL_SAMPLES: the calibration feeds the floor may pool


def _model(name: str, calib: int) -> tuple[str, list[dict[str, np.ndarray]]]:
    """The model's path and the calibration data a user of it hands ``quantize`` (the zoo's or bench/newmodels.py's)."""
    from testkit import ocr, zoo
    from testkit.models import model_path

    if name in ("cls", "rec"):  # the shipped PP-OCR models on 32 rendered lines (seed 1), one a feed, as bench/same_bytes.py
        images, _ = ocr.render_cls(32, seed=1) if name == "cls" else ocr.render_lines(32, seed=1)
        return str(model_path(name)), [{"x": images[i:i + 1]} for i in range(len(images))]
    member = next((z for z in zoo.ZOO if z.name == name), None)
    if member is not None:
        return str(member.path()), member.samples("calibration")
    import newmodels as nm

    rel, make, _, _ = nm.MODELS[name]
    return str(nm.SRC / rel), make(calib, 1)


def save(name: str, preset: str, out: Path, calib: int) -> None:
    import onnxptq
    from onnxptq.config.presets import get_preset
    from onnxptq.pipeline.calibrate import DEFAULT_HOLDOUT, split_holdout
    from testkit import zoo

    path, data = _model(name, calib)
    out.mkdir(parents=True, exist_ok=True)
    built = out / f"{name}.{preset}.onnx"
    c0 = time.process_time()
    result = onnxptq.quantize(path, dataclasses.replace(get_preset(preset), repair=False), data=data, output=str(built))
    cpu = time.process_time() - c0
    rest, held, reused = split_holdout(iter(data), DEFAULT_HOLDOUT)
    seen = [] if reused else list(rest)[:EVAL_SAMPLES]
    ref, got = zoo.session_runner(path), zoo.session_runner(str(built))
    import onnxruntime as ort

    names = [o.name for o in ort.InferenceSession(path, providers=["CPUExecutionProvider"]).get_outputs()]
    arrays: dict[str, np.ndarray] = {}
    for tag, feeds in (("held", held), ("seen", seen)):
        for i, feed in enumerate(feeds):
            for side, run in (("ref", ref), ("got", got)):
                for n, v in zip(names, run(feed)):
                    arrays[f"{tag}|{side}|{i}|{n}"] = np.asarray(v)
    meta = {"model": name, "preset": preset, "path": path, "held": len(held), "seen": len(seen), "reused": reused,
            "quantize_cpu_s": round(cpu, 1), "summary_floor": [ln for ln in result.summary().splitlines() if "floor" in ln]}
    np.savez(out / f"{name}.{preset}.npz", meta=np.array(json.dumps(meta)), **arrays)
    print(json.dumps(meta, indent=1), flush=True)


def _feeds(z: np.lib.npyio.NpzFile, tag: str, side: str) -> list[dict[str, np.ndarray]]:
    out: dict[int, dict[str, np.ndarray]] = {}
    for key in z.files:
        parts = key.split("|")
        if len(parts) == 4 and parts[0] == tag and parts[1] == side:
            out.setdefault(int(parts[2]), {})[parts[3]] = z[key]
    return [out[i] for i in sorted(out)]


def judge(npz: Path) -> None:
    import onnx

    from onnxptq.analysis.floor import floor_for, measure, readings_of
    from onnxptq.config.presets import resolve_config

    z = np.load(npz)
    meta = json.loads(str(z["meta"]))
    readings = readings_of(onnx.load(meta["path"], load_external_data=False))
    floor = floor_for(resolve_config(meta["preset"]))
    held = (_feeds(z, "held", "ref"), _feeds(z, "held", "got"))
    verdict = measure(*held, floor, reused=meta["reused"], **readings)
    if not meta["reused"] and verdict.wants_calibration_feeds and meta["seen"]:
        verdict = measure(*held, floor, reused=meta["reused"], **readings, seen=(_feeds(z, "seen", "ref"), _feeds(z, "seen", "got")))
    state = ("holds" if verdict.ok and not verdict.unjudged and not verdict.unconfirmed else
             "BELOW (acted on)" if verdict.below else "BROKEN" if not verdict.ok else
             "could not judge" if verdict.unjudged else "could not confirm")
    print(f"{meta['model']} {meta['preset']} ({meta['held']} held-out, {meta['seen']} calibration feeds): {state} — "
          f"{verdict.describe()}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("save")
    s.add_argument("model")
    s.add_argument("presets")
    s.add_argument("--out", type=Path, required=True)
    s.add_argument("--calib", type=int, default=12, help="bench/newmodels.py's calibration feeds (the zoo's own count otherwise)")
    j = sub.add_parser("judge")
    j.add_argument("npz", nargs="+", type=Path)
    args = ap.parse_args(argv)
    if args.cmd == "save":
        for preset in args.presets.split(","):
            save(args.model, preset, args.out, args.calib)
    else:
        for npz in args.npz:
            judge(npz)
    return 0


if __name__ == "__main__":
    sys.exit(main())
