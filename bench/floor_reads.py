"""What the accuracy floor sees of a zoo model's per-position class scores, beside what the zoo counts.

For each preset, ``quantize(model, preset.replace(repair=False), calibration feeds)`` (a new user's
call with repair off) and then:

* **floor**: the floor's own verdict on the feeds it held out of the calibration data
  (``result.floor``: reads, per-position agreement, decision positions, judged or not);
* **same judgement, zoo held-out**: :func:`onnxptq.analysis.class_scores.judge_positions` on the
  zoo's held-out feeds (another seed, 32 captchas for ddddocr_ocr) — how the estimate holds up on
  more data than the floor had;
* **zoo metric**: the zoo's task metric on those feeds (``ZooModel.metric``; exact strings for
  ddddocr_ocr), unchanged.

    PYTHONPATH=src:. nice -n 5 python bench/floor_reads.py --model ddddocr_ocr --presets BF16,A16W8,A8W8,BFP16,MX9,MXINT8,MXFP8_E4M3
"""

from __future__ import annotations

import argparse
import logging
import time

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
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)
    model = zoo.get(args.model)
    calib, held = model.samples("calibration"), model.samples("heldout")
    ref = zoo.session_runner(model.path())
    ref_out = [ref(f)[args.output] for f in held]
    print(f"{args.model}: {len(calib)} calibration feeds, {len(held)} zoo held-out feeds; class scores: "
          f"{class_like_outputs(__import__('onnx').load(str(model.path()), load_external_data=False))}")
    print("| preset | floor (its held-out feeds) | judged | same judgement on the zoo's held-out feeds | zoo metric | quantize s |")
    print("|---|---|---|---|---|---|")
    for preset in args.presets.split(","):
        t0 = time.perf_counter()
        result = quantize(str(model.path()), resolve_config(preset).replace(repair=False), data=list(calib))
        seconds = time.perf_counter() - t0
        test = zoo.session_runner(result.model)
        got = [test(f)[args.output] for f in held]
        check = next(iter(result.floor.outputs.values()))
        pos = check.positions
        floor_text = (f"reads {pos.agreement:.3f} (per position {pos.per_position:.4f}, {pos.positions} decision positions "
                      f"on {result.floor.samples} feeds, {pos.flipped} flipped)" if pos else f"cosine {check.cosine:.4f}, no arg-max")
        judged = "too few positions" if check.top1_unjudged else ("holds" if check.ok else "BROKEN")
        zoo_pos = judge_positions(ref_out, got)
        zoo_text = (f"reads {zoo_pos.agreement:.3f} (per position {zoo_pos.per_position:.4f}, {zoo_pos.positions} decision "
                    f"positions, {zoo_pos.flipped} flipped)" if zoo_pos else "-")
        print(f"| {preset} | {floor_text} | {judged} | {zoo_text} | {model.metric(ref, test, held, model.root()):.3f} | {seconds:.1f} |",
              flush=True)


if __name__ == "__main__":
    main()
