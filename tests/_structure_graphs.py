"""Synthetic graphs of written-out normalizations and activations, as exporters spell them (for tests).

Each model is ``x → MatMul(W1) → <pattern> → MatMul(W2) → out`` at opset 17 (the region's input
and output are layer activations, as in a real block), with seeded weights. The pattern builders
write only primitive ops; none of them is what prepare's fusions recognise, except where noted.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

H = 64
S = 16


class _B:
    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.n = 0

    def const(self, value, name: str | None = None) -> str:
        self.n += 1
        name = name or f"c{self.n}"
        self.inits.append(numpy_helper.from_array(np.asarray(value, np.float32), name))
        return name

    def ints(self, value) -> str:
        self.n += 1
        name = f"i{self.n}"
        self.inits.append(numpy_helper.from_array(np.asarray(value, np.int64), name))
        return name

    def op(self, op: str, *inputs: str, **attrs) -> str:
        self.n += 1
        out = f"{op.lower()}_{self.n}"
        self.nodes.append(helper.make_node(op, list(inputs), [out], name=f"{op}_{self.n}", **attrs))
        return out

    def mean(self, x: str) -> str:
        return self.op("ReduceMean", x, axes=[-1], keepdims=1)


def layernorm_ex2(b: _B, x: str) -> str:
    """E[x²] − E[x]² (JAX/TF): mean, mean of squares, var = E[x²] − E[x]², (x − μ)/√(var+ε)·γ + β."""
    rng = np.random.default_rng(1)
    m = b.mean(x)
    m2 = b.mean(b.op("Mul", x, x))
    var = b.op("Sub", m2, b.op("Mul", m, m))
    std = b.op("Sqrt", b.op("Add", var, b.const(1e-5)))
    n = b.op("Div", b.op("Sub", x, m), std)
    return b.op("Add", b.op("Mul", n, b.const(1 + 0.1 * rng.standard_normal(H))), b.const(0.1 * rng.standard_normal(H)))


def rmsnorm(b: _B, x: str) -> str:
    """x · 1/√(mean(x²) + ε) · γ, with Pow(x, 2) and Reciprocal (LLaMA-style exports)."""
    rng = np.random.default_rng(2)
    ms = b.mean(b.op("Pow", x, b.const(2.0)))
    inv = b.op("Reciprocal", b.op("Sqrt", b.op("Add", ms, b.const(1e-6))))
    return b.op("Mul", b.op("Mul", x, inv), b.const(1 + 0.1 * rng.standard_normal(H)))


def gelu_tanh(b: _B, x: str) -> str:
    """½x(1 + tanh(√(2/π)(x + 0.044715·x³))) with x³ as Mul(Mul(x, x), x)."""
    cube = b.op("Mul", b.op("Mul", x, x), x)
    inner = b.op("Mul", b.op("Add", x, b.op("Mul", cube, b.const(0.044715))), b.const(np.sqrt(2 / np.pi)))
    gate = b.op("Add", b.op("Tanh", inner), b.const(1.0))
    return b.op("Mul", b.op("Mul", x, b.const(0.5)), gate)


def gelu_erf(b: _B, x: str) -> str:
    """x · ½(1 + erf(x/√2)) (PyTorch's exporter)."""
    gate = b.op("Add", b.op("Erf", b.op("Div", x, b.const(np.sqrt(2.0)))), b.const(1.0))
    return b.op("Mul", b.op("Mul", x, gate), b.const(0.5))


def silu(b: _B, x: str) -> str:
    """x · Sigmoid(x)."""
    return b.op("Mul", x, b.op("Sigmoid", x))


PATTERNS = {"layernorm_ex2": layernorm_ex2, "rmsnorm": rmsnorm, "gelu_tanh": gelu_tanh, "gelu_erf": gelu_erf, "silu": silu}


def pattern_model(pattern: str, *, offset: float = 0.0, scale: float = 1.0) -> onnx.ModelProto:
    """``x → MatMul → pattern → MatMul → out``; ``offset`` adds a constant to the first layer's
    bias (a LayerNorm input with a large common mode, as residual streams have); ``scale`` widens
    the first layer's outputs (pre-activation ranges of ±10 and more are common)."""
    rng = np.random.default_rng(0)
    b = _B()
    w1 = b.const(scale * rng.standard_normal((H, H)) / np.sqrt(H), "w1")
    w2 = b.const(rng.standard_normal((H, H)) / np.sqrt(H), "w2")
    h = b.op("Add", b.op("MatMul", "x", w1), b.const(offset + 0.1 * rng.standard_normal(H), "b1"))
    y = PATTERNS[pattern](b, h)
    b.nodes.append(helper.make_node("MatMul", [y, w2], ["out"], name="MatMul_out"))
    graph = helper.make_graph(b.nodes, pattern, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", S, H])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", S, H])], b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def pattern_data(n: int = 24, seed: int = 3) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((1, S, H)).astype(np.float32)} for _ in range(n)]


def planted_model(outlier: float = 1000.0, depth: int = 0) -> onnx.ModelProto:
    """A sensitive node: ``MatMul_hot``'s weight holds ``outlier`` in the row that reads a dead hidden
    unit (``w1``'s column 0 is zero, so the unit is 0 on every input and float never sees the row),
    while its other weights are ordinary (~0.13). One int8 grid per output column is set by the
    outlier (step ~8), so every ordinary weight rounds to 0 and the output vanishes (cosine 0.0 at
    A8W8); 16-bit weights (step 0.03) or float hold it. The break is a per-channel spread an int8
    weight grid cannot hold, found only by measuring the output: no plan rule keeps it float (a
    per-tensor gain constant would: pipeline/plan/gain_vectors.py; the activations' ranges are
    ordinary, so the range guard passes them). Token 0 is masked out after the next layer.
    ``depth`` more MatMul+Relu layers before it make the search space larger (node-by-node
    sensitivity would build one candidate per node)."""
    rng = np.random.default_rng(5)
    b = _B()
    dead = rng.standard_normal((H, H)) / np.sqrt(H)
    dead[:, 0] = 0.0  # hidden unit 0 never fires
    w1 = b.const(dead, "w1")
    w2 = b.const(rng.standard_normal((H, H)) / np.sqrt(H), "w2")
    hot = rng.standard_normal((H, H)) / np.sqrt(H)
    hot[0] = outlier  # the weights of the dead unit
    mask = np.ones((S, 1), np.float32)
    mask[0] = 0.0
    src = "x"
    for i in range(depth):
        w = b.const(np.eye(H) + 0.05 * rng.standard_normal((H, H)), f"wd{i}")
        src = b.op("Relu", b.op("MatMul", src, w)) if i % 2 else b.op("MatMul", src, w)
    h = b.op("MatMul", src, w1)
    b.nodes.append(helper.make_node("MatMul", [h, b.const(hot, "hot")], ["hot_out"], name="MatMul_hot"))
    z = b.op("Relu", b.op("MatMul", "hot_out", w2))
    b.nodes.append(helper.make_node("Mul", [z, b.const(mask, "mask")], ["masked"], name="Mul_mask"))
    # One value per token (a per-token regression: a width-1 head is no class score, so the floor
    # judges it by cosine alone, as the planted node's story needs; analysis/class_scores.py).
    b.nodes.append(helper.make_node("MatMul", ["masked", b.const(rng.standard_normal((H, 1)), "w3")], ["out"], name="MatMul_out"))
    graph = helper.make_graph(b.nodes, "planted", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", S, H])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", S, 1])], b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model
