"""The delivered build's reused judgement against its own runs (pipeline/verify.py; issue 26 item 1).

``python bench/verify_reuse.py MODEL PRESET`` quantizes ``MODEL`` (any name ``bench/quantize_stages.py`` takes:
``cls``/``rec``/``det``, ``new:<outside model>``, a zoo name; or PP-OCRv4 rec on rendered lines with ``--npz``)
twice in one process, repair on: with the delivered build taking the judgement a candidate made on its very
bytes, then with that reuse off (``Verified.recall`` answering None). Printed: the model's sha256 (in memory),
whether the floor's JSON and the per-output figures are equal to the bit, the repair builds, the delivered
build's verify seconds and each quantize's CPU seconds. The searches may differ (repair's budget is CPU time);
where they keep the same set the files must be equal.

    PYTHONPATH=src:. OMP_NUM_THREADS=1 python bench/verify_reuse.py rec A8W8 --npz /work/cache/blockquant6/bq/rec_lines_64.npz
"""

from __future__ import annotations

import _common  # noqa: F401  (the repository root on sys.path: testkit)
import argparse
import dataclasses
import hashlib
import json
import logging
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    import quantize_stages

    quantize_stages.model_arguments(ap, lines=False)
    args = ap.parse_args()

    from onnxptq.api import quantize
    from onnxptq.config.presets import get_preset
    from onnxptq.pipeline import verify

    logging.disable(logging.WARNING)
    cfg = get_preset(args.preset)
    cfg = cfg.replace(calibration=dataclasses.replace(cfg.calibration, progress=False))

    def run() -> tuple:
        path, feeds = quantize_stages.model_and_data(args.model, args.samples, args.npz, args.samples or None)
        cpu = time.process_time()
        r = quantize(str(path), cfg, feeds)
        cpu = time.process_time() - cpu
        return (hashlib.sha256(r.model.SerializeToString()).hexdigest()[:16], json.dumps(r.floor.to_json(), sort_keys=True),
                json.dumps(r.metrics, sort_keys=True), (r.repair or {}).get("evaluations"), r.timings.get("verify", 0.0), cpu)

    on = run()
    recall = verify.Verified.recall
    verify.Verified.recall = lambda self, model, signature, digest=None: None
    try:
        off = run()
    finally:
        verify.Verified.recall = recall
    print(f"{args.model} {args.preset}: sha {on[0]} / {off[0]} | floor equal {on[1] == off[1]} | figures equal {on[2] == off[2]} "
          f"| builds {on[3]} / {off[3]} | delivered verify s {on[4]:.3f} / {off[4]:.3f} | cpu s {on[5]:.2f} / {off[5]:.2f}")


if __name__ == "__main__":
    main()
