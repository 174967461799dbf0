"""Multi-label heads judged per column (analysis/multilabel.py, issue 27): the zoo's linear heads' statistics,
madmom's notes model before → after, and the verdicts of every other linear head, which must not move.

    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/multilabel_heads.py survey
    PYTHONPATH=<tree>/src:. OMP_NUM_THREADS=1 nice -n 5 python bench/multilabel_heads.py notes A8W8,A16W8,...
    PYTHONPATH=<tree>/src:. OMP_NUM_THREADS=1 nice -n 5 python bench/multilabel_heads.py verdicts FP16,A16W8,MXFP8_E4M3
    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/multilabel_heads.py no-repair

survey: every graph output of the zoo (testkit/zoo.py and bench/newmodels.py) that the class-score rule reads as
class scores from a linear layer or an arg-max (``class_like_outputs``, rules 2-3), on float's outputs of 12
calibration + 4 held-out feeds (seeds 1 / 1000): columns, positions, the shift share over the independent value
(``head_kind.shift_share``), the margin share (``multilabel.margin_share``) and whether ``multilabel_like`` takes it.
Relative model paths of bench/newmodels.py resolve under NEWMODELS_SRC (the script changes into it).
notes: madmom_notes_brnn quantized with each preset's defaults (repair on) from 12 calibration feeds: the floor's
verdict (before repair where it repaired), the nodes kept, the note F1 on 32 held-out clips (the package's
NotePeakPickingProcessor), size x, the process's CPU s of the quantize. Run once with the base tree's src, once
with the branch's. verdicts: the other models with such a head (and the other madmom models), repair off, each
preset: the verdict's text and ok; a diff of two trees' outputs shows whether any moved. no-repair: the notes model
quantized with repair off; ``ColumnRuns``' judgement (F1, decisions, cells' cosine) on its 4 held-out clips and on
them with the 12 calibration clips, beside the note F1 on 32 held-out clips: does the runs' F1 track the task's?
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import onnx  # noqa: E402

from bench import newmodels as nm  # noqa: E402
from testkit import zoo  # noqa: E402

#: the models whose linear/arg-max heads the survey found, and the madmom models without one
VERDICT_MODELS = ("ddddocr_ocr", "lac", "khmersm", "vtop_captcha", "captcha_whisperer", "trueocr_order", "eeg_seizure",
                  "eeg_spindles", "malviz", "tashkeel", "orinet", "table_cls", "madmom_key", "madmom_onsets",
                  "madmom_beats", "madmom_chords_cnn", "madmom_chroma")


def _model(name: str) -> tuple[str, object]:
    """``(path, feeds(n, seed))`` of a zoo or bench/newmodels.py model."""
    if name in nm.MODELS:
        rel, make, *_ = nm.MODELS[name]
        return str(nm.SRC / rel), make
    z = zoo.get(name)
    return str(z.path()), lambda n, seed: z.make(z.root(), n, seed)


def survey(names: list[str]) -> None:
    from onnxptq.analysis.class_scores import class_like_outputs
    from onnxptq.analysis.head_kind import shift_share
    from onnxptq.analysis.multilabel import margin_share, multilabel_like

    print("| model | output | rule | rank | C | positions | shift share / independent | margin share | multilabel_like |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in names:
        try:
            path, make = _model(name)
            heads = {n: k for n, k in class_like_outputs(onnx.load(path, load_external_data=False)).items() if k.rule != "softmax"}
        except FileNotFoundError as exc:
            print(f"| {name} | not here: {exc} | | | | | | | |")
            continue
        if not heads:
            continue
        run = zoo.session_runner(path)
        outs = [o.name for o in onnx.load(path, load_external_data=False).graph.output]
        values = {n: [] for n in heads}
        for f in make(12, 1) + make(4, 1000):
            res = run(f)
            for n in heads:
                values[n].append(np.asarray(res[outs.index(n)]))
        for n, v in values.items():
            width = v[0].shape[-1]
            share, positions = shift_share(v)
            ratio = share * math.sqrt(width - 1) if width > 1 else float("nan")
            print(f"| {name} | {n[:32]} | {heads[n].rule} | {v[0].ndim} | {width} | {positions} | {ratio:.2f} | "
                  f"{margin_share(v):.3f} | {multilabel_like(v)} |", flush=True)


def notes(presets: list[str], out: Path) -> None:
    import onnxptq

    rel, make, _, metric = nm.MODELS["madmom_notes_brnn"]
    path = nm.SRC / rel
    calib, held = make(12, 1), make(32, 1000)
    ref = zoo.session_runner(path)
    print("| preset | verdict (before repair) | nodes kept float | note F1 (32 clips) | size x | quantize CPU s |")
    print("| --- | --- | --- | --- | --- | --- |")
    for preset in presets:
        c0 = time.process_time()
        result = onnxptq.quantize(str(path), preset, data=list(calib), output=str(out))
        cpu = time.process_time() - c0
        rep = getattr(result, "repair", None) or {}
        kept = len(rep.get("kept_float", [])) + len(rep.get("stepped_up", []))
        verdict = rep.get("before_text") or ("holds" if result.floor.ok else "BROKEN") + ": " + result.floor.describe()
        f1 = float(metric(ref, zoo.session_runner(out), held, None))
        print(f"| {preset} | {verdict[:400]} | {kept} | {f1:.4f} | {os.path.getsize(out) / nm._model_bytes(path):.3f} | "
              f"{cpu:.1f} |", flush=True)


def no_repair(presets: list[str], out: Path) -> None:
    import onnxptq
    from onnxptq.analysis.multilabel import ColumnRuns, column_thresholds
    from onnxptq.config.presets import get_preset

    rel, make, _, metric = nm.MODELS["madmom_notes_brnn"]
    path = nm.SRC / rel
    calib, held, big = make(12, 1), make(4, 1000), make(32, 1000)
    ref = zoo.session_runner(path)
    refs, crefs = [ref(f)[0] for f in held], [ref(f)[0] for f in calib]
    thresholds = column_thresholds(refs)
    print(f"thresholds {thresholds[0]:.3f}-{thresholds[-1]:.3f}")
    print("| preset | runs F1, decisions, cells' cosine (4 held-out) | same, with the 12 calibration clips | note F1 (32 clips) |")
    print("| --- | --- | --- | --- |")
    for preset in presets:
        onnxptq.quantize(str(path), dataclasses.replace(get_preset(preset), repair=False), data=list(calib), output=str(out))
        test = zoo.session_runner(out)
        held_runs, pooled = ColumnRuns(thresholds), ColumnRuns(thresholds)
        for f, r in zip(held + calib, refs + crefs):
            g = test(f)[0]
            pooled.add(r, g)
            if len(pooled.kept) and pooled.feeds <= len(held):
                held_runs.add(r, g)
        a, b = held_runs.judge(34), pooled.judge(34)
        print(f"| {preset} | {a[0]:.4f}, {a[1]}, {held_runs.cosine():.4f} | {b[0]:.4f}, {b[1]}, {pooled.cosine():.4f} | "
              f"{float(metric(ref, test, big, None)):.4f} |", flush=True)


def verdicts(presets: list[str], names: list[str], out: Path) -> None:
    import onnxptq
    from onnxptq.config.presets import get_preset

    for name in names:
        try:
            path, make = _model(name)
        except FileNotFoundError as exc:
            print(f"{name}: not here ({exc})")
            continue
        calib = make(12, 1)
        for preset in presets:
            result = onnxptq.quantize(path, dataclasses.replace(get_preset(preset), repair=False), data=list(calib), output=str(out))
            print(f"{name} {preset} ok={result.floor.ok}: {result.floor.describe()}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("survey", "notes", "verdicts", "no-repair"))
    ap.add_argument("presets", nargs="?", default="A8W8,A16W8,BF16,FP16,BFP16,MX9,MXINT8,MXFP8_E4M3")
    ap.add_argument("--models", default="")
    ap.add_argument("--tmp", type=Path, default=Path("/tmp/multilabel_heads.onnx"))
    a = ap.parse_args()
    os.chdir(nm.SRC)  # bench/newmodels.py's relative paths
    if a.what == "survey":
        names = a.models.split(",") if a.models else [m.name for m in zoo.ZOO] + sorted(nm.MODELS)
        survey(names)
    elif a.what == "notes":
        notes(a.presets.split(","), a.tmp)
    elif a.what == "no-repair":
        no_repair(a.presets.split(","), a.tmp)
    else:
        verdicts(a.presets.split(","), a.models.split(",") if a.models else list(VERDICT_MODELS), a.tmp)


if __name__ == "__main__":
    main()
