"""Which ops onnxruntime keeps in its blocked NCHWc layout between two Convs, read from the installed runtime.

Issue 26 item 3 (bf16lat18): a BF16 rounding between two Convs costs a ``ReorderOutput`` + ``ReorderInput`` because a
Cast has no NCHWc kernel. An exact rounding the layout could carry would have to be built from ops onnxruntime keeps
blocked. Its source (core/optimizer/nchwc_transformer.cc) lists them; this script asks the installed onnxruntime
instead: for each candidate it builds ``Conv(16→16, 3×3) → OP → Conv(16→16, 1×1)`` on ``[1, 16, 32, 32]`` (a second
Conv branch where OP takes two activations), optimizes it at the default level (``ORT_ENABLE_ALL``, one thread) and
counts the reorder nodes and the fused Conv activations in the optimized graph. "kept" = no more reorders than the
graph without OP (one ReorderInput at the input, one ReorderOutput at the output).

    PYTHONPATH=src:.:bench python bench/bf16_nchwc_ops.py
"""

from __future__ import annotations

import _common  # noqa: F401  (the repository root on sys.path)
import collections
import os
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

C, H = 16, 32


def _const(name: str, value, dtype=np.float32) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value, dtype), name)


def _candidates() -> dict[str, tuple[list[onnx.NodeProto], list[onnx.TensorProto]]]:
    """op label -> (nodes from ``a`` (and ``b``, a second Conv output) to ``t``, their constants)."""
    one = lambda op, **kw: ([helper.make_node(op, ["a"], ["t"], **kw)], [])  # noqa: E731
    bn = [_const("s", np.full(C, 2.0)), _const("bb", np.zeros(C)), _const("m", np.zeros(C)), _const("v", np.ones(C))]
    return {
        "none (Identity)": one("Identity"),
        "Relu": one("Relu"), "Sigmoid": one("Sigmoid"), "Tanh": one("Tanh"),
        "LeakyRelu": one("LeakyRelu", alpha=0.2), "HardSigmoid": one("HardSigmoid"), "HardSwish": one("HardSwish"),
        "Clip(0, 6)": ([helper.make_node("Clip", ["a", "lo", "hi"], ["t"])], [_const("lo", 0.0), _const("hi", 6.0)]),
        "Neg": one("Neg"), "Abs": one("Abs"), "Floor": one("Floor"), "Round": one("Round"),
        "Add(a, b)": ([helper.make_node("Add", ["a", "b"], ["t"])], []),
        "Sum(a, b)": ([helper.make_node("Sum", ["a", "b"], ["t"])], []),
        "Mul(a, b)": ([helper.make_node("Mul", ["a", "b"], ["t"])], []),
        "Sub(a, b)": ([helper.make_node("Sub", ["a", "b"], ["t"])], []),
        "Max(a, b)": ([helper.make_node("Max", ["a", "b"], ["t"])], []),
        "Add(a, const)": ([helper.make_node("Add", ["a", "k"], ["t"])], [_const("k", np.ones((1, C, 1, 1)))]),
        "Mul(a, const)": ([helper.make_node("Mul", ["a", "k"], ["t"])], [_const("k", np.full((1, C, 1, 1), 3.0))]),
        "Max(a, const)": ([helper.make_node("Max", ["a", "k"], ["t"])], [_const("k", -0.4)]),
        "BatchNormalization": ([helper.make_node("BatchNormalization", ["a", "s", "bb", "m", "v"], ["t"])], bn),
        "Concat(a, b) axis 1": ([helper.make_node("Concat", ["a", "b"], ["c"], axis=1),
                                 helper.make_node("Slice", ["c", "st", "en", "ax"], ["t"])],
                                [_const("st", [0], np.int64), _const("en", [C], np.int64), _const("ax", [1], np.int64)]),
        "MaxPool 3x3 s1 p1": one("MaxPool", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        "AveragePool 3x3 s1 p1": one("AveragePool", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        "Cast pair (bfloat16)": ([helper.make_node("Cast", ["a"], ["h"], to=TensorProto.BFLOAT16),
                                  helper.make_node("Cast", ["h"], ["t"], to=TensorProto.FLOAT)], []),
        "Cast pair (float16)": ([helper.make_node("Cast", ["a"], ["h"], to=TensorProto.FLOAT16),
                                 helper.make_node("Cast", ["h"], ["t"], to=TensorProto.FLOAT)], []),
        "Pad 0": ([helper.make_node("Pad", ["a", "p"], ["q"]), helper.make_node("Slice", ["q", "ps", "pe", "pa"], ["t"])],
                  [_const("p", [0, 0, 1, 1, 0, 0, 1, 1], np.int64), _const("ps", [1, 1], np.int64),
                   _const("pe", [H + 1, H + 1], np.int64), _const("pa", [2, 3], np.int64)]),
    }


def _model(nodes: list[onnx.NodeProto], consts: list[onnx.TensorProto]) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w1 = _const("w1", rng.normal(0, 0.1, (C, C, 3, 3)))
    w2 = _const("w2", rng.normal(0, 0.1, (C, C, 3, 3)))
    w3 = _const("w3", rng.normal(0, 0.1, (C, C, 1, 1)))
    body = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
            helper.make_node("Conv", ["x", "w2"], ["b"], pads=[1, 1, 1, 1])]
    reads_b = any("b" in n.input for n in nodes)
    if not reads_b:
        body = body[:1]
    graph = helper.make_graph(
        body + nodes + [helper.make_node("Conv", ["t", "w3"], ["y"])], "probe",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, H, H])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, C, H, H])],
        [w1, w3] + ([w2] if reads_b else []) + consts)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def optimized_ops(model: onnx.ModelProto) -> collections.Counter:
    """Op counts (with a fused Conv's activation as ``Conv+Act``) of onnxruntime's optimized graph."""
    with tempfile.TemporaryDirectory() as tmp:
        so = ort.SessionOptions()
        so.log_severity_level = 3
        so.intra_op_num_threads = 1
        so.optimized_model_filepath = os.path.join(tmp, "opt.onnx")
        ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        out = onnx.load(so.optimized_model_filepath)
    ops: collections.Counter = collections.Counter()
    for n in out.graph.node:
        act = next((a.s.decode() for a in n.attribute if a.name == "activation"), "")
        ops[n.op_type + (f"+{act}" if act else "")] += 1
    return ops


def main() -> None:
    print(f"onnxruntime {ort.__version__}")
    base = None
    for label, (nodes, consts) in _candidates().items():
        ops = optimized_ops(_model(nodes, consts))
        reorders = ops["ReorderInput"] + ops["ReorderOutput"]
        base = reorders if base is None else base
        others = ", ".join(f"{k} {v}" for k, v in sorted(ops.items()) if not k.startswith("Reorder"))
        print(f"{label:24s} reorders {reorders}  {'kept' if reorders <= base else 'NOT kept'}   [{others}]")


if __name__ == "__main__":
    main()
