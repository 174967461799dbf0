"""Full-tensor passes per block-format call: which executed ops touch every element, which only the
block maxima (issue 26 item 3: "count the passes in each body").

Per source tree (``--trees``, e.g. main's archive and ``src``), per preset and activation shape: the
body the tree's ``onnx_ops`` emits for a float32 input of that static shape (axis 1; BFP16/MX4/MX6/MX9
with the preset's attributes, MXINT8/MXFP* with blocks of 32, rounding mode 2 or ``--rounding-mode``) is built in a
subprocess, run by onnxruntime (one thread) on standard-normal data, and its profile read: every
node onnxruntime executed (``If`` branches only where taken, functions inlined), with its input and
output shapes. A node is

* a **write** when its output holds at least half as many elements as ``x`` (an elementwise op, a
  copy; ``Reshape`` and ``If`` themselves excluded: a free view, a branch's outputs counted inside);
* a **read** when it writes less but reads such a tensor (a reduction over the elements);
* **small** otherwise (per-block maxima, scales, shape values).

Each row also gives the CPU µs per call of that body alone (median of ``--runs``, the trees round-robin).

    PYTHONPATH=src:. python bench/block_passes.py --trees /work/cache/base/src,src \
        --presets BFP16,MX9,MXINT8,MXFP8_E4M3,MXFP4 --shape 1,16,384,384 --shape 1,64,56,56 [--runs 30] [--ops]
"""

from __future__ import annotations

import _common  # noqa: F401  (repository root on sys.path)
import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

CHILD = r'''
import sys
sys.path[:0] = [{tree!r}]
import onnx
from onnx import helper, TensorProto
shape, preset = {shape!r}, {preset!r}
if preset.startswith("MX") and preset[2:3] in ("I", "F"):
    from onnxptq.onnx_ops import mx
    elem = {{"MXINT8": "int8"}}.get(preset) or preset[2:].lower().replace("mxfp", "fp")
    elem = {{"FP8_E4M3": "fp8_e4m3", "FP8_E5M2": "fp8_e5m2", "FP6_E2M3": "fp6_e2m3", "FP6_E3M2": "fp6_e3m2",
             "FP4": "fp4_e2m1"}}.get(preset[2:], elem)
    q = mx.build("mx", "x", "y", name="q", opset=18, element_dtype=elem, axis=1, block_size=32,
                 rounding_mode={rm}, shape=shape, dtype="float32")
else:
    from onnxptq.formats.bfp import PRESETS
    from onnxptq.onnx_ops import bfp
    q = bfp.build("bfp", "x", "y", name="q", opset=18, shape=shape, dtype="float32", **dict(PRESETS[preset], axis=1))
g = helper.make_graph(q.nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)])
imports = {{"": 18, **{{d: v for d, v in q.opset_imports.items() if d != ""}}}}
m = helper.make_model(g, opset_imports=[helper.make_opsetid(d, v) for d, v in imports.items()], functions=q.functions)
m.ir_version = 8
onnx.save(m, {out!r})
print(q.functions[0].name)
'''


def _session(path: str, profile: str | None = None):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    so.log_severity_level = 3
    if profile:
        so.enable_profiling = True
        so.profile_file_prefix = profile
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def _numel(shapes: list) -> list[int]:
    return [int(np.prod(next(iter(s.values())), dtype=np.int64)) for s in shapes]


def passes(path: str, x: np.ndarray, workdir: str) -> tuple[dict[str, list[str]], int]:
    """``{"write"|"read"|"small": [op types]}`` of one call's executed nodes, and their number."""
    sess = _session(path, os.path.join(workdir, "prof"))
    sess.run(None, {"x": x})
    with open(sess.end_profiling()) as f:
        events = json.load(f)
    n = x.size
    kinds: dict[str, list[str]] = collections.defaultdict(list)
    count = 0
    for e in events:
        if e.get("cat") != "Node" or not e.get("name", "").endswith("_kernel_time"):
            continue
        args = e.get("args", {})
        op = args.get("op_name", "?")
        count += 1
        if op in ("If", "Reshape", "Constant"):
            continue
        ins = _numel(args.get("input_type_shape", []))
        outs = _numel(args.get("output_type_shape", []))
        if outs and max(outs) * 2 >= n:
            kinds["write"].append(op)
        elif ins and max(ins) * 2 >= n:
            kinds["read"].append(op)
        else:
            kinds["small"].append(op)
    return kinds, count


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trees", default="src", help="comma-separated source trees (…/src)")
    ap.add_argument("--presets", default="BFP16,MX9,MXINT8,MXFP8_E4M3,MXFP4")
    ap.add_argument("--shape", action="append", required=True, help="comma-separated dims (repeatable)")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--ops", action="store_true", help="list the op types of the full-tensor passes")
    ap.add_argument("--rounding-mode", type=int, default=2, help="the MX INT8/FP bodies' rounding_mode (0, 1, 2)")
    args = ap.parse_args()
    trees = [os.path.abspath(t) for t in args.trees.split(",")]
    work = tempfile.mkdtemp(prefix="block_passes_")
    print(f"<!-- {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}; load {os.getloadavg()[0]:.1f}; "
          f"1 thread; trees {' | '.join(trees)} -->")
    print("| preset | shape | tree | writes | reads | small nodes | executed nodes | µs per call | body |")
    print("|---|---|---|---:|---:|---:|---:|---:|---|")
    for preset in args.presets.split(","):
        for spec in args.shape:
            shape = [int(v) for v in spec.split(",")]
            x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
            rows = []
            for k, tree in enumerate(trees):
                out = os.path.join(work, f"{preset}_{k}.onnx")
                name = subprocess.run([sys.executable, "-c", CHILD.format(tree=tree, shape=shape, preset=preset, out=out, rm=args.rounding_mode)],
                                      check=True, capture_output=True, text=True,
                                      env=dict(os.environ, PYTHONPATH=tree)).stdout.strip()
                kinds, count = passes(out, x, work)
                rows.append((tree, name, kinds, count, _session(out)))
            times: list[list[float]] = [[] for _ in rows]
            for _ in range(args.runs):
                for k, row in enumerate(rows):
                    t = time.thread_time()
                    row[4].run(None, {"x": x})
                    times[k].append((time.thread_time() - t) * 1e6)
            for (tree, name, kinds, count, _), ts in zip(rows, times):
                w = len(kinds["write"])
                ops = f" ({', '.join(kinds['write'])}; reads {', '.join(kinds['read'])})" if args.ops else ""
                print(f"| {preset} | {spec} | {os.path.basename(os.path.dirname(tree)) or tree} | {w}{ops} | "
                      f"{len(kinds['read'])} | {len(kinds['small'])} | {count} | {statistics.median(ts):.0f} | `{name}` |",
                      flush=True)


if __name__ == "__main__":
    main()
