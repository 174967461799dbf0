"""The candidate grid outputs of zoo models (shape [N, 2, H, W] / [N, H, W, 2]) read by their float values: grid or not."""
import sys, numpy as np, onnx
sys.path[:0] = ["bench", "."]
import newmodels as nm
from testkit import zoo
from onnxptq.analysis.coordinates import coordinate_outputs, coordinate_readings
for key in sys.argv[1].split(","):
    path, feeds_of = nm.MODELS[key][0], nm.MODELS[key][1]
    m = onnx.shape_inference.infer_shapes(onnx.load(path))
    cands = coordinate_outputs(m)
    feeds = feeds_of(4, 2)
    run = zoo.session_runner(path)
    names = [o.name for o in m.graph.output]
    outs = [dict(zip(names, run(f))) for f in feeds]
    print(key, {n: ("structural" if c else "by values") for n, c in cands.items()}, "-> read as points:",
          sorted(coordinate_readings(cands, outs)))
