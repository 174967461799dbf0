"""Repair's after-figure against the same reading on fresh feeds (issue 27 items 2 and 5, branch floor16).

Why: repair accepts the first candidate whose verdict holds on the floor's feeds, so the delivered model's
verdict on those very feeds (the summary's "after: ...") is the figure it was *selected* by. On YOLOv8n under
the reference tool's A8W8 repair reported F1 0.9675 after, the delivered model read 0.946 on 96 fresh images
(bench/RESULTS.md, a8acc15). This script measures that gap the floor's own way, on several models and presets:

For each ``model:preset`` pair (bench/newmodels.py's models, feeds and task metrics; ``--calib`` calibration
feeds, seed 1; ``--fresh`` other feeds, seed 1000) and each of repair off (``plain``) and on (``repair``):
one ``onnxptq.quantize``; the verdict the library gives (``result.floor``), and the floor's ``measure`` with the
same readings (``Calibrated.readings``, captured from the run) on float's and the delivered model's outputs on the
fresh feeds. Per output that the plain verdict broke or could not judge/confirm: the headline share (reads,
F1's share, a mask's mean IoU per page, else the cosine), its count and its bound where it has one, on the floor's
feeds and on the fresh ones. ``plain`` is the control: its estimate was not selected, so a gap there is the
feeds' noise alone; a larger gap on ``repair`` is the selection's.

    NEWMODELS3_SRC=/work/cache/newmodels3/src ... PYTHONPATH=<tree>/src:.:bench OMP_NUM_THREADS=1 nice -n 5 \\
        python bench/floor_after.py --pairs nudenet:REF_A8W8,ppocrv4_det:REF_A8W8 --calib 12 --fresh 48 --json out.jsonl

``REF_A8W8`` / ``REF_A16W8``: the reference tool's preset through the compatible API (testkit/reference.py),
turned into our ``QuantConfig`` so the result (and its verdict) is at hand.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import newmodels  # noqa: E402  (the outside models, their feeds and task metrics)
from testkit import zoo  # noqa: E402


def config_of(preset: str) -> Any:
    from onnxptq.config.presets import resolve_config

    if preset.startswith("REF_"):
        from onnxptq.compat.options import to_quant_config
        from testkit.reference import reference_config

        return to_quant_config(reference_config(preset[4:], repair=True))
    return resolve_config(preset)


def headline(check: Any, floor: Any) -> dict[str, Any]:
    """The figure an output is judged by, its count and bound where it has one."""
    from onnxptq.analysis.floor import _share_and_count, share_of

    found = _share_and_count(check, floor)
    if found is not None:
        share, count, unit, against = found
        bound = share_of(check, floor)
        return {"figure": round(share, 4), "count": count, "unit": unit, "against": round(against, 4),
                "low": None if bound is None else round(bound.low, 4)}
    if check.mask_bound is not None:
        b = check.mask_bound
        return {"figure": round(b.iou, 4), "count": b.pages, "unit": "pages' mean mask IoU", "against": check.mask_floor,
                "low": round(b.low, 4)}
    return {"figure": round(check.cosine, 4), "count": None, "unit": "cosine", "against": floor.cosine, "low": None}


def state(check: Any) -> str:
    if getattr(check, "below", False):
        return "below (figure below the floor, bound across it: acted on)"  # analysis/floor.below_on_figure
    if not check.ok:
        return "broken"
    if check.top1_unjudged or check.within_chance is not None:
        return "not judged"
    if check.unconfirmed is not None or (check.mask_bound is not None and not check.mask_bound.holds(check.mask_floor)):
        return "unconfirmed"
    return "holds"


def _named_outputs(model: Path, feeds: list[dict]) -> list[dict]:
    """Each feed's outputs by name (one thread), as the floor's ``measure`` takes them."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.log_severity_level = 1, 3
    sess = ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    inputs = {i.name for i in sess.get_inputs()}
    return [dict(zip(names, sess.run(None, {k: v for k, v in f.items() if k in inputs}))) for f in feeds]


def one(name: str, preset: str, calib_n: int, fresh_n: int, run: str, out_dir: Path, seed: int = 1) -> dict[str, Any]:
    import onnxptq
    import onnxptq.api as api
    from onnxptq.analysis.floor import floor_for, measure

    rel, make, metric_name, metric = newmodels.MODELS[name]
    path = Path(rel) if Path(rel).is_absolute() else newmodels.SRC / rel
    calib, fresh = make(calib_n, seed), make(fresh_n, 1000)
    cfg = config_of(preset)
    if run == "plain":
        cfg = cfg.replace(repair=False)
    captured: list[Any] = []
    original = api.calibrate_once

    def capture(*args: Any, **kwargs: Any) -> Any:
        calibrated = original(*args, **kwargs)
        captured.append(calibrated)
        return calibrated

    api.calibrate_once = capture
    out = out_dir / f"{name}.{preset}.{run}.s{seed}.onnx"
    try:
        c0 = time.process_time()
        result = onnxptq.quantize(str(path), cfg, data=list(calib), output=str(out))
        cpu = time.process_time() - c0
    finally:
        api.calibrate_once = original
    calibrated = captured[0]
    readings = dict(calibrated.readings)
    if readings.get("decisions"):
        readings["decisions"], readings["selection"] = (), {}  # inner tensors are not captured here
    ref, test = zoo.session_runner(path), zoo.session_runner(out)
    floats, gots = _named_outputs(path, fresh), _named_outputs(out, fresh)
    fresh_verdict = measure(floats, gots, floor_for(result.config), **readings)
    est = result.floor
    # the floor's held-out samples alone (no calibration feed pooled in), the delivered model run on them
    held_verdict = None
    if calibrated.holdout and not calibrated.holdout_reused:
        held_got = _named_outputs(out, list(calibrated.holdout))
        held_verdict = measure(calibrated.holdout_outputs, held_got, floor_for(result.config), **readings)
    rep = result.repair if isinstance(result.repair, dict) else {}
    outputs = {}
    for o, check in est.outputs.items():
        if o not in fresh_verdict.outputs:
            continue
        other = fresh_verdict.outputs[o]
        outputs[o] = {"floor_feeds": {**headline(check, est.floor), "state": state(check),
                                      "text": check.describe()},
                      "fresh": {**headline(other, fresh_verdict.floor), "state": state(other), "text": other.describe()}}
        if held_verdict is not None and o in held_verdict.outputs:
            alone = held_verdict.outputs[o]
            outputs[o]["held_only"] = {**headline(alone, held_verdict.floor), "state": state(alone)}
    return {"model": name, "preset": preset, "run": run, "seed": seed, "cpu_s": round(cpu, 1), "judged_on": est.samples,
            "reused": est.reused, "stepped": len(rep.get("stepped_up") or {}), "kept": len(rep.get("kept_float") or {}),
            "evaluations": rep.get("evaluations"), "fresh_feeds": len(fresh), "metric": metric_name,
            "size_ratio": round(out.stat().st_size / path.stat().st_size, 3),
            "task_fresh": round(float(metric(ref, test, fresh, None)), 4), "outputs": outputs}


def pair_options(doc: str) -> argparse.ArgumentParser:
    """The options this script and bench/floor_centered.py share: the pairs, the feeds' counts, the JSON lines."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", required=True, help="model:preset, comma separated")
    ap.add_argument("--calib", type=int, default=12)
    ap.add_argument("--fresh", type=int, default=48)
    ap.add_argument("--json", default=None, help="append one JSON line per row")
    return ap


def emit_row(row: dict[str, Any], path: str | None) -> None:
    """One row printed as a JSON line, and appended to ``path`` where given."""
    print(json.dumps(row), flush=True)
    if path:
        with open(path, "a") as fh:
            fh.write(json.dumps(row) + "\n")


def main() -> None:
    ap = pair_options(__doc__)
    ap.add_argument("--runs", default="plain,repair")
    ap.add_argument("--seeds", default="1", help="calibration feeds' seeds, comma separated (the fresh ones: 1000)")
    ap.add_argument("--out-dir", default=None)
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)
    out_dir = Path(args.out_dir or tempfile.mkdtemp(prefix="floor_after_"))
    out_dir.mkdir(parents=True, exist_ok=True)
    for pair in args.pairs.split(","):
        name, preset = pair.split(":")
        for seed, run in ((int(s), r) for s in args.seeds.split(",") for r in args.runs.split(",")):
            emit_row(one(name, preset, args.calib, args.fresh, run, out_dir, seed), args.json)


if __name__ == "__main__":
    main()
