"""Where does the int32-bias fit (src/onnxptq/pipeline/bias_fit.py) act? A scan of real models.

For each model of bench/newmodels.py (and the two shipped PP-OCR models) and each integer preset,
quantize with ``repair=False`` on a few calibration feeds and count (a) the weights solve
stretched so that their int32 bias fits (its INFO line) and (b) the int32 bias values at the
clip in the output file (|q| = 2³¹ − 1 or −2³¹: emit clips them silently on main; ``saturating_other``
with ``--compare``). A model with no
stretched weight gets the same file as without the rule: the rule changes nothing but the
stretched weights' scales. With ``--compare TREE`` each pair is also quantized by another source
tree (e.g. main's ``src``) in a child process, and the two output files' SHA-256 are compared.

    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/bias_fit_scan.py --presets A8W8,A16W8 --calib 4 \
        [--models nsfw,tinyocr_det] [--compare /work/cache/czann16/base/src] [--held 16] [--json out.json]

With ``--held`` and ``--compare`` the other tree runs only where this one stretched a weight (elsewhere
the files are equal by construction), and both trees' metrics are reported.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SHIPPED = {"ppocr_cls": "/work/shared/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
           "ppocr_rec": "/work/shared/models/ch_PP-OCRv4_rec_infer.onnx"}


def _feeds(name: str, n: int):
    import numpy as np

    if name == "ppocr_cls":
        rng = np.random.default_rng(1)
        return [{"x": rng.uniform(-1, 1, (1, 3, 48, 192)).astype(np.float32)} for _ in range(n)]
    if name == "ppocr_rec":
        rng = np.random.default_rng(1)
        return [{"x": rng.uniform(-1, 1, (1, 3, 48, 320)).astype(np.float32)} for _ in range(n)]
    import newmodels

    return newmodels.MODELS[name][1](n, 1)


def _path(name: str) -> str:
    if name in SHIPPED:
        return SHIPPED[name]
    import newmodels

    return str(newmodels.SRC / newmodels.MODELS[name][0])


def _agreement(name: str, out: str, held: int) -> float | None:
    """The model's own metric (bench/newmodels.py) of ``out`` against float on ``held`` held-out feeds."""
    if name in SHIPPED or held <= 0:
        return None
    import newmodels
    from testkit import zoo

    feeds = newmodels.MODELS[name][1](held, 1000)
    ref, test = zoo.session_runner(Path(_path(name))), zoo.session_runner(Path(out))
    return round(float(newmodels.MODELS[name][3](ref, test, feeds, None)), 4)


def one(name: str, preset: str, calib: int, out: str, held: int = 0) -> dict:
    """Quantize one pair in this process (whichever ``onnxptq`` is on sys.path); count the log lines."""
    import onnxptq
    from onnxptq.config.presets import resolve_config

    counts = {"stretched": 0}

    class Count(logging.Handler):
        def emit(self, record):
            msg = record.getMessage()
            if "int32 bias fits" in msg:
                counts["stretched"] += int(msg.split("solve: ")[1].split(" ")[0])

    logging.getLogger("onnxptq").addHandler(Count())
    logging.getLogger("onnxptq").setLevel(logging.INFO)
    cfg = dataclasses.replace(resolve_config(preset), repair=False)
    c0 = time.process_time()
    onnxptq.quantize(_path(name), cfg, data=_feeds(name, calib), output=out)
    cpu = round(time.process_time() - c0, 1)
    sha = hashlib.sha256(Path(out).read_bytes()).hexdigest()[:12]
    return {"model": name, "preset": preset, **counts, "saturating": _clipped_int32(out), "sha": sha, "cpu_s": cpu,
            "agreement": _agreement(name, out, held)}


def _clipped_int32(path: str) -> int:
    """Int32 initializer values at int32's ends in the saved model (saturated biases)."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    model = onnx.load(path)
    n = 0
    for t in model.graph.initializer:
        if t.data_type == onnx.TensorProto.INT32:
            a = numpy_helper.to_array(t)
            n += int(np.sum((a == np.iinfo(np.int32).max) | (a == np.iinfo(np.int32).min)))
    return n


def _child(src: str, name: str, preset: str, calib: int, timeout: float, held: int = 0) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, PYTHONPATH=f"{src}:{Path(__file__).resolve().parents[1]}:{Path(__file__).resolve().parent}")
        cmd = [sys.executable, __file__, "--one", name, preset, str(calib), str(Path(tmp) / "q.onnx"), str(held)]
        try:
            res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"model": name, "preset": preset, "error": f"timeout > {timeout} s"}
        line = [ln for ln in res.stdout.splitlines() if ln.startswith("{")]
        return json.loads(line[-1]) if line else {"model": name, "preset": preset, "error": res.stderr.strip()[-300:]}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--one":
        _, _, name, preset, calib, out, held = sys.argv
        print(json.dumps(one(name, preset, int(calib), out, int(held))))
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import newmodels

    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=",".join(list(SHIPPED) + [m for m in newmodels.MODELS if m != "czann_nuclei"]))
    ap.add_argument("--presets", default="A8W8,A16W8")
    ap.add_argument("--calib", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--held", type=int, default=0, help="also the model's metric on this many held-out feeds (seed 1000)")
    ap.add_argument("--compare", default=None, help="another source tree's src folder (e.g. main's)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    here = str(Path(__file__).resolve().parents[1] / "src")
    rows = []
    for name in args.models.split(","):
        for preset in args.presets.split(","):
            row = _child(here, name, preset, args.calib, args.timeout, args.held)
            if args.compare and (row.get("stretched") or not args.held):  # with --held: only where the rule acted
                other = _child(args.compare, name, preset, args.calib, args.timeout, args.held)
                row["agreement_other"] = other.get("agreement")
                row["sha_other"] = other.get("sha", other.get("error"))
                row["saturating_other"] = other.get("saturating")
                row["same_file"] = row.get("sha") == other.get("sha")
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
