"""Heavy-tailed 8-bit activation ranges (issue 27 item 6, detrange): each model's A8W8 task metric with the rule off
(``TAIL_KURTOSIS`` infinite: every percentile range as before) and on, in the same process, and the tensors whose range
the rule changed (``fired``; ``gains``: every candidate's error gain, kurtosis and peak ratio).

    NEWMODELS*_SRC defaults; PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/det_range.py \\
        --models ppocrv4_det,ppocrv3_det,zoo:ddddocr_det,shared:cls --json /work/cache/detrange/rows.json [--repair]
    # the files it left, judged page by page on 64 fresh pages (paired difference, standard error)
    ... python bench/det_range.py --models ppocrv4_det --pages 64 --seed 2000 --out-dir DIR --json unused

Models: a bench/newmodels.py key (its feeds and metric, ``--calib`` feeds of seed 1, ``--held`` of seed 1000), ``zoo:NAME``
(testkit/zoo.py: its own calibration/held-out counts and metric) or ``shared:cls`` / ``shared:rec`` (PP-OCR's angle
classifier, top-1 agreement, and PP-OCRv4 rec, CTC string agreement, on testkit's rendered lines).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import newmodels as nm  # noqa: E402
from testkit import zoo  # noqa: E402

SHARED = Path("/work/shared/models")


def model_case(key: str, calib_n: int, held_n: int):
    """``(path, calibration feeds, held-out feeds, metric(ref, test, feeds), metric name)`` of ``key``."""
    if key.startswith("zoo:"):
        m = zoo.get(key[4:])
        root = m.root()
        return str(m.path()), m.samples("calibration"), m.samples("heldout"), (lambda r, t, f: m.metric(r, t, f, root)), m.metric_name
    if key == "shared:cls":
        from testkit.ocr import render_cls

        images, _ = render_cls(calib_n + held_n, seed=7)
        feeds = [{"x": images[i:i + 1]} for i in range(len(images))]
        metric = zoo.top1()
        return (str(SHARED / "ch_ppocr_mobile_v2.0_cls_infer.onnx"), feeds[:calib_n], feeds[calib_n:],
                (lambda r, t, f: metric(r, t, f, None)), "top-1 agreement")
    if key == "shared:rec":
        from testkit.ocr import render_lines

        images, _ = render_lines(calib_n + held_n, seed=7)
        feeds = [{"x": images[i:i + 1]} for i in range(len(images))]
        return (str(SHARED / "ch_PP-OCRv4_rec_infer.onnx"), feeds[:calib_n], feeds[calib_n:],
                (lambda r, t, f: zoo.ctc_strings(r, t, f, None)), "CTC string agreement")
    rel, make, metric_name, metric = nm.MODELS[key]
    return str(nm.SRC / rel), make(calib_n, 1), make(held_n, 1000), (lambda r, t, f: metric(r, t, f, None)), metric_name


def run_model(key: str, calib_n: int, held_n: int, repair: bool, preset: str, out_dir: Path,
              ratios: tuple[float, ...] = ()) -> list[dict]:
    import onnxptq
    from onnxptq.calibration import methods
    from onnxptq.config.presets import get_preset

    path, calib, held, metric, metric_name = model_case(key, calib_n, held_n)
    cfg = dataclasses.replace(get_preset(preset), repair=repair)
    ref = nm._memo(zoo.session_runner(path), held)
    real_search, real_kurt, real_ratio = methods._tail_search, methods.TAIL_KURTOSIS, methods.TAIL_PEAK_RATIO
    rows = []
    settings = [("before", math.inf, real_ratio), ("after", real_kurt, real_ratio)]
    settings += [(f"after_r{r:g}", real_kurt, r) for r in ratios]
    for label, kurt, ratio in settings:
        fired: dict[str, tuple] = {}
        gains: dict[str, float] = {}

        def watched(c, lo, hi, opts, name):
            out = real_search(c, lo, hi, opts, name)
            found = methods.tail_window(c, lo, hi, opts, name)
            if found is not None:
                gains[name] = (round(found[0], 3), round(methods.tail_kurtosis(c), 1), round(methods.tail_peak_ratio(c), 2))
            if out != (lo, hi):
                fired[name] = (round(lo, 4), round(hi, 4), round(out[0], 4), round(out[1], 4))
            return out

        methods._tail_search, methods.TAIL_KURTOSIS, methods.TAIL_PEAK_RATIO = watched, kurt, ratio
        out = out_dir / f"{key.replace(':', '_')}.{preset}.{label}.onnx"
        c0 = time.process_time()
        try:
            result = onnxptq.quantize(path, cfg, data=list(calib), output=str(out))
        except Exception as exc:  # recorded, never fatal
            rows.append({"model": key, "label": label, "error": f"{type(exc).__name__}: {str(exc)[:200]}"})
            continue
        finally:
            methods._tail_search, methods.TAIL_KURTOSIS, methods.TAIL_PEAK_RATIO = real_search, real_kurt, real_ratio
        cpu = time.process_time() - c0
        test = nm._memo(zoo.session_runner(str(out)), held)
        rep = getattr(result, "repair", None) or {}
        rows.append({"model": key, "label": label, "metric": metric_name, "value": round(float(metric(ref, test, held)), 4),
                     "floor_ok": bool(result.floor.ok) if getattr(result, "floor", None) is not None else None,
                     "kept": len(rep.get("kept_float", [])) if isinstance(rep, dict) else None,
                     "quantize_cpu_s": round(cpu, 2), "fired": sorted(fired), "gains": gains, "held": len(held), "repair": repair})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def pages(keys: list[str], n: int, seed: int, preset: str, out_dir: Path) -> None:
    """The before/after files ``run_model`` left in ``out_dir``, judged page by page on ``n`` fresh feeds of ``seed``
    (bench/newmodels.py keys): the means and the paired difference with its standard error."""
    for key in keys:
        rel, make, _, metric = nm.MODELS[key]
        held = make(n, seed)
        ref = zoo.session_runner(str(nm.SRC / rel))
        values = {label: np.array([float(metric(ref, run, [f], None)) for f in held])
                  for label, run in (("before", zoo.session_runner(str(out_dir / f"{key}.{preset}.before.onnx"))),
                                     ("after", zoo.session_runner(str(out_dir / f"{key}.{preset}.after.onnx"))))}
        d = values["after"] - values["before"]
        print(json.dumps({"model": key, "pages": n, "seed": seed, "before": round(float(values["before"].mean()), 4),
                          "after": round(float(values["after"].mean()), 4), "mean_diff": round(float(d.mean()), 4),
                          "se": round(float(d.std(ddof=1) / np.sqrt(n)), 4)}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", required=True)
    ap.add_argument("--calib", type=int, default=12)
    ap.add_argument("--held", type=int, default=32)
    ap.add_argument("--preset", default="A8W8")
    ap.add_argument("--repair", action="store_true", help="the accuracy floor's repair on (the default delivery)")
    ap.add_argument("--json", required=True)
    ap.add_argument("--ratios", default="", help="further 'after' rows with these TAIL_PEAK_RATIO values (a sweep)")
    ap.add_argument("--out-dir", default="/tmp/det_range")
    ap.add_argument("--pages", type=int, default=0, help="judge the files in --out-dir on this many fresh feeds instead")
    ap.add_argument("--seed", type=int, default=2000)
    a = ap.parse_args()
    out_dir = Path(a.out_dir)
    if a.pages:
        pages(a.models.split(","), a.pages, a.seed, a.preset, out_dir)
        return
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = json.loads(Path(a.json).read_text()) if Path(a.json).exists() else []
    for key in a.models.split(","):
        new = run_model(key, a.calib, a.held, a.repair, a.preset, out_dir,
                        tuple(float(k) for k in a.ratios.split(",") if k))
        rows = [r for r in rows if not (r["model"] == key and r.get("repair") == a.repair)] + new
        Path(a.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
