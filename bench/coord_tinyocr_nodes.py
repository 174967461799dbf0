"""tinyocr_rec BF16 (repair off), each planned node kept float alone: the quantized margin (float's choice minus the best
other) at the two steps that flip (line 9 step 5, line 15 step 13 of the 32 held-out lines). Usage: PRESET."""
import sys, dataclasses, numpy as np, onnxruntime as ort, onnx, time
sys.path[:0] = ["bench", "."]
import newmodels as nm
from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config
path = "/work/cache/newmodels/src/tinyocr/assets/PP-OCRv6_rec_tiny.onnx"
model = onnx.load(path)
cal, held = nm.tinyocr_rec_feeds(12, 1), nm.tinyocr_rec_feeds(32, 2)
crit = [(9, 5), (15, 13)]
s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
fl = {i: s.run(None, held[i])[0][0] for i, _ in crit}
def score(excl=()):
    cfg = dataclasses.replace(resolve_config(sys.argv[1]), repair=False, nodes_to_exclude=tuple(excl))
    r = quantize(model, cfg, data=cal)
    q = ort.InferenceSession(r.model.SerializeToString(), providers=["CPUExecutionProvider"])
    out = []
    for i, t in crit:
        a, b = fl[i][t], q.run(None, held[i])[0][0][t]
        k = a.argmax()
        out.append(float(b[k] - np.max(np.delete(b, k))))  # >0: float's choice kept
    return out, r
base, r = score()
print("plain margins", base)
types = {n.name: n.op_type for n in model.graph.node}
res = []
for n in r.plan.nodes:
    m, _ = score([n])
    res.append((sum(m), n, types.get(n), m))
res.sort(reverse=True)
for row in res[:12]: print(row)
