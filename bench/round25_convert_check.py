"""Round 25: are the ONNX files tflite2onnx made from mediapipe's TFLite landmark models the same functions?

bench/fetch_newmodels.py converts mediapipe 0.10.14's ``hand_landmark_full.tflite`` and ``iris_landmark.tflite`` with
tflite2onnx 0.4.1 (CONVERT_TFLITE). This runs each TFLite file in TensorFlow Lite's own interpreter and its ONNX file in
onnxruntime on the same random inputs (NHWC for TFLite, transposed to NCHW for ONNX) and prints the largest output
difference beside the output's largest value. tflite-runtime 2.14 is built against NumPy 1.x, so the interpreter runs in
a child process whose path puts a NumPy 1.26 folder first (``--np1``, made with ``pip install --no-deps --target DIR
numpy==1.26.4``; ``--pydeps`` holds tflite-runtime: ``pip install --no-deps --target DIR tflite-runtime==2.14.0``).

    python bench/round25_convert_check.py --src /work/cache/newmodels25/src \\
        --np1 /work/cache/newmodels25/np1 --pydeps /work/cache/newmodels25/pydeps
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

PAIRS = (("mediapipe/modules/hand_landmark/hand_landmark_full.tflite", "mediapipe_onnx/hand_landmark_full.onnx"),
         ("mediapipe/modules/iris_landmark/iris_landmark.tflite", "mediapipe_onnx/iris_landmark.onnx"))

_CHILD = """
import sys, numpy as np
from tflite_runtime.interpreter import Interpreter
it = Interpreter(sys.argv[1]); it.allocate_tensors()
inp = it.get_input_details()[0]
x = np.random.default_rng(int(sys.argv[3])).random(inp['shape']).astype(np.float32)
it.set_tensor(inp['index'], x); it.invoke()
np.savez(sys.argv[2], __x=x, **{o['name']: it.get_tensor(o['index']) for o in it.get_output_details()})
"""


def check(tflite: Path, onnx_path: Path, np1: Path, pydeps: Path, seeds: int) -> list[tuple[str, float, float]]:
    """(output, largest |onnx - tflite|, largest |tflite|) over ``seeds`` random inputs in [0, 1)."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    worst: dict[str, list[float]] = {}
    env = {**os.environ, "PYTHONPATH": f"{np1}{os.pathsep}{pydeps}"}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(seeds):
            out = Path(tmp) / f"{seed}.npz"
            subprocess.run([sys.executable, "-c", _CHILD, str(tflite), str(out), str(seed)], check=True, env=env,
                           stderr=subprocess.DEVNULL)
            ref = np.load(out)
            got = sess.run(None, {sess.get_inputs()[0].name: ref["__x"].transpose(0, 3, 1, 2)})
            for o, v in zip(sess.get_outputs(), got):
                t = ref[o.name]
                d, m = float(np.abs(v.reshape(t.shape) - t).max()), float(np.abs(t).max())
                w = worst.setdefault(o.name, [0.0, 0.0])
                w[0], w[1] = max(w[0], d), max(w[1], m)
    return [(k, v[0], v[1]) for k, v in worst.items()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", type=Path, default=Path(os.environ.get("NEWMODELS25_SRC", "/work/cache/newmodels25/src")))
    ap.add_argument("--np1", type=Path, required=True, help="a folder holding NumPy 1.x (pip --target)")
    ap.add_argument("--pydeps", type=Path, required=True, help="a folder holding tflite-runtime (pip --target)")
    ap.add_argument("--seeds", type=int, default=4)
    a = ap.parse_args()
    print("| model | output | max abs difference | max abs TFLite output |\n| --- | --- | --- | --- |")
    for tfl, onx in PAIRS:
        for name, d, m in check(a.src / tfl, a.src / onx, a.np1, a.pydeps, a.seeds):
            print(f"| {Path(onx).stem} | {name} | {d:.3g} | {m:.4g} |")


if __name__ == "__main__":
    main()
