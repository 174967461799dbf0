"""One bench/newmodels.py model quantized with ``repair=False`` (the plan's rules alone, not what the
accuracy floor adds): its task metric and worst output cosine on held-out feeds, CPU seconds of
quantize; for aecmos also the MOS error's rms and share off by > 0.1 (finer than the 1/N metric).
Run it on two source trees (PYTHONPATH) to compare a rule; ``key=value`` config changes are
Python literals, plus ``activation_scale_search=1`` (the activations' MX exponent chosen by squared
error too; ``=3`` the exponent above OCP's where OCP's saturates, ``QuantConfig.mx_activation_scale_search``) (issue 27 item 5, bench/RESULTS.md "MXFP8_E4M3 on detectors and audio scorers").

    PYTHONPATH=src:. OMP_NUM_THREADS=1 python bench/repair_off.py aecmos MXFP8_E4M3 12 96
    PYTHONPATH=src:. OMP_NUM_THREADS=1 python bench/repair_off.py craft MXFP8_E4M3 12 8 "nodes_to_exclude=('/basenet/slice1/slice1.0/Conv',)"
"""

from __future__ import annotations

import ast
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401 - the repository root (testkit/, bench/) on sys.path
import numpy as np

import newmodels as nm
from onnxptq import quantize
from onnxptq.config.presets import resolve_config
from onnxptq.config.schema import make_tensor_quant
from testkit import zoo


def main(argv: list[str]) -> int:
    name, preset, n_calib, n_held = argv[0], argv[1], int(argv[2]), int(argv[3])
    changes = {k: ast.literal_eval(v) for k, v in (a.split("=", 1) for a in argv[4:])}
    path, feeds_fn, _, metric = nm.MODELS[name]
    calib, held = feeds_fn(n_calib, 1), feeds_fn(n_held, 1000)
    ref = nm._memo(zoo.session_runner(str(path)), held)
    search = changes.pop("activation_scale_search", None)  # activations' MX exponent by squared error too
    cfg = dataclasses.replace(resolve_config(preset), repair=False, **changes)
    if search is not None:
        cfg = cfg.replace(activation=make_tensor_quant("mx", attrs={**dict(cfg.activation.attrs), "scale_search": search}))
        changes["activation_scale_search"] = search
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "q.onnx")
        t = time.process_time()
        quantize(str(path), cfg, data=list(calib), output=out)
        cpu = time.process_time() - t
        test = nm._memo(zoo.session_runner(out), held)
        line = f"{name} {preset} {changes or ''} metric {metric(ref, test, held, None):.3f} cosine {zoo.output_cosine(ref, test, held):.5f} quantize CPU {cpu:.1f} s"
        if name == "aecmos":
            d = np.array([np.abs(ref(f)[0].ravel()[:2] - test(f)[0].ravel()[:2]) for f in held])
            line += f" MOS error rms {np.sqrt((d ** 2).mean()):.4f} share > 0.1 {(d > 0.1).mean():.3f}"
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
