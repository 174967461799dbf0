"""Issue 27 item 3: which graphs make onnxruntime's session creation segfault (fp16 Transpose -> MatMul).

exportfuzz found onnxruntime 1.32 dying (SIGSEGV) while it opens a default session on some fp16
models. This script builds small one-pattern models over a grid (element type, Transpose perm and
rank, which MatMul operand the Transpose feeds, constant or fed second operand, optimization level,
disabled optimizers) and opens each in its own subprocess, so a crash is a recorded exit code, not
a dead probe. ``--files`` probes given model files the same way (the fuzz exports, zoo models), and
``--check`` asks :func:`onnxptq.sessions.crash_trigger` about each model too, so the graph check is
compared with what onnxruntime does.

    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/ort_fp16_crash.py --grid --check
    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/ort_fp16_crash.py --check --files /work/cache/exportfuzz/*.onnx

``--rewrite``: the rewrite :func:`move_batch_transposes` (tried, not adopted) on each
file, a default session on it against the unfused session on the original, bit for bit (3 random feeds).

``--quantize PRESET --src DIR``: quantize each file (no data: the presets that need none) in a child
whose ``onnxptq`` comes from ``DIR`` and print the child's exit code, the delivered file's sha256 and
the exit code of a default session opened on it (-11: the crash), to compare main's files with a
branch's (run it once with each ``--src``); ``--samples N`` quantizes with N random feeds.
"""

from __future__ import annotations

import _common  # noqa: F401  (puts the repository root on sys.path)
import argparse
import itertools
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxptq.graph import ort_crash

OPEN = """
import sys, onnxruntime as ort
o = ort.SessionOptions()
o.graph_optimization_level = getattr(ort.GraphOptimizationLevel, sys.argv[2])
ort.InferenceSession(sys.argv[1], o, providers=["CPUExecutionProvider"],
                     disabled_optimizers=[d for d in sys.argv[3].split(",") if d])
"""

TYPES = {"float16": TensorProto.FLOAT16, "float": TensorProto.FLOAT, "bfloat16": TensorProto.BFLOAT16,
         "double": TensorProto.DOUBLE}
LEVELS = {"all": "ORT_ENABLE_ALL", "extended": "ORT_ENABLE_EXTENDED"}


def opens(path: str | Path, level: str = "all", disabled: str = "") -> int:
    """The exit code of a fresh process that opens ``path`` (0: it opened; -11: SIGSEGV)."""
    return subprocess.run([sys.executable, "-c", OPEN, str(path), LEVELS[level], disabled],
                          capture_output=True, timeout=120).returncode


def pattern(dtype: str, perm: tuple[int, ...], side: str, const_other: bool, fanout: bool = False) -> onnx.ModelProto:
    """``Transpose(perm)`` of a fed rank-len(perm) tensor into MatMul's ``side`` operand ("a" or
    "b"); the other operand a constant (``const_other``) or a second input."""
    rank = len(perm)
    shape = [8] * rank  # every perm gives a valid MatMul operand
    et = TYPES[dtype]
    x = helper.make_tensor_value_info("x", et, shape)
    tshape = [shape[p] for p in perm]
    other_shape = [8, 8]
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=list(perm))]
    inputs, inits = [x], []
    if const_other:
        w = np.random.default_rng(0).standard_normal(other_shape).astype(np.float32)
        tensor = numpy_helper.from_array(w, "w")
        if et != TensorProto.FLOAT:
            tensor = helper.make_tensor("w", et, other_shape, w.astype(np.float16 if dtype == "float16" else np.float64).ravel().tolist()) \
                if dtype in ("float16", "double") else helper.make_tensor("w", et, other_shape, [0.5] * 64)
        inits.append(tensor)
    else:
        inputs.append(helper.make_tensor_value_info("w", et, other_shape))
    operands = ["t", "w"] if side == "a" else ["w", "t"]
    nodes.append(helper.make_node("MatMul", operands, ["y"]))
    outputs = [helper.make_tensor_value_info("y", et, None)]
    if fanout:
        outputs.append(helper.make_tensor_value_info("t", et, None))
    graph = helper.make_graph(nodes, "probe", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 9
    return model


def grid(check: bool = False) -> list[dict]:
    """Every grid point with its exit codes (and the graph check's answer where asked)."""
    rows = []
    perms = [(1, 0), (1, 0, 2), (0, 2, 1), (2, 0, 1), (1, 2, 0), (2, 1, 0), (0, 2, 1, 3), (1, 0, 2, 3), (0, 1, 3, 2),
             (1, 2, 0, 3), (1, 2, 3, 0), (2, 0, 1, 3)]
    with tempfile.TemporaryDirectory() as tmp:
        for dtype, perm, side, const_other, fanout in itertools.product(TYPES, perms, ("a", "b"), (True, False), (False, True)):
            if fanout and dtype != "float16":
                continue
            model = pattern(dtype, perm, side, const_other, fanout)
            path = Path(tmp) / "m.onnx"
            onnx.save(model, path)
            row = {"dtype": dtype, "perm": list(perm), "side": side, "const": const_other, "fanout": fanout,
                   "all": opens(path)}
            if row["all"] != 0:
                row["extended"] = opens(path, "extended")
                row["no MatmulTransposeFusion"] = opens(path, "all", "MatmulTransposeFusion")
                row["no NchwcTransformer"] = opens(path, "all", "NchwcTransformer")
            if check:
                from onnxptq.sessions import crash_trigger
                row["trigger"] = [str(n) for n in crash_trigger(model)]
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def nested() -> list[dict]:
    """The float16 ``[1, 0, 2]`` pattern with a Constant weight inside a model-local function and
    inside an If branch (x captured from the outer graph), each opened in its own process."""
    w = helper.make_node("Constant", [], ["w"], value=numpy_helper.from_array(np.ones((16, 8), np.float16)))
    body = [w, helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2]), helper.make_node("MatMul", ["t", "w"], ["y"], name="mm")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT16, [2, 4, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT16, [4, 2, 8])
    function = helper.make_function("local", "F", ["x"], ["y"], body, [helper.make_opsetid("", 17)])
    call = helper.make_graph([helper.make_node("F", ["x"], ["y"], domain="local")], "g", [x], [y])
    in_function = helper.make_model(call, functions=[function], opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])
    zeros = helper.make_node("Constant", [], ["z"], value=numpy_helper.from_array(np.zeros((4, 2, 8), np.float16)))
    branch = helper.make_graph(body, "then", [], [y])
    other = helper.make_graph([zeros], "else", [], [helper.make_tensor_value_info("z", TensorProto.FLOAT16, [4, 2, 8])])
    cond = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
    in_if = helper.make_model(helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=other)], "g",
                                                [x, cond], [y]), opset_imports=[helper.make_opsetid("", 17)])
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, model in (("function", in_function), ("if-branch", in_if)):
            model.ir_version = 8
            path = Path(tmp) / f"{name}.onnx"
            onnx.save(model, path)
            rows.append({"nested": name, "all": opens(path), "trigger": ort_crash.crash_trigger(model)})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def move_batch_transposes(model: onnx.ModelProto) -> list[str]:
    """Rewrite, in place, each triggering ``MatMul(Transpose(a), W)`` of the main graph whose
    Transpose only moves the batch axes (perm ``[1, .., r-2, 0, r-1]``, on the first operand) and
    whose ``W`` is a rank-2 initializer as ``Transpose(MatMul(a, W))``, the exact Casts between them
    kept on ``a``; returns the MatMuls' names (those left hold the trigger still: a warning names them).

    Why it is exact: with a rank-2 ``W`` the batch axes come from ``a`` alone and each output row is
    the same dot products over the same row of ``a``; the Transpose moves float16 values unchanged
    (Casts commute with it). onnxruntime's fusion looks for a Transpose *feeding* a MatMul, so a
    default session opens it. Checked bit for bit against the unfused session by ``--rewrite``. Only where every tensor between the Transpose and the
    MatMul has that one consumer (else the rewrite would have to copy the Transpose).

    Kept here, not in the library: it is exact on the minimal model, its FP16 delivery and the GRU
    export, but not on the MHA export (bench/RESULTS.md, fp16crash): there the moved Transpose sits
    between the MatMul and an Add, onnxruntime runs it in float32 and drops the float16 rounding of
    the MatMul's output that the unfused session keeps."""
    found: list[str] = []
    sites: list = []
    ort_crash._scan(model.graph, found, "", sites)
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    consumers: dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            consumers[name] = consumers.get(name, 0) + 1
    outputs = {o.name for o in graph.output}
    done = []
    for (matmul, side, transpose, chain), name in zip(sites, found):
        perm = next(list(a.ints) for a in transpose.attribute if a.name == "perm")
        rank = len(perm)
        weight = inits.get(matmul.input[1])
        between = [transpose.output[0], *(c.output[0] for c in chain)]
        if side != 0 or perm != list(range(1, rank - 1)) + [0, rank - 1] or weight is None or len(weight.dims) != 2 \
                or any(consumers.get(t, 0) != 1 or t in outputs for t in between):
            continue
        first = chain[-1] if chain else matmul  # the node that read the Transpose's output
        first.input[0] = transpose.input[0]
        moved = matmul.output[0]
        matmul.output[0] = f"{moved}_before_batch_transpose"
        transpose.input[0], transpose.output[0] = matmul.output[0], moved
        stale = set(between)
        kept = [v for v in graph.value_info if v.name not in stale]
        del graph.value_info[:]
        graph.value_info.extend(kept)
        nodes = [n for n in graph.node if n is not transpose]
        at = next(i for i, n in enumerate(nodes) if n is matmul)
        nodes.insert(at + 1, transpose)
        del graph.node[:]
        graph.node.extend(nodes)
        done.append(name)
    return done


QUANTIZE = """
import hashlib, logging, subprocess, sys, tempfile, numpy as np, onnx, onnxptq
from onnx import helper
logging.disable(logging.WARNING)
data = None
if int(sys.argv[3]):  # random feeds: float inputs normal, int inputs small, symbolic axes 2
    rng = np.random.default_rng(0)
    model = onnx.load(sys.argv[1], load_external_data=False)
    inits = {i.name for i in model.graph.initializer}
    def feed(info):
        t = info.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else 2 for d in t.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(t.elem_type)
        return rng.standard_normal(shape).astype(dtype) if np.issubdtype(dtype, np.floating) else rng.integers(0, 3, shape).astype(dtype)
    data = [{i.name: feed(i) for i in model.graph.input if i.name not in inits} for _ in range(int(sys.argv[3]))]
with tempfile.TemporaryDirectory() as tmp:
    onnxptq.quantize(sys.argv[1], sys.argv[2], data=data, output=tmp + "/q.onnx")
    opened = subprocess.run([sys.executable, "-c", "import sys, onnxruntime as o; o.InferenceSession(sys.argv[1])", tmp + "/q.onnx"]).returncode
    print(hashlib.sha256(open(tmp + "/q.onnx", "rb").read()).hexdigest(), "default-session-rc=%d" % opened)
"""


def quantized_digest(path: str, preset: str, src: str, samples: int = 0) -> tuple[int, str]:
    """(exit code, "sha256 of the delivered file, a default session's exit code on it") of
    ``onnxptq.quantize(path, preset)`` run from ``src`` (with ``samples`` random feeds where > 0)."""
    import os
    env = dict(os.environ, PYTHONPATH=src)
    done = subprocess.run([sys.executable, "-c", QUANTIZE, path, preset, str(samples)], capture_output=True, text=True, env=env, timeout=1200)
    lines = done.stdout.splitlines()
    return done.returncode, lines[-1] if done.returncode == 0 and lines else done.stderr.strip().splitlines()[-1:][0] if done.stderr.strip() else ""


REWRITE = """
import copy, sys, numpy as np, onnx, onnxruntime as ort
from onnx import helper
sys.path.insert(0, sys.argv[2])
from ort_fp16_crash import move_batch_transposes
from onnxptq.graph.ort_crash import crash_trigger
model = onnx.load(sys.argv[1])
moved = copy.deepcopy(model)
names = move_batch_transposes(moved)
rng = np.random.default_rng(0)
inits = {i.name for i in model.graph.initializer}
def feed(info):
    t = info.type.tensor_type
    shape = [d.dim_value if d.HasField("dim_value") else 3 for d in t.shape.dim]
    dtype = helper.tensor_dtype_to_np_dtype(t.elem_type)
    return rng.standard_normal(shape).astype(dtype) if np.issubdtype(dtype, np.floating) else rng.integers(0, 3, shape).astype(dtype)
feeds = [{i.name: feed(i) for i in model.graph.input if i.name not in inits} for _ in range(3)]
unfused = ort.InferenceSession(model.SerializeToString(), disabled_optimizers=["MatmulTransposeFusion"])
default = ort.InferenceSession(moved.SerializeToString())
moved_unfused = ort.InferenceSession(moved.SerializeToString(), disabled_optimizers=["MatmulTransposeFusion"])
def same(x, y):
    return int(all(a.tobytes() == b.tobytes() for f in feeds for a, b in zip(x.run(None, f), y.run(None, f))))
# the rewrite alone (both unfused), then what a user's default session adds (the fusion elsewhere)
print(f"moved={len(names)} left={len(crash_trigger(moved))} rewrite-bit-identical={same(unfused, moved_unfused)} "
      f"default-vs-unfused-bit-identical={same(unfused, default)}")
"""


def rewritten(path: str) -> tuple[int, str]:
    """(exit code, what moved and whether the default session on the rewrite matches the unfused one bit for bit)."""
    done = subprocess.run([sys.executable, "-c", REWRITE, path, str(Path(__file__).parent)], capture_output=True, text=True, timeout=600)
    return done.returncode, (done.stdout.strip().splitlines() or [""])[-1] or (done.stderr.strip().splitlines() or [""])[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", action="store_true", help="probe the built grid")
    parser.add_argument("--files", nargs="*", default=[], help="model files to probe")
    parser.add_argument("--check", action="store_true", help="also ask onnxptq.sessions.crash_trigger")
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument("--quantize", nargs="*", default=[], help="presets to quantize each file with (sha256 of the result)")
    parser.add_argument("--nested", action="store_true", help="probe the pattern in a function and in an If branch")
    parser.add_argument("--rewrite", action="store_true", help="check this script's move_batch_transposes (tried, not adopted) on each file")
    parser.add_argument("--samples", type=int, default=0, help="random feeds to quantize with (0: no data)")
    parser.add_argument("--src", default="src", help="the onnxptq source folder the quantizing child imports")
    args = parser.parse_args()
    rows = grid(args.check) if args.grid else []
    if args.nested:
        rows += nested()
    for name in args.files:
        row = {"file": name, "all": opens(name)}
        if args.check:
            from onnxptq.sessions import crash_trigger
            row["trigger"] = [str(n) for n in crash_trigger(onnx.load(name, load_external_data=False))]
        if args.rewrite:
            row["rewrite"] = rewritten(name)
        for preset in args.quantize:
            row[preset] = quantized_digest(name, preset, args.src, args.samples)
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
