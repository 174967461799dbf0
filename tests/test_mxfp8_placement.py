"""MXFP8_E4M3 on a small ViT built here (issue 27 item 5; pipeline/plan/fp_blocks.py).

An FP-element MX format encodes the operands of dot products only (MatMul, Gemm, Conv), as the OCP
MX dot product and its direct-cast inference do: residual adds, LayerNorm, softmax, the written-out
GELU and the layer-scale products read float values. Its weights choose per block the OCP shared
exponent or the one above (the OCP rule clips a block maximum above 448). The model: patch
embedding Conv → class token + position embedding → two pre-norm encoder blocks (LayerNorm, 4-head
attention, erf GELU MLP, layer scale, residual adds) → LayerNorm → head; Gaussian weights scaled by
fan-in, a few residual channels with large values (as trained ViTs have), smooth image-like inputs.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config
from onnxptq.pipeline.plan.attention_scores import score_products
from onnxptq.pipeline.plan.fp_blocks import DOT_PRODUCT_OPS
from onnxptq.pipeline.plan.select import _Graph

IMG, PATCH, D, HEADS, MLP, LAYERS, CLASSES = 32, 8, 64, 4, 256, 2, 10
TOKENS = (IMG // PATCH) ** 2 + 1


class _Builder:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def const(self, name: str, value) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(value, np.float32), name))
        return name

    def ints(self, name: str, value) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(value, np.int64), name))
        return name

    def op(self, op_type: str, inputs: list[str], name: str, **attrs) -> str:
        self.nodes.append(helper.make_node(op_type, inputs, [name], name=name, **attrs))
        return name

    def linear(self, x: str, name: str, fan_in: int, fan_out: int) -> str:
        w = self.const(f"{name}.W", self.rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in))
        b = self.const(f"{name}.b", self.rng.standard_normal(fan_out) * 0.02)
        return self.op("Add", [self.op("MatMul", [x, w], f"{name}.mm"), b], f"{name}.out")

    def layernorm(self, x: str, name: str) -> str:
        gamma = self.const(f"{name}.g", 1.0 + 0.1 * self.rng.standard_normal(D))
        beta = self.const(f"{name}.b", 0.02 * self.rng.standard_normal(D))
        return self.op("LayerNormalization", [x, gamma, beta], name, axis=-1)

    def gelu(self, x: str, name: str) -> str:
        """GELU written out as PyTorch exports it: x · 0.5 · (1 + erf(x / √2))."""
        inner = self.op("Erf", [self.op("Div", [x, self.const(f"{name}.sqrt2", np.sqrt(2.0))], f"{name}.div")], f"{name}.erf")
        plus = self.op("Add", [inner, self.const(f"{name}.one", 1.0)], f"{name}.add")
        return self.op("Mul", [self.op("Mul", [x, plus], f"{name}.mul"), self.const(f"{name}.half", 0.5)], f"{name}.out")

    def attention(self, x: str, name: str) -> str:
        dh = D // HEADS
        heads = self.ints(f"{name}.heads", [1, TOKENS, HEADS, dh])
        q, k, v = (self.op("Transpose", [self.op("Reshape", [self.linear(x, f"{name}.{p}", D, D), heads], f"{name}.{p}.r")],
                           f"{name}.{p}.t", perm=[0, 2, 1, 3]) for p in "qkv")
        kt = self.op("Transpose", [k], f"{name}.kt", perm=[0, 1, 3, 2])
        scores = self.op("Mul", [self.op("MatMul", [q, kt], f"{name}.qk"), self.const(f"{name}.scale", dh ** -0.5)], f"{name}.scores")
        probs = self.op("Softmax", [scores], f"{name}.probs", axis=-1)
        ctx = self.op("Transpose", [self.op("MatMul", [probs, v], f"{name}.pv")], f"{name}.ctx.t", perm=[0, 2, 1, 3])
        merged = self.op("Reshape", [ctx, self.ints(f"{name}.merge", [1, TOKENS, D])], f"{name}.ctx")
        return self.linear(merged, f"{name}.o", D, D)

    def layer_scale(self, x: str, name: str) -> str:
        return self.op("Mul", [x, self.const(f"{name}.gamma", 0.1 + 0.05 * self.rng.random(D))], name)


def small_vit(seed: int = 0) -> onnx.ModelProto:
    b = _Builder(seed)
    w = b.const("patch.W", b.rng.standard_normal((D, 3, PATCH, PATCH)) / np.sqrt(3 * PATCH * PATCH))
    patches = b.op("Conv", ["image", w, b.const("patch.b", 0.02 * b.rng.standard_normal(D))], "patch", strides=[PATCH, PATCH])
    tokens = b.op("Transpose", [b.op("Reshape", [patches, b.ints("patch.flat", [1, D, TOKENS - 1])], "patch.r")], "patch.t", perm=[0, 2, 1])
    seq = b.op("Concat", [b.const("cls", 0.1 * b.rng.standard_normal((1, 1, D))), tokens], "tokens", axis=1)
    pos = 0.1 * b.rng.standard_normal((1, TOKENS, D))
    pos[..., :3] += 8.0  # a few residual channels far above the rest, as in trained ViTs
    x = b.op("Add", [seq, b.const("pos", pos)], "embed")
    for i in range(LAYERS):
        a = b.layer_scale(b.attention(b.layernorm(x, f"l{i}.ln1"), f"l{i}.attn"), f"l{i}.ls1")
        x = b.op("Add", [x, a], f"l{i}.res1")
        h = b.gelu(b.linear(b.layernorm(x, f"l{i}.ln2"), f"l{i}.fc1", D, MLP), f"l{i}.gelu")
        x = b.op("Add", [x, b.layer_scale(b.linear(h, f"l{i}.fc2", MLP, D), f"l{i}.ls2")], f"l{i}.res2")
    cls = b.op("Gather", [b.layernorm(x, "final.ln"), b.ints("zero", 0)], "cls.out", axis=1)
    b.op("MatMul", [cls, b.const("head.W", b.rng.standard_normal((D, CLASSES)) / np.sqrt(D))], "logits")
    graph = helper.make_graph(b.nodes, "small_vit", [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, IMG, IMG])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, CLASSES])], b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def images(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    """Smooth, normalised image-like inputs: a few low-frequency waves per channel plus a little noise."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:IMG, 0:IMG] / IMG
    feeds = []
    for _ in range(n):
        img = np.stack([sum(rng.normal() * np.sin(2 * np.pi * (rng.uniform(0.5, 3) * xx + rng.uniform(0.5, 3) * yy) + rng.uniform(0, 6))
                            for _ in range(3)) for _ in range(3)])
        feeds.append({"image": (img + 0.1 * rng.standard_normal(img.shape))[None].astype(np.float32)})
    return feeds


def _outputs(model: onnx.ModelProto, feeds) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.concatenate([session.run(None, f)[0].ravel() for f in feeds])


def _cosine_error(a: np.ndarray, b: np.ndarray) -> float:
    return 1.0 - float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.fixture(scope="module")
def vit():
    model = small_vit()
    calib, held = images(4, 1), images(8, 2)
    return model, calib, held, _outputs(model, held)


def _quantize(vit, **changes):
    model, calib, _, _ = vit
    return quantize(model, resolve_config("MXFP8_E4M3").replace(repair=False, **changes), calib, eval_samples=0)


def test_only_dot_product_operands_are_encoded(vit):
    model = vit[0]
    plan = _quantize(vit).plan
    kinds = {n.name: n.op_type for n in model.graph.node}
    activations = [t for t in plan.tensors.values() if t.role == "activation"]
    assert activations, "the dot products' inputs are encoded"
    for t in activations:
        assert t.consumers and {kinds[c] for c in t.consumers} <= DOT_PRODUCT_OPS, (t.name, t.consumers)
    # the residual stream, softmax in/out of the way to it, LayerNorm inputs, the GELU input
    for name in ("embed", "l0.res1", "l1.res2"):  # residual sums (the transformer rule already)
        assert name not in plan.tensors and name in plan.float_tensors, name
    for name in ("l0.attn.scores", "l0.fc1.out", "l0.fc1.mm", "l0.ls2", "l0.attn.q.r", "patch"):
        assert name not in plan.tensors and "dot product" in plan.float_tensors[name], name
    assert {"l0.attn.probs", "l0.gelu.out", "l0.ln1", "image"} <= set(plan.tensors), "what the MatMuls/Conv read"
    assert "l0.ls1.gamma" in plan.float_tensors, "an elementwise constant (layer scale) stays float"
    assert plan.tensors["l0.fc1.W"].quant.attr_dict["scale_search"] == 1  # X or X+1 (fp_blocks.mx_weight_exponents)
    assert "l0.fc1.b" not in plan.tensors


def test_dot_operands_and_weight_exponent_search_keep_the_vit_close(vit):
    """Every op encoded with the OCP exponent (before issue 27 item 5) vs the dot products' operands
    only vs also choosing the weights' exponent by squared error: each step lowers the output's
    cosine error (measured: 3.5e-3 → 7.5e-4 → 6.9e-4 on these inputs)."""
    model, _, held, ref = vit
    # Bias correction (automatic for FP-element MX weights since) is held off: these are the two
    # plan rules alone. With it on in all three: 2.4e-3, 6.6e-4, 7.0e-4 (the search no longer helps
    # this model; bench/RESULTS.md "MXFP8 and MXINT8 on readers and the ViT, second round"). So are
    # the attention's queries and keys in MXINT8 (fp_blocks.attention_score_operands): with them in
    # all three, 2.45e-3, 7.45e-4, 7.46e-4 (their scores' error falls 21x, the output's moves within
    # what the weight search changes: bench/RESULTS.md mxfp8qk19).
    fp8 = resolve_config("MXFP8_E4M3").activation
    same = {"bias_correction": False, "tensor_overrides": {t: fp8 for pair in score_products(_Graph(model)).values() for t in pair}}
    every = _cosine_error(ref, _outputs(_quantize(vit, fp_block_dot_operands_only=False, mx_weight_scale_search=0,
                                                  mx_activation_scale_search=0, **same).model, held))
    dots = _cosine_error(ref, _outputs(_quantize(vit, mx_weight_scale_search=0, **same).model, held))
    both = _cosine_error(ref, _outputs(_quantize(vit, **same).model, held))
    print(f"cosine error: every op {every:.2e}, dot operands {dots:.2e}, + weight exponent search {both:.2e}")
    assert dots < every / 3
    assert both < dots
