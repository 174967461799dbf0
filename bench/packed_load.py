"""Do onnxruntime's CPU provider fold the packed-weight decoders, and what does loading cost?

For each model file given: the node count of the model as saved and of the session's optimized
graph (``optimized_model_filepath``, ORT_ENABLE_BASIC, which is where constant folding runs),
how many decode-chain op types remain, the session-creation wall time, and the process's peak RSS
while creating the session (each file in a fresh subprocess, so peaks do not mix).

    python bench/packed_load.py MODEL.onnx [MODEL.onnx ...]
"""

from __future__ import annotations

import collections
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

DECODE_OPS = {"Gather", "ScatterND", "Cast", "Slice", "Concat", "Transpose", "Reshape"}


def _one(path: str) -> dict:
    import onnx
    import onnxruntime as ort

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    with tempfile.TemporaryDirectory() as tmp:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        so.optimized_model_filepath = os.path.join(tmp, "opt.onnx")
        t = time.perf_counter()
        ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        load_s = time.perf_counter() - t
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        opt = onnx.load(so.optimized_model_filepath)
    src = onnx.load(path, load_external_data=False)
    ops_src = collections.Counter(n.op_type for n in src.graph.node)
    ops_opt = collections.Counter(n.op_type for n in opt.graph.node)
    return {"file": os.path.basename(path), "MB": round(os.path.getsize(path) / 2**20, 3),
            "nodes_saved": len(src.graph.node), "nodes_optimized": len(opt.graph.node),
            "decode_ops_saved": sum(ops_src[o] for o in DECODE_OPS), "decode_ops_optimized": sum(ops_opt[o] for o in DECODE_OPS),
            "packed_inits_left": sum(1 for t in opt.graph.initializer if t.name.startswith("packed_")),
            "load_s": round(load_s, 3), "load_peak_rss_MB": round(peak / 1024, 1), "rss_before_MB": round(before / 1024, 1)}


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--one":
        print(json.dumps(_one(sys.argv[2])))
        sys.exit(0)
    for p in sys.argv[1:]:
        out = subprocess.run([sys.executable, __file__, "--one", p], capture_output=True, text=True, check=True)
        print(out.stdout.strip())
