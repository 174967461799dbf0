"""terrain_unet with the floor told how its output is read (issue 27, branch terrain).

``python bench/terrain_agreement.py [PRESETS]`` (default BF16,BFP16) quantizes
adaptive-terrain-diffusion's consistency U-Net (bench/newmodels.py's ``terrain_unet``: its feeds,
12 calibration, 16 held-out) twice per preset: as the preset is, and with
``floor_output_agreement={"<output>": height cells within 1 % of the range}`` (the package's
sinh mapping, :func:`newmodels._terrain_heights`), and prints per run the floor's verdict, what
repair kept, the quantize's CPU seconds and the bench's agreement on the held-out feeds.

Also ``--fair``: the metric's own noise floor, float against float on inputs with 1e-4 / 1e-3
relative noise, BF16-rounded weights alone, and BF16 rounding of the output alone.
"""

from __future__ import annotations

import _common  # noqa: F401  (the repository root on sys.path)
import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import newmodels as nm  # noqa: E402


def cells(ref: np.ndarray, got: np.ndarray) -> float:
    """The bench's metric on one feed: height cells within 1 % of the range of float's."""
    a, b = nm._terrain_heights(ref), nm._terrain_heights(got)
    return float(np.mean(np.abs(a - b) <= 0.01 * nm._TERRAIN_RANGE))


def _session(model):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    data = model if isinstance(model, (str, Path)) else model.SerializeToString()
    return ort.InferenceSession(str(data) if isinstance(data, Path) else data, so, providers=["CPUExecutionProvider"])


def fair(held: list[dict[str, np.ndarray]]) -> None:
    import ml_dtypes
    import onnx
    from onnx import numpy_helper

    ref = _session(str(nm.TERRAIN))
    m = onnx.load(str(nm.TERRAIN))
    for init in m.graph.initializer:
        if init.data_type == onnx.TensorProto.FLOAT:
            a = numpy_helper.to_array(init).astype(ml_dtypes.bfloat16).astype(np.float32)
            init.CopyFrom(numpy_helper.from_array(a, init.name))
    bfw = _session(m)
    rng = np.random.default_rng(5)
    rows: dict[str, list[float]] = {"input noise 1e-4": [], "input noise 1e-3": [], "BF16 weights alone": [], "BF16 output alone": []}
    for f in held:
        a = ref.run(None, f)[0]
        for label, eps in (("input noise 1e-4", 1e-4), ("input noise 1e-3", 1e-3)):
            x = f["noisy"]
            g = dict(f, noisy=(x + rng.standard_normal(x.shape).astype(np.float32) * eps * x.std()).astype(np.float32))
            rows[label].append(cells(a, ref.run(None, g)[0]))
        rows["BF16 weights alone"].append(cells(a, bfw.run(None, f)[0]))
        rows["BF16 output alone"].append(cells(a, a.astype(ml_dtypes.bfloat16).astype(np.float32)))
    for label, v in rows.items():
        print(f"| {label} | {np.mean(v):.4f} |")


def run(preset: str, told: bool, calib, held) -> None:
    import onnx

    import onnxptq
    from onnxptq.config.presets import resolve_config

    out = onnx.load(str(nm.TERRAIN), load_external_data=False).graph.output[0].name
    cfg = resolve_config(preset)
    if told:
        cfg = dataclasses.replace(cfg, floor_output_agreement={out: cells})
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "q.onnx"
        c0 = time.process_time()
        result = onnxptq.quantize(str(nm.TERRAIN), cfg, data=list(calib), output=str(path))
        cpu = time.process_time() - c0
        ref, test = _session(str(nm.TERRAIN)), _session(str(path))
        agreement = np.mean([cells(ref.run(None, f)[0], test.run(None, f)[0]) for f in held])
    check = result.floor.outputs.get(out) if result.floor is not None else None
    kept = len((result.repair or {}).get("kept_float", {}))
    stepped = len((result.repair or {}).get("stepped_up", {}))
    user = f"{check.user_agreement[0]:.4f}" if check is not None and check.user_agreement else "-"
    cos = f"{check.cosine:.5f}" if check is not None else "-"
    before = ((result.repair or {}).get("before") or {}).get("outputs", {}).get(out)
    was = (f"broken before repair: cosine {before['cosine']:.5f}, user agreement "
           f"{before['user_agreement'][0] if before.get('user_agreement') else '-'}") if before else "not broken"
    print(f"| {preset} | {'told' if told else 'as is'} | {cos} | {user} | "
          f"{'holds' if result.floor is None or result.floor.ok else 'BROKEN'} ({was}) | {kept} kept, {stepped} stepped | "
          f"{cpu:.1f} | {agreement:.4f} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("presets", nargs="?", default="BF16,BFP16")
    ap.add_argument("--fair", action="store_true")
    ap.add_argument("--only-told", action="store_true", help="skip the 'as is' runs (bench/newmodels.py has them)")
    args = ap.parse_args()
    calib, held = nm.terrain_feeds(12, 1), nm.terrain_feeds(16, 1000)
    if args.fair:
        print("| comparison | height cells within 1 % |\n|---|---:|")
        fair(held)
        return
    print("| preset | floor | output cosine (floor's, held-out) | user agreement (floor's) | verdict | repair | quantize CPU s | bench agreement (16 held-out) |")
    print("|---|---|---:|---:|---|---|---:|---:|")
    for preset in args.presets.split(","):
        for told in ((True,) if args.only_told else (False, True)):
            run(preset, told, calib, held)


if __name__ == "__main__":
    main()
