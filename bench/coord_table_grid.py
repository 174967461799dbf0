"""pymupdf-layout's table grid model V3 (``table_grid_model_v3.onnx``, round 19's wheel): a GridSample reads a feature map
at the candidate line positions the caller passes (``h_positions``/``v_positions``, pixels of the 360 x 300 input),
normalized in the graph. Feeds as TableGridExtractorV3 makes them, on drawn tables: a white crop with dark ruling lines
at random rows/columns, /255, and as candidates every line's position plus as many empty-strip positions between them.
What it reports per preset, repair off (the plan's own model) and on: the coordinate tensors the plan quantized and their
formats, the candidates' decisions (sigmoid(logit) > 0.5, the package's threshold) kept against float on 16 fresh tables,
the logits' largest change, and the floor's verdict. Runs against whichever ``onnxptq`` is first on PYTHONPATH:

    PYTHONPATH=<tree>/src:. OMP_NUM_THREADS=1 nice python bench/coord_table_grid.py --presets A8W8,MX9
"""

from __future__ import annotations

import argparse
import dataclasses
import glob

import numpy as np
import onnxruntime as ort

from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config

H, W = 360, 300


def table(rng: np.random.Generator) -> dict[str, np.ndarray]:
    img = np.full((H, W, 3), 245.0, np.float32) + rng.normal(0, 3, (H, W, 3)).astype(np.float32)
    rows = np.sort(rng.choice(np.arange(10, H - 10), rng.integers(4, 10), replace=False))
    cols = np.sort(rng.choice(np.arange(10, W - 10), rng.integers(3, 7), replace=False))
    for r in rows:
        img[r:r + 2] = 30.0
    for c in cols:
        img[:, c:c + 2] = 30.0
    for _ in range(40):  # text-like blobs
        y, x = rng.integers(0, H - 8), rng.integers(0, W - 20)
        img[y:y + 6, x:x + rng.integers(5, 20)] = 60.0
    empty_h = (rows[:-1] + rows[1:]) / 2 if len(rows) > 1 else np.array([H / 2])
    empty_v = (cols[:-1] + cols[1:]) / 2 if len(cols) > 1 else np.array([W / 2])
    return {"image": np.clip(img, 0, 255)[None].transpose(0, 3, 1, 2) / 255.0,
            "h_positions": np.concatenate([rows + 0.5, empty_h]).astype(np.float32),
            "v_positions": np.concatenate([cols + 0.5, empty_v]).astype(np.float32)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--presets", default="A8W8,A16W8,BF16,BFP16,MX9,MXINT8,MXFP8_E4M3")
    ap.add_argument("--repair", action="store_true")
    a = ap.parse_args()
    path = sorted(glob.glob("/work/cache/newmodels*/src/pymupdf/layout/resources/onnx/table_grid_model_v3.onnx"))[0]
    rng = np.random.default_rng(1)
    cal = [dict((k, v.astype(np.float32)) for k, v in table(rng).items()) for _ in range(12)]
    fresh = [dict((k, v.astype(np.float32)) for k, v in table(np.random.default_rng(100 + i)).items()) for i in range(16)]
    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    want = [ref.run(["h_logits", "v_logits"], f) for f in fresh]
    try:
        from onnxptq.analysis.coordinates import coordinate_tensors
        import onnx
        coords = set(coordinate_tensors(onnx.shape_inference.infer_shapes(onnx.load(path))))
    except ImportError:
        coords = set()
    print("| preset | coordinate tensors planned (format) | decisions kept | largest logit change | floor |")
    print("| --- | --- | --- | --- | --- |")
    for preset in a.presets.split(","):
        r = quantize(path, dataclasses.replace(resolve_config(preset), repair=a.repair), data=cal)
        q = ort.InferenceSession(r.model.SerializeToString(), providers=["CPUExecutionProvider"])
        kept = total = 0
        worst = 0.0
        for w, f in zip(want, fresh):
            got = q.run(["h_logits", "v_logits"], f)
            for x, y in zip(w, got):
                kept += int(((x > 0) == (y > 0)).sum())
                total += x.size
                worst = max(worst, float(np.max(np.abs(x - y))))
        planned = sorted(f"{n}:{t.quant.format}" for n, t in r.plan.tensors.items()
                         if n in coords or n in ("h_positions", "v_positions"))
        print(f"| {preset} | {', '.join(planned) or '-'} | {kept / total:.4f} of {total} | {worst:.3f} | "
              f"{'holds' if r.floor.ok else 'broken'} |", flush=True)


if __name__ == "__main__":
    main()
