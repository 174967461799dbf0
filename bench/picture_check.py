"""The 8-bit reading of delivered quantized files: what the floor's picture judgement
(analysis/pictures.py) says of outputs it reads as pictures, beside the task's own figure.

For each model of bench/newmodels.py and each preset whose quantized file lies in ``--out-dir``
(``<model>.<preset>.onnx``, as bench/newmodels.py writes them), on ``--held`` held-out feeds (seed 1000):
the task metric, the pooled cosine, and per picture output (``pictures.picture_range`` over float's
outputs) the share of 8-bit values within 3 levels of float's, the PSNR and the worst error, held
against the preset's family floor. A file the floor held ("holds", repair kept nothing) is exactly
what the floor judged, so this says how the picture judgement would have read it.

    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/picture_check.py --models terrain_unet \
        --out-dir /work/cache/newmodels8/out [--presets BF16,...] [--held 8]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import onnx

import bench.newmodels as nm
from onnxptq.analysis.pictures import PictureAgreement, picture_range
from testkit import zoo


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", required=True)
    ap.add_argument("--presets", default=",".join(nm.PRESETS))
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--held", type=int, default=8)
    args = ap.parse_args()
    for name in args.models.split(","):
        rel, make, metric_name, metric = nm.MODELS[name]
        path = nm.SRC / rel
        outputs = [o.name for o in onnx.load(str(path), load_external_data=False).graph.output]
        held = make(args.held, 1000)
        ref_run = zoo.session_runner(path)
        refs = [ref_run(f) for f in held]
        spans = {i: picture_range([r[i] for r in refs]) for i in range(len(outputs))}
        print(f"# {name}: picture outputs {[(outputs[i], s) for i, s in spans.items() if s]}", flush=True)
        for preset in args.presets.split(","):
            file = Path(args.out_dir) / f"{name}.{preset}.onnx"
            if not file.exists():
                continue
            t0 = time.process_time()
            run = zoo.session_runner(file)
            gots = [run(f) for f in held]
            memo_ref = {id(f): r for f, r in zip(held, refs)}
            memo_got = {id(f): g for f, g in zip(held, gots)}
            task = float(metric(lambda f: memo_ref[id(f)], lambda f: memo_got[id(f)], held, None))
            cos = float(zoo.output_cosine(lambda f: memo_ref[id(f)], lambda f: memo_got[id(f)], held))
            floor = nm.floor(preset)
            parts = []
            for i, span in spans.items():
                if not span:
                    continue
                agreement = PictureAgreement(*span)
                for r, g in zip(refs, gots):
                    agreement.add(np.asarray(r[i]), np.asarray(g[i]))
                p = agreement.judge()
                verdict = "breaks" if p.share < floor else "holds"
                parts.append(f"{outputs[i]}: {p.share:.4f} within 3, PSNR {p.psnr:.1f} dB, worst {p.worst} -> {verdict}")
            print(f"{name} {preset}: task ({metric_name}) {task:.4f} vs floor {floor}; cosine {cos:.5f}; "
                  + "; ".join(parts) + f" [{time.process_time() - t0:.1f} CPU s]", flush=True)


if __name__ == "__main__":
    main()
