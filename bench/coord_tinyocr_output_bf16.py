"""tinyocr_rec: float's output rounded to bfloat16 alone (ml_dtypes), CTC strings kept on 32 held-out lines."""
import sys, numpy as np, onnxruntime as ort, ml_dtypes
sys.path[:0] = ["bench", "."]
import newmodels as nm
from testkit import zoo
feeds = nm.tinyocr_rec_feeds(32, 2)
s = ort.InferenceSession("/work/cache/newmodels/src/tinyocr/assets/PP-OCRv6_rec_tiny.onnx", providers=["CPUExecutionProvider"])
same = []
for f in feeds:
    o = s.run(None, f)[0]
    r = o.astype(ml_dtypes.bfloat16).astype(np.float32)
    same.append(zoo._ctc_indices(o) == zoo._ctc_indices(r))
print("bf16 output rounding alone, strings kept:", np.mean(same), len(same))
