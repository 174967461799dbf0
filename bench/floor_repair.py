"""Numerics by structure and the accuracy floor, measured (issue 27 items 1-2; docs/structure.md, docs/accuracy.md).

Three parts, each printed as a table:

* ``patterns``: the synthetic blocks of tests/_structure_graphs.py (``x → MatMul → pattern →
  MatMul``, LayerNorm input common mode 12), quantized with and without the structure rule
  (the rule switched off by replacing ``structure_float_tensors`` with an empty one); output cosine
  on 6 held-out samples, min over samples;
* ``planted``: the planted sensitive node (``Mul_hot``) at A8W8 with ``repair=False`` and by default;
* ``overhead``: PP-OCR cls quantized with and without the floor (interleaved, medians of 3);
* ``zoo``: zoo pairs (testkit.zoo, on the zoo branch) with ``repair=False`` and by default, judged
  by each model's own task metric on its own held-out inputs.

Run::

    PYTHONPATH=src:tests:. python bench/floor_repair.py patterns planted
    PYTHONPATH=src:tests:. python bench/floor_repair.py zoo --pairs oww_hey_jarvis:A8W8,oww_melspectrogram:FP16
"""

from __future__ import annotations

import argparse
import logging
import time

import numpy as np
import onnxruntime as ort

from onnxptq.analysis.metrics import cosine_similarity
from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config


def _quiet(cfg):
    """The config without a progress bar (configs are frozen: a changed copy)."""
    from dataclasses import replace

    return cfg.replace(calibration=replace(cfg.calibration, progress=False))


def _cos(model, quantized, feeds) -> float:
    ref = ort.InferenceSession(model.SerializeToString())
    got = ort.InferenceSession(quantized.SerializeToString())
    return float(np.min([cosine_similarity(ref.run(None, f)[0], got.run(None, f)[0]) for f in feeds]))


def patterns() -> None:
    import onnxptq.pipeline.plan.rules as plan_module
    from _structure_graphs import PATTERNS, pattern_data, pattern_model

    rule = plan_module.structure_float_tensors
    held = pattern_data(6, seed=11)
    print("| pattern | preset | cosine without the rule | with the rule |\n|---|---|---|---|")
    for name in PATTERNS:
        model = pattern_model(name, offset=12.0)
        for preset in ("BF16", "A8W8", "MX9"):
            cfg = _quiet(resolve_config(preset).replace(repair=False))
            got = []
            for on in (False, True):
                plan_module.structure_float_tensors = rule if on else (lambda m: {})
                try:
                    got.append(_cos(model, quantize(model, cfg, pattern_data(16)).model, held))
                finally:
                    plan_module.structure_float_tensors = rule
            print(f"| {name} | {preset} | {got[0]:.4f} | {got[1]:.4f} |")


def planted() -> None:
    from _structure_graphs import pattern_data, planted_model

    model = planted_model(depth=10)
    print("| planted (A8W8) | output cosine | floor | kept float | builds | seconds |\n|---|---|---|---|---|---|")
    for repair in (False, True):
        t = time.perf_counter()
        r = quantize(model, resolve_config("A8W8").replace(repair=repair), pattern_data(32))
        dt = time.perf_counter() - t
        kept = list((r.repair or {}).get("kept_float", {}))
        print(f"| repair={repair} | {_cos(model, r.model, pattern_data(6, seed=21)):.4f} | "
              f"{'holds' if r.floor.ok else 'BROKEN'} | {', '.join(kept) or '-'} | {(r.repair or {}).get('evaluations', 0)} | {dt:.2f} |")


def zoo(pairs: list[tuple[str, str]]) -> None:
    from testkit import zoo as z

    print("| model | preset | metric | repair=False | default | kept float (default) | quantize s (off / default) |\n"
          "|---|---|---|---|---|---|---|")
    for name, preset in pairs:
        m = z.get(name)
        cal, held = m.samples("calibration"), m.samples("heldout")
        ref = z.session_runner(m.path())
        row, kept, secs = [], [], []
        for repair in (False, True):
            cfg = _quiet(resolve_config(preset).replace(repair=repair))
            t = time.perf_counter()
            r = quantize(str(m.path()), cfg, cal)
            secs.append(time.perf_counter() - t)
            row.append(m.metric(ref, z.session_runner(r.model), held, m.root()))
            kept = list((r.repair or {}).get("kept_float", {}))
        print(f"| {name} | {preset} | {m.metric_name} | {row[0]:.4f} | {row[1]:.4f} | {', '.join(kept[:6]) or '-'}"
              f"{' …' if len(kept) > 6 else ''} ({len(kept)}) | {secs[0]:.1f} / {secs[1]:.1f} |")


def overhead() -> None:
    """What a floor that holds costs: the same quantization with and without it, interleaved."""
    import onnxptq.api as api

    rng = np.random.default_rng(0)
    data = [{"x": rng.random((1, 3, 48, 192)).astype(np.float32)} for _ in range(32)]
    model = "../shared/models/ch_ppocr_mobile_v2.0_cls_infer.onnx"
    default = api.DEFAULT_HOLDOUT
    print("| preset | no floor (s) | floor (s) | holdout (s) | verify (s) |\n|---|---|---|---|---|")
    for preset in ("A8W8", "BF16", "MX9"):
        times: dict[int, list[float]] = {0: [], default: []}
        for _ in range(3):
            for holdout in (0, default):
                api.DEFAULT_HOLDOUT = holdout
                cfg = _quiet(resolve_config(preset))
                t = time.perf_counter()
                r = api.quantize(model, cfg, data)
                times[holdout].append(time.perf_counter() - t)
        api.DEFAULT_HOLDOUT = default
        print(f"| {preset} | {np.median(times[0]):.2f} | {np.median(times[default]):.2f} | "
              f"{r.timings.get('holdout', 0):.2f} | {r.timings.get('verify', 0):.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("parts", nargs="+", choices=("patterns", "planted", "zoo", "overhead"))
    parser.add_argument("--pairs", default="oww_hey_jarvis:A8W8,oww_hey_jarvis:A16W8,oww_melspectrogram:FP16,"
                                            "oww_melspectrogram:A16W8,oww_melspectrogram:A8W8")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    for part in args.parts:
        if part == "patterns":
            patterns()
        elif part == "planted":
            planted()
        elif part == "overhead":
            overhead()
        else:
            zoo([tuple(p.split(":")) for p in args.pairs.split(",")])


if __name__ == "__main__":
    main()
