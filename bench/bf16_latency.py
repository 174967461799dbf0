"""BF16 model latency in onnxruntime CPU (one thread) against the float model.

Models: PP-OCRv4 rec (input 1x3x48x320) and a 4-layer transformer encoder built here with
onnx.helper (sequence 128, width 256, 4 heads, FFN 1024, separate Q/K/V MatMuls sharing their
input). For each, the float model and the BF16 layouts are timed in round-robin blocks (so a
drift in machine load hits every variant alike); the figure is the median of ``--runs`` runs after
warm-up. Prints a markdown table.

    python bench/bf16_latency.py [--runs 30] [--models rec,encoder]
"""

from __future__ import annotations

import _common  # the repository root on sys.path (testkit), the bench's session helper
import argparse
import logging
import statistics
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from onnxptq.conversion.bf16 import convert_float_to_bf16
from testkit.models import model_path

#: (label, format, options) of the BF16 variants measured.
VARIANTS = (
    ("with_cast, activations=all (reference layout)", "with_cast", {"activations": "all"}),
    ("with_cast, activations=compute_inputs", "with_cast", {"activations": "compute_inputs"}),
    ("simulate_bf16", "simulate_bf16", {}),
    ("bf16 (real bfloat16 tensors, float islands)", "bf16", {}),
)


def transformer_encoder(
    layers: int = 4, seq: int = 128, width: int = 256, heads: int = 4, ffn: int = 1024, seed: int = 0
) -> onnx.ModelProto:
    """A post-LN BERT-style encoder from standard ops (opset 17: LayerNormalization, Erf-GELU)."""
    rng = np.random.default_rng(seed)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    dh = width // heads

    def weight(name: str, *shape: int, scale: float | None = None) -> str:
        std = scale if scale is not None else 1.0 / np.sqrt(shape[0])
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * std).astype(np.float32), name))
        return name

    def const(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(value, name))
        return name

    const("heads_shape", np.array([1, seq, heads, dh], np.int64))
    const("merge_shape", np.array([1, seq, width], np.int64))
    const("attn_scale", np.array(1.0 / np.sqrt(dh), np.float32))
    const("half", np.array(0.5, np.float32))
    const("one", np.array(1.0, np.float32))
    const("inv_sqrt2", np.array(1.0 / np.sqrt(2.0), np.float32))
    x = "x"
    for i in range(layers):
        p = f"l{i}"
        q, k, v = (f"{p}_{n}" for n in "qkv")
        for name in (q, k, v):
            nodes.append(helper.make_node("MatMul", [x, weight(f"{name}_w", width, width)], [f"{name}_mm"]))
            nodes.append(helper.make_node("Add", [f"{name}_mm", weight(f"{name}_b", width, scale=0.02)], [name]))
            nodes.append(helper.make_node("Reshape", [name, "heads_shape"], [f"{name}_h"]))
        nodes.append(helper.make_node("Transpose", [f"{q}_h"], [f"{q}_t"], perm=[0, 2, 1, 3]))
        nodes.append(helper.make_node("Transpose", [f"{k}_h"], [f"{k}_t"], perm=[0, 2, 3, 1]))
        nodes.append(helper.make_node("Transpose", [f"{v}_h"], [f"{v}_t"], perm=[0, 2, 1, 3]))
        nodes.append(helper.make_node("MatMul", [f"{q}_t", f"{k}_t"], [f"{p}_scores"]))
        nodes.append(helper.make_node("Mul", [f"{p}_scores", "attn_scale"], [f"{p}_scaled"]))
        nodes.append(helper.make_node("Softmax", [f"{p}_scaled"], [f"{p}_probs"], axis=-1))
        nodes.append(helper.make_node("MatMul", [f"{p}_probs", f"{v}_t"], [f"{p}_ctx"]))
        nodes.append(helper.make_node("Transpose", [f"{p}_ctx"], [f"{p}_ctx_t"], perm=[0, 2, 1, 3]))
        nodes.append(helper.make_node("Reshape", [f"{p}_ctx_t", "merge_shape"], [f"{p}_merged"]))
        nodes.append(helper.make_node("MatMul", [f"{p}_merged", weight(f"{p}_o_w", width, width)], [f"{p}_o_mm"]))
        nodes.append(helper.make_node("Add", [f"{p}_o_mm", weight(f"{p}_o_b", width, scale=0.02)], [f"{p}_o"]))
        nodes.append(helper.make_node("Add", [x, f"{p}_o"], [f"{p}_res1"]))
        nodes.append(
            helper.make_node(
                "LayerNormalization",
                [f"{p}_res1", const(f"{p}_ln1_g", np.ones(width, np.float32)), const(f"{p}_ln1_b", np.zeros(width, np.float32))],
                [f"{p}_ln1"],
                axis=-1,
                epsilon=1e-5,
            )
        )
        nodes.append(helper.make_node("MatMul", [f"{p}_ln1", weight(f"{p}_f1_w", width, ffn)], [f"{p}_f1_mm"]))
        nodes.append(helper.make_node("Add", [f"{p}_f1_mm", weight(f"{p}_f1_b", ffn, scale=0.02)], [f"{p}_f1"]))
        nodes.append(helper.make_node("Mul", [f"{p}_f1", "inv_sqrt2"], [f"{p}_g_s"]))
        nodes.append(helper.make_node("Erf", [f"{p}_g_s"], [f"{p}_g_erf"]))
        nodes.append(helper.make_node("Add", [f"{p}_g_erf", "one"], [f"{p}_g_1"]))
        nodes.append(helper.make_node("Mul", [f"{p}_f1", f"{p}_g_1"], [f"{p}_g_m"]))
        nodes.append(helper.make_node("Mul", [f"{p}_g_m", "half"], [f"{p}_gelu"]))
        nodes.append(helper.make_node("MatMul", [f"{p}_gelu", weight(f"{p}_f2_w", ffn, width)], [f"{p}_f2_mm"]))
        nodes.append(helper.make_node("Add", [f"{p}_f2_mm", weight(f"{p}_f2_b", width, scale=0.02)], [f"{p}_f2"]))
        nodes.append(helper.make_node("Add", [f"{p}_ln1", f"{p}_f2"], [f"{p}_res2"]))
        out = "y" if i == layers - 1 else f"{p}_out"
        nodes.append(
            helper.make_node(
                "LayerNormalization",
                [f"{p}_res2", const(f"{p}_ln2_g", np.ones(width, np.float32)), const(f"{p}_ln2_b", np.zeros(width, np.float32))],
                [out],
                axis=-1,
                epsilon=1e-5,
            )
        )
        x = out
    graph = helper.make_graph(
        nodes,
        "encoder",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, seq, width])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    return _common.session(model, 1, inter_op_threads=1)


def time_models(models: dict[str, onnx.ModelProto], feed: dict[str, np.ndarray], runs: int, block: int = 5) -> dict[str, float]:
    """Median latency (ms) of each model, measured in interleaved blocks of ``block`` runs."""
    sessions = {label: _session(m) for label, m in models.items()}
    samples: dict[str, list[float]] = {label: [] for label in sessions}
    for sess in sessions.values():
        for _ in range(3):
            sess.run(None, feed)
    while min(len(v) for v in samples.values()) < runs:
        for label, sess in sessions.items():
            for _ in range(block):
                start = time.perf_counter()
                sess.run(None, feed)
                samples[label].append((time.perf_counter() - start) * 1e3)
    return {label: statistics.median(v) for label, v in samples.items()}


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    a64, b64 = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a64 @ b64 / (np.linalg.norm(a64) * np.linalg.norm(b64)))


def bench(name: str, model: onnx.ModelProto, feed: dict[str, np.ndarray], runs: int) -> list[str]:
    models = {"float32 (original)": model}
    for label, fmt, options in VARIANTS:
        models[label] = convert_float_to_bf16(model, fmt, **options)
    if name == "encoder":
        models["with_cast, compute_inputs, no MatMul merge"] = convert_float_to_bf16(
            model, "with_cast", activations="compute_inputs", merge_matmuls=False
        )
    ref = _session(model).run(None, feed)[0]
    cosines = {label: _cos(ref, _session(m).run(None, feed)[0]) for label, m in models.items()}
    latency = time_models(models, feed, runs)
    base = latency["float32 (original)"]
    rows = []
    for label in models:
        rows.append(
            f"| {name} | {label} | {latency[label]:.2f} | {latency[label] / base:.2f}x | {cosines[label]:.6f} |"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30, help="timed runs per model (median reported)")
    parser.add_argument("--models", default="rec,encoder", help="comma list of rec, encoder")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    rng = np.random.default_rng(0)
    rows = []
    for name in args.models.split(","):
        if name == "rec":
            from testkit.ocr import load_characters, render_lines

            model = onnx.load(str(model_path("rec")))
            images, _ = render_lines(1, seed=0, characters=load_characters(model))
            rows += bench("PP-OCRv4 rec 1x3x48x320", model, {"x": images}, args.runs)
        elif name == "encoder":
            model = transformer_encoder()
            feed = {"x": rng.standard_normal((1, 128, 256)).astype(np.float32)}
            rows += bench("encoder", model, feed, args.runs)
        else:
            raise SystemExit(f"unknown model {name!r}; expected rec or encoder")
    print(f"onnxruntime {ort.__version__}, CPU execution provider, 1 intra-op thread, median of {args.runs} runs\n")
    print("| model | variant | median ms | vs float | output cosine |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
