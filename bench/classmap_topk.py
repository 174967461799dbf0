"""fuzz18's topk_argmax_heads (bench/fuzz_corners.py, seed 27) quantized with 24 samples per preset, then on 200 fresh
feeds the share of rows whose top-3 index set is float's (analysis/index_outputs.py's reading) and whose ordered indices
are, with what repair did. Run with a tree's src first on the path to measure that tree's library.

    PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 python bench/classmap_topk.py A8W8,MXINT8,MXFP8_E4M3,MXFP4
"""
import logging
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort

import _common  # noqa: F401  (puts the repository root on sys.path)
import fuzz_corners as fc
import onnxptq

logging.basicConfig(level=logging.ERROR)
print(onnxptq.__file__)
model, feeds = fc._spelling18("topk_argmax_heads", 27)
fresh = feeds(200, 1234)
with tempfile.TemporaryDirectory() as d:
    onnx.save(model, f"{d}/m.onnx")
    ref = ort.InferenceSession(f"{d}/m.onnx")
    names = [o.name for o in ref.get_outputs()]
    k = names.index("topk_13")
    R = [ref.run(None, f)[k] for f in fresh]
    for preset in sys.argv[1].split(","):
        r = onnxptq.quantize(f"{d}/m.onnx", preset, data=feeds(24, 27), output=f"{d}/q_{preset}.onnx")
        q = ort.InferenceSession(f"{d}/q_{preset}.onnx")
        G = [q.run(None, f)[k] for f in fresh]
        sets = np.mean([set(a) == set(b) for ra, rb in zip(R, G) for a, b in zip(ra.tolist(), rb.tolist())])
        elem = np.mean([np.array_equal(a, b) for ra, rb in zip(R, G) for a, b in zip(ra, rb)])
        rep = r.repair or {}
        print(preset, f"fresh rows {sum(len(x) for x in R)}: sets kept {sets:.4f}, ordered {elem:.4f}; repair stepped up "
              f"{len(rep.get('stepped_up', []) or [])}, kept float {len(rep.get('kept_float', []) or [])}", flush=True)
