"""Which zoo models hold coordinate tensors by structure (analysis/coordinates.py), and candidate grid outputs."""
import glob, sys, os, onnx
from onnxptq.analysis.coordinates import coordinate_tensors, coordinate_outputs
paths = sorted(set(glob.glob("/work/cache/newmodels*/src/**/*.onnx", recursive=True) + glob.glob("/work/shared/models/**/*.onnx", recursive=True)))
n = 0
for p in paths:
    if os.path.getsize(p) > 400e6:
        continue
    try:
        m = onnx.load(p, load_external_data=False)
        m = onnx.shape_inference.infer_shapes(m)
    except Exception as e:
        print("skip", p, type(e).__name__); continue
    n += 1
    t = coordinate_tensors(m)
    o = coordinate_outputs(m)
    if t or o:
        print(p.split("/src/")[-1], {k: v.read_as for k, v in list(t.items())[:4]}, len(t), "outputs:", {k: (v.read_as if v else "by values?") for k, v in o.items()})
print("models scanned", n)
