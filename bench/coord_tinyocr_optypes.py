"""tinyocr_rec under a preset with repair off: CTC strings kept on 32 held-out lines, plain and with every planned node of
one op type kept float (nodes_to_exclude). Usage: PRESET."""
import sys, dataclasses, numpy as np, onnxruntime as ort, onnx, time
sys.path[:0] = ["bench", "."]
import newmodels as nm
from testkit import zoo
from collections import Counter
from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config
path = "/work/cache/newmodels/src/tinyocr/assets/PP-OCRv6_rec_tiny.onnx"
model = onnx.load(path)
cal, held = nm.tinyocr_rec_feeds(12, 1), nm.tinyocr_rec_feeds(32, 2)
s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
refs = [zoo._ctc_indices(s.run(None, f)[0]) for f in held]
preset = sys.argv[1]
def run(**kw):
    cfg = dataclasses.replace(resolve_config(preset), repair=False, **kw)
    r = quantize(model, cfg, data=cal)
    q = ort.InferenceSession(r.model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = [zoo._ctc_indices(q.run(None, f)[0]) for f in held]
    return np.mean([a == b for a, b in zip(refs, got)]), r
agree, r = run()
print("plain", agree)
types = {n.name: n.op_type for n in model.graph.node}
planned = Counter(types.get(n, "?") for n in r.plan.nodes)
print(planned)
for op in planned:
    names = tuple(n for n in r.plan.nodes if types.get(n) == op)
    a, _ = run(nodes_to_exclude=names)
    print("without", op, len(names), a)
