"""What the floor reads of a bench/newmodels.py class output, per preset, and what the rows' margins say (ties22).

Per (model, preset): quantize with defaults (``repair``) or with repair off (anything else), the floor's verdict,
the delivered file's size over float's, its CPU seconds, what repair kept or stepped up, the bench's own agreement on
the fresh feeds (seed 1000), and the top-1 rows' margins (analysis/row_ties.py: float's top-1 over top-2 ``m``, what
the quantized row keeps of it ``q``) on the floor's pooled rows (where it pooled them), on every calibration feed
(``ALLCALIB``) and on the fresh feeds (``FRESH``): the rows kept, the flips' margins and losses, the kept rows' loss
quantiles and RMS (the noise ``float_ties`` measures), the rows within it. Saved as ``<out>/<model>.<preset>.<what>.npz``.
Runs on either tree (main's ``_spare_near_ties`` or the branch's ``_spare_float_ties`` is watched).

    NEWMODELS30_SRC=/work/cache/newmodels30/src PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 nice -n 5 \
        python bench/float_ties_probe.py tempocnn_cnn A16W8,BFP16,MX9,MXINT8,A8W8,BF16 40 48 /work/cache/ties22/tc [repair]
"""
import dataclasses
import logging
import sys
import time
from pathlib import Path
import numpy as np
import newmodels as nm
from testkit import zoo
import onnxptq
from onnxptq.config.presets import get_preset
from onnxptq.analysis import floor as fl
from onnxptq.analysis import row_ties as rt

model, presets = sys.argv[1], sys.argv[2].split(",")
ncal, nheld = int(sys.argv[3]), int(sys.argv[4])
out_dir = Path(sys.argv[5]); out_dir.mkdir(parents=True, exist_ok=True)
repair = len(sys.argv) > 6 and sys.argv[6] == "repair"
logging.basicConfig(level=logging.ERROR)
CAP = []
orig = getattr(fl, "_spare_float_ties", None) or fl._spare_near_ties
def spy(check, margins, seen, as_reads, held, floor):
    seen = list(seen)
    rows = [(r, g) for r, g in seen if r.shape[-1] >= 2 and (r.ndim <= 2 or not as_reads)]
    pooled = margins.with_pairs(rows)
    found = [f for f in (rt._margins(r, g) for r, g in pooled._pairs) if f is not None]
    m, q, kept = (np.concatenate(p) for p in zip(*found))
    CAP.append((check.name, m, q, kept))
    return orig(check, margins, iter(seen), as_reads, held, floor)
setattr(fl, "_spare_float_ties" if hasattr(fl, "_spare_float_ties") else "_spare_near_ties", spy)
rel, make, metric_name, metric = nm.MODELS[model]
path = nm.SRC / rel
calib, held = make(ncal, 1), make(nheld, 1000)
ref = nm._memo(zoo.session_runner(path), held)
fsize = path.stat().st_size
for preset in presets:
    CAP.clear()
    out = out_dir / f"{model}.{preset}.{'rep' if repair else 'plain'}.onnx"
    c0 = time.process_time()
    res = onnxptq.quantize(str(path), dataclasses.replace(get_preset(preset), repair=repair), data=list(calib), output=str(out))
    cpu = time.process_time() - c0
    test = nm._memo(zoo.session_runner(out), held)
    rep = res.repair if isinstance(res.repair, dict) else {}
    print(f"== {model} {preset} repair={repair}: fresh {metric_name} {metric(ref, test, held, None):.4f} on {nheld} feeds; "
          f"file {out.stat().st_size / fsize:.3f}x; cpu {cpu:.1f}; kept {len(rep.get('kept_float', []))} stepped {len(rep.get('stepped_up', {}))}", flush=True)
    print("   verdict:", res.floor.describe(only_broken=not res.floor.ok)[:1500] if res.floor else None)
    cref = nm._memo(zoo.session_runner(path), calib); ctest = nm._memo(zoo.session_runner(out), calib)
    found = [rt._margins(np.asarray(cref(f)[0]), np.asarray(ctest(f)[0])) for f in calib]
    fm, fq, fk = (np.concatenate(p) for p in zip(*[x for x in found if x is not None]))
    CAP.append(("ALLCALIB", fm, fq, fk))
    hf = [rt._margins(np.asarray(ref(f)[0]), np.asarray(test(f)[0])) for f in held]
    hm, hq, hk = (np.concatenate(p) for p in zip(*[x for x in hf if x is not None]))
    CAP.append(("FRESH", hm, hq, hk))
    for name, m, q, kept in CAP:
        loss = m - q
        kl = loss[kept]
        print(f"   pooled {name}: rows {m.size} kept {kept.sum()} flips m={np.round(m[~kept],4).tolist()} loss={np.round(loss[~kept],4).tolist()}")
        print(f"   kept-loss max {kl.max():.4f} q99 {np.quantile(kl,.99):.4f} q95 {np.quantile(kl,.95):.4f} q90 {np.quantile(kl,.9):.4f} median {np.median(kl):.5f} rms {np.sqrt(np.mean(kl**2)):.5f}; abs-loss rms {np.sqrt(np.mean(loss**2)):.5f}")
        print(f"   rows with m<=max kept loss: {(m <= kl.max()).sum()}, m<=q95: {(m <= np.quantile(kl,.95)).sum()}")
        np.savez(out_dir / f"{model}.{preset}.{name.replace('/','_')}.npz", m=m, q=q, kept=kept)
