"""Tests for merge_matmuls: Q/K/V projections sharing an input become one MatMul (+Add) + Split.

Run as a script for the speed measurement on a small transformer-like block:
``python tests/test_graph_merge_matmuls.py`` (onnxruntime CPU, one thread).
"""

from __future__ import annotations

import time

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq.graph.passes import merge_matmuls


def _session(model: onnx.ModelProto, threads: int = 1) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return _session(model).run(None, feeds)


def attention_block(seq: int = 64, dim: int = 256, heads: int = 4, bias: bool = True, opset: int = 17) -> onnx.ModelProto:
    """One self-attention block: Q/K/V projections of x (+bias), scaled dot-product, output projection."""
    rng = np.random.default_rng(0)
    inits, nodes = [], []
    for p in "qkv":
        inits.append(numpy_helper.from_array((rng.standard_normal((dim, dim)) / np.sqrt(dim)).astype(np.float32), f"W{p}"))
        nodes.append(helper.make_node("MatMul", ["x", f"W{p}"], [f"{p}_mm"], name=f"{p}_proj"))
        src = f"{p}_mm"
        if bias:
            inits.append(numpy_helper.from_array(rng.standard_normal(dim).astype(np.float32), f"b{p}"))
            # K's bias on the left: operand order must not matter
            ins = [f"b{p}", src] if p == "k" else [src, f"b{p}"]
            nodes.append(helper.make_node("Add", ins, [f"{p}_b"]))
            src = f"{p}_b"
        nodes.append(helper.make_node("Reshape", [src, "heads_shape"], [f"{p}_h"]))
        perm = [0, 2, 3, 1] if p == "k" else [0, 2, 1, 3]
        nodes.append(helper.make_node("Transpose", [f"{p}_h"], [f"{p}_t"], perm=perm))
    inits += [
        numpy_helper.from_array(np.array([1, seq, heads, dim // heads], np.int64), "heads_shape"),
        numpy_helper.from_array(np.array([1, seq, dim], np.int64), "out_shape"),
        numpy_helper.from_array(np.float32(1 / np.sqrt(dim // heads)), "scale"),
        numpy_helper.from_array((rng.standard_normal((dim, dim)) / np.sqrt(dim)).astype(np.float32), "Wo"),
    ]
    nodes += [
        helper.make_node("MatMul", ["q_t", "k_t"], ["scores"]),
        helper.make_node("Mul", ["scores", "scale"], ["scaled"]),
        helper.make_node("Softmax", ["scaled"], ["attn"], axis=-1),
        helper.make_node("MatMul", ["attn", "v_t"], ["ctx"]),
        helper.make_node("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ctx_t", "out_shape"], ["ctx_r"]),
        helper.make_node("MatMul", ["ctx_r", "Wo"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "attention",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, dim])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, seq, dim])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("opset", [11, 17])
def test_qkv_merged(bias: bool, opset: int) -> None:
    model = attention_block(seq=16, dim=32, heads=2, bias=bias, opset=opset)
    merged = merge_matmuls(model)
    onnx.checker.check_model(merged)
    ops = [n.op_type for n in merged.graph.node]
    assert ops.count("MatMul") == 4  # merged projection, scores, context, output projection (was 6)
    assert ops.count("Split") == 1
    assert ops.count("Add") == (1 if bias else 0)
    x = np.random.default_rng(1).standard_normal((1, 16, 32)).astype(np.float32)
    np.testing.assert_allclose(_run(merged, {"x": x})[0], _run(model, {"x": x})[0], rtol=1e-5, atol=1e-5)


def test_gemm_transb_and_output_names_kept() -> None:
    rng = np.random.default_rng(2)
    inits = [
        numpy_helper.from_array(rng.standard_normal((4, 6)).astype(np.float32), "B1"),  # transB: (N, K)
        numpy_helper.from_array(rng.standard_normal((6, 3)).astype(np.float32), "B2"),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "C1"),
    ]
    nodes = [
        helper.make_node("Gemm", ["x", "B1", "C1"], ["y1"], transB=1),
        helper.make_node("Gemm", ["x", "B2"], ["y2"]),
        helper.make_node("Gemm", ["x", "B2"], ["y3"], alpha=2.0),  # other alpha: not merged
    ]
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [5, k]) for n, k in (("y1", 4), ("y2", 3), ("y3", 3))]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 6])], outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    merged = merge_matmuls(model)
    onnx.checker.check_model(merged)
    assert [o.name for o in merged.graph.output] == ["y1", "y2", "y3"]
    assert sorted(n.op_type for n in merged.graph.node) == ["Gemm", "Gemm", "Split"]
    x = rng.standard_normal((5, 6)).astype(np.float32)
    for a, b in zip(_run(merged, {"x": x}), _run(model, {"x": x})):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_non_constant_or_mixed_dtype_not_merged() -> None:
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["y1"]), helper.make_node("MatMul", ["x", "w_in"], ["y2"])]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]), helper.make_tensor_value_info("w_in", TensorProto.FLOAT, [3, 3])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in ("y1", "y2")],
        [numpy_helper.from_array(np.ones((3, 3), np.float32), "W1")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    assert [n.op_type for n in merge_matmuls(model).graph.node] == ["MatMul", "MatMul"]


def _interleaved(a: ort.InferenceSession, b: ort.InferenceSession, feeds: dict[str, np.ndarray], rounds: int = 30, repeat: int = 50) -> tuple[float, float]:
    """Median per-run seconds of ``a`` and ``b``, measured in alternating blocks.

    Alternating blocks (rather than all of ``a`` then all of ``b``) spreads the noise of a shared
    machine over both models alike; the median of the blocks discards the disturbed ones.
    """
    for session in (a, b):
        for _ in range(20):
            session.run(None, feeds)
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(rounds):
        for session, sink in zip((a, b), times):
            start = time.perf_counter()
            for _ in range(repeat):
                session.run(None, feeds)
            sink.append((time.perf_counter() - start) / repeat)
    return float(np.median(times[0])), float(np.median(times[1]))


def main() -> None:
    """Measure the merged vs separate projections on onnxruntime CPU with one thread."""
    for seq, dim in ((1, 256), (16, 256), (64, 256), (128, 384), (256, 256)):
        model = attention_block(seq=seq, dim=dim, heads=4)
        merged = merge_matmuls(model)
        feeds = {"x": np.random.default_rng(0).standard_normal((1, seq, dim)).astype(np.float32)}
        a, b = _session(model), _session(merged)
        same = np.array_equal(a.run(None, feeds)[0], b.run(None, feeds)[0])
        t0, t1 = _interleaved(a, b, feeds)
        print(
            f"seq={seq:4d} dim={dim}: separate {t0 * 1e3:.4f} ms, merged {t1 * 1e3:.4f} ms, "
            f"speed-up {t0 / t1:.2f}x, bit-identical={same}"
        )


if __name__ == "__main__":
    main()
