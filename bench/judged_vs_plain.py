"""Do the outputs the floor judges equal a user's plain session's? Since blockquant12 the verification reads the graph's
inner decisions from finish's session, whose model also returns the decision tensors; onnxruntime could fuse differently
around an extra output. Per (zoo decision model, preset): the delivered model's graph outputs on 8 held-out feeds, in a
default session (ORT_ENABLE_ALL, 1 thread) on the model as delivered and on the model with the decision tensors as extra
outputs (analysis/decisions.with_decision_outputs): bit-identical or the largest difference.

    PYTHONPATH=src:. OMP_NUM_THREADS=1 python bench/judged_vs_plain.py trueocr_rec,swift_f0,unidic_pos A8W8,A16W8,MXINT8
"""
import sys

import _common  # noqa: F401  (puts the repository root on sys.path)
from pathlib import Path
import numpy as np, onnx, onnxruntime as ort
import newmodels as nm, onnxptq
import onnxptq.pipeline.complete as cp
from onnxptq.analysis.decisions import with_decision_outputs
seen = {}
orig = cp.decision_tensors
def spy(model, decisions):
    seen["decisions"] = list(decisions); return orig(model, decisions)
cp.decision_tensors = spy
def path_of(p):
    return p if p.startswith("/") else str(nm.SRC / p)
for name in sys.argv[1].split(","):
    p, feeds_fn, *_ = nm.MODELS[name]
    feeds = feeds_fn(24, 0)
    for preset in sys.argv[2].split(","):
        seen.clear()
        r = onnxptq.quantize(path_of(p), preset, data=feeds)
        decs = seen.get("decisions") or []
        if not decs:
            print(name, preset, "no decisions"); continue
        extra, names = with_decision_outputs(r.model, decs)
        opts = ort.SessionOptions(); opts.intra_op_num_threads = 1
        plain = ort.InferenceSession(r.model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        more = ort.InferenceSession(extra.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        outs = [o.name for o in plain.get_outputs()]
        worst, same = 0.0, True
        for f in feeds[-8:]:
            a = plain.run(outs, f); b = more.run(outs, f)
            for x, y in zip(a, b):
                if x.shape != y.shape or not np.array_equal(x, y):
                    same = False
                    if np.issubdtype(np.asarray(x).dtype, np.floating):
                        worst = max(worst, float(np.max(np.abs(x.astype(np.float64) - y))))
        print(name, preset, f"{len(names)} decision tensors", "bit-identical" if same else f"DIFFER max abs {worst:.3g}", flush=True)
