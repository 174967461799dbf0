"""PP-OCRv4 rec A8W8 with repair off: the accuracy floor's verdict under config variants (issue 26 item 4).

Why A8W8 breaks rec's floor (so that repair runs and doubles the quantize time): each variant
quantizes rec on the same 64 rendered lines (``bench/quantize.py``'s, seed 1234; 8 held out, 20
calibration reads judged beside them) with ``repair=False`` and prints the floor's line. Variants:
``base`` (the preset), ``excl:N1,N2,...`` (nodes kept float), ``pct:P`` (activation percentile),
``meth:M`` (activation calibration method), ``set:OPTION=VALUE`` (any QuantConfig field,
``VALUE`` a Python literal).

    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/rec_floor_variants.py base pct:99.999 meth:minmse set:equalize=True
"""

from __future__ import annotations

import ast
import dataclasses
import logging
import re
import sys
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401 - the repository root (testkit) on sys.path
import quantize as bench_quantize  # bench/quantize.py: the rendered lines and their reader

from onnxptq.api import quantize
from onnxptq.config.presets import get_preset
from testkit.models import model_path


def variant(v: str):
    cfg = get_preset("A8W8")
    cfg = cfg.replace(calibration=dataclasses.replace(cfg.calibration, progress=False), repair=False)
    if v == "base":
        return cfg
    kind, _, arg = v.partition(":")
    if kind == "excl":
        return cfg.replace(nodes_to_exclude=tuple(arg.split(",")))
    if kind == "pct":
        return cfg.replace(activation=dataclasses.replace(cfg.activation, percentile=float(arg)))
    if kind == "meth":
        return cfg.replace(activation=dataclasses.replace(cfg.activation, calibration=arg))
    if kind == "set":
        key, _, value = arg.partition("=")
        return cfg.replace(**{key: ast.literal_eval(value)})
    raise SystemExit(f"unknown variant {v!r}")


def main(argv: list[str]) -> None:
    logging.disable(logging.WARNING)
    npz = Path(tempfile.gettempdir()) / "onnxptq_rec_lines_64.npz"
    if not npz.exists():
        bench_quantize.render_npz(npz, 64)
    for v in argv or ["base"]:
        cfg = variant(v)
        reader = bench_quantize._reader_class()(npz, limit=64)
        t = time.process_time()
        r = quantize(str(model_path("rec")), cfg, reader)
        print(f"== {v}: cpu {time.process_time() - t:.1f} s, broken={list(r.floor.broken)}", flush=True)
        for line in r.summary().splitlines():
            if "accuracy floor" in line:
                print("  ", re.sub(r"\(blank class.*", "", line).strip(), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
