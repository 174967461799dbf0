"""What the accuracy floor sees of a zoo model's per-position class scores, beside what the zoo counts.

For each preset, ``quantize(model, preset.replace(repair=False), calibration feeds)`` (a new user's
call with repair off) and then:

* **floor**: the floor's own verdict on the feeds it held out of the calibration data
  (``result.floor``: reads, per-position agreement, decision positions, judged or not);
* **same judgement, zoo held-out**: :func:`onnxptq.analysis.class_scores.judge_positions` on the
  zoo's held-out feeds (another seed, 32 captchas for ddddocr_ocr) — how the estimate holds up on
  more data than the floor had;
* **zoo metric**: the zoo's task metric on those feeds (``ZooModel.metric``; exact strings for
  ddddocr_ocr), unchanged;
* **held-out alone**: the floor's judgement of the held-out feeds only (what it judged before the
  calibration feeds were judged beside them: ``measure`` without ``seen``), with ``--held-alone``.

    PYTHONPATH=src:. nice -n 5 python bench/floor_reads.py --model ddddocr_ocr --presets BF16,A16W8,A8W8,BFP16,MX9,MXINT8,MXFP8_E4M3
    PYTHONPATH=src:. nice -n 5 python bench/floor_reads.py --model ddddocr_ocr --held-alone --presets FP16,BF16,A16W8,A8W8,BFP16,MX9,MXINT8,MXFP8_E4M3
"""

from __future__ import annotations

import argparse
import logging
import time

import onnx

import _common  # noqa: F401 - the repository root (testkit/) on sys.path

from onnxptq.analysis.class_scores import class_like_outputs, judge_positions  # noqa: E402
from onnxptq.api import quantize  # noqa: E402
from onnxptq.config.presets import resolve_config  # noqa: E402
from testkit import zoo  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="ddddocr_ocr")
    ap.add_argument("--presets", default="BF16,A16W8,A8W8,BFP16,MX9,MXINT8,MXFP8_E4M3")
    ap.add_argument("--output", type=int, default=0, help="graph output index judged")
    ap.add_argument("--held-alone", action="store_true", help="also the judgement of the held-out feeds alone")
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)
    model = zoo.get(args.model)
    calib, held = model.samples("calibration"), model.samples("heldout")
    ref = zoo.session_runner(model.path())
    ref_out = [ref(f)[args.output] for f in held]
    print(f"{args.model}: {len(calib)} calibration feeds, {len(held)} zoo held-out feeds; class scores: "
          f"{class_like_outputs(onnx.load(str(model.path()), load_external_data=False))}")
    alone_col = " held-out feeds alone | judged |" if args.held_alone else ""
    print(f"| preset |{alone_col} floor (its feeds) | judged | same judgement on the zoo's held-out feeds | zoo metric | quantize s |")
    print("|---|---|---|---|---|---|" + ("---|---|" if args.held_alone else ""))
    for preset in args.presets.split(","):
        t0 = time.perf_counter()
        result = quantize(str(model.path()), resolve_config(preset).replace(repair=False), data=list(calib))
        seconds = time.perf_counter() - t0
        test = zoo.session_runner(result.model)
        got = [test(f)[args.output] for f in held]
        check = next(iter(result.floor.outputs.values()))
        pos = check.positions
        seen = getattr(check, "seen_feeds", 0)
        floor_text = (f"reads {pos.agreement:.3f} (per position {pos.per_position:.4f}, {pos.positions} decision positions "
                      f"on {result.floor.samples} held-out{f' + {seen} calibration' if seen else ''} feeds, {pos.flipped} flipped)"
                      if pos else f"cosine {check.cosine:.4f}, no arg-max")
        judged = "not judged" if check.top1_unjudged else ("holds" if check.ok else "BROKEN")
        if args.held_alone:
            from onnxptq.analysis.floor import floor_for, measure, readings_of
            from onnxptq.pipeline.calibrate import DEFAULT_HOLDOUT, split_holdout

            _, kept_out, _ = split_holdout(list(calib), DEFAULT_HOLDOUT)
            name = next(iter(result.floor.outputs))
            alone = measure([{name: ref(f)[args.output]} for f in kept_out], [{name: test(f)[args.output]} for f in kept_out],
                            floor_for(result.config), **readings_of(onnx.load(str(model.path()), load_external_data=False)))
            a = alone.outputs[name]
            a_text = (f"reads {a.positions.agreement:.3f} ({a.positions.positions} decision positions, {a.positions.flipped} flipped)"
                      if a.positions else f"cosine {a.cosine:.4f}")
            floor_text = f"{a_text} | {'not judged' if a.top1_unjudged else 'holds' if a.ok else 'BROKEN'} | {floor_text}"
        zoo_pos = judge_positions(ref_out, got)
        zoo_text = (f"reads {zoo_pos.agreement:.3f} (per position {zoo_pos.per_position:.4f}, {zoo_pos.positions} decision "
                    f"positions, {zoo_pos.flipped} flipped)" if zoo_pos else "-")
        print(f"| {preset} | {floor_text} | {judged} | {zoo_text} | {model.metric(ref, test, held, model.root()):.3f} | {seconds:.1f} |",
              flush=True)


if __name__ == "__main__":
    main()
