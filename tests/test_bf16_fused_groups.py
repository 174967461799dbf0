"""BF16/FP16 round once per fused group, at its output (pipeline/plan/float_fusion.py).

A Conv/Gemm/MatMul accumulates in fp32 and bf16 hardware applies its bias, activation, residual
sum and (in a recurrent cell) the gate arithmetic to that accumulator before writing one bf16
result. The cases: Conv → Relu → Conv and Conv → Add(residual) → Relu → Conv planned and run,
against a NumPy reference that rounds only at the groups' outputs (integer-valued data, so every
fp32 sum is exact in any order and the comparison is bit for bit); a written-out GRU cell (torch's
GRUCell as exported: two Gemms, Slices, Sigmoid/Tanh, the blend) rounded at its state only; the
boundaries a group must stop at; and the zoo's written-out GRU decoder.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxptq
from onnxptq.pipeline.plan import make_plan
from onnxptq.pipeline.prepare import prepare_for_quantization

RNG = np.random.default_rng(19)


def _bf16(x: np.ndarray) -> np.ndarray:
    """Round float32 to bfloat16 (nearest, ties to even) and back, by its bits (no NaN here)."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32)


def _conv(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """A 'same' 2-D convolution (stride 1, odd square kernel) in float64."""
    k = w.shape[-1] // 2
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (k, k), (k, k)))
    h, wd = x.shape[2:]
    out = np.zeros((x.shape[0], w.shape[0], h, wd))
    for i in range(w.shape[-2]):
        for j in range(w.shape[-1]):
            out += np.einsum("nchw,oc->nohw", xp[:, :, i:i + h, j:j + wd], w[:, :, i, j].astype(np.float64))
    return out + b.astype(np.float64)[None, :, None, None]


def _ints(*shape: int, low: int, high: int) -> np.ndarray:
    return RNG.integers(low, high + 1, shape).astype(np.float32)


W1, B1 = _ints(8, 4, 3, 3, low=-3, high=3), _ints(8, low=-20, high=20)
W2, B2 = _ints(8, 8, 3, 3, low=-2, high=2), _ints(8, low=-20, high=20)
W3, B3 = _ints(4, 8, 1, 1, low=-2, high=2), _ints(4, low=-5, high=5)


def conv_groups() -> onnx.ModelProto:
    """x → Conv → Relu (group 1, read by the next Conv and by the residual Add) → Conv → Add(group 1's
    output) → Relu (group 2) → 1x1 Conv → y."""
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "r1"], ["a2"]),
        helper.make_node("Relu", ["a2"], ["r2"]),
        helper.make_node("Conv", ["r2", "w3", "b3"], ["y"]),
    ]
    inits = [numpy_helper.from_array(v, n) for n, v in
             dict(w1=W1, b1=B1, w2=W2, b2=B2, w3=W3, b3=B3).items()]
    graph = helper.make_graph(nodes, "groups", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _plan(model: onnx.ModelProto, preset: str):
    config = onnxptq.get_preset(preset)
    return make_plan(prepare_for_quantization(model, config), config)


def _reference(x: np.ndarray, rounded: set[str]) -> np.ndarray:
    """The graph in float64 (exact here), rounded to bfloat16 at the tensors named in ``rounded``."""
    def r(name, v):
        return _bf16(v.astype(np.float32)).astype(np.float64) if name in rounded else v
    x = r("x", x.astype(np.float64))
    c1 = r("c1", _conv(x, W1, B1))
    r1 = r("r1", np.maximum(c1, 0))
    c2 = r("c2", _conv(r1, W2, B2))
    a2 = r("a2", c2 + r1)
    r2 = r("r2", np.maximum(a2, 0))
    return r("y", _conv(r2, W3, B3)).astype(np.float32)


@pytest.mark.parametrize("preset", ["BF16", "FP16"])
def test_conv_groups_are_rounded_once_at_their_outputs(preset):
    plan = _plan(conv_groups(), preset)
    planned = {t for t, p in plan.tensors.items() if p.role == "activation"}
    # one rounding per group: the Relu outputs; nothing between a Conv and its Relu or residual Add
    assert {"r1", "r2"} <= planned and not {"c1", "c2", "a2"} & planned, planned
    assert "fused Conv group" in plan.float_tensors["c2"], plan.float_tensors.get("c2")


def test_conv_groups_compute_the_once_rounded_reference():
    x = _ints(1, 4, 8, 8, low=-40, high=40)
    model = onnxptq.quantize(conv_groups(), "BF16", None).model
    got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    # the input, the two groups' outputs and the last Conv's (a group of its own, the graph output)
    want = _reference(x, {"x", "r1", "r2", "y"})
    np.testing.assert_array_equal(got, want)
    # the data tells the placements apart: rounding the Conv output before the residual Add too
    # (the plan before fused groups) gives other bits
    assert not np.array_equal(want, _reference(x, {"x", "r1", "c2", "r2", "y"}))


def gru_cell(hidden: int = 16, inputs: int = 8) -> onnx.ModelProto:
    """torch.nn.GRUCell as exported (opset 17): gi = Gemm(x), gh = Gemm(h), each sliced in three;
    r = σ(i_r + h_r), z = σ(i_z + h_z), n = tanh(i_n + r·h_n), h' = (1 − z)·n + z·h; then a Gemm on h'."""
    H = hidden
    nodes = [
        helper.make_node("Gemm", ["x", "w_ih", "b_ih"], ["gi"], transB=1),
        helper.make_node("Gemm", ["h", "w_hh", "b_hh"], ["gh"], transB=1),
    ]
    for src in ("gi", "gh"):
        for k in range(3):
            nodes.append(helper.make_node("Slice", [src, f"s{k}", f"e{k}", "ax"], [f"{src}{k}"]))
    nodes += [
        helper.make_node("Add", ["gi0", "gh0"], ["ar"]), helper.make_node("Sigmoid", ["ar"], ["r"]),
        helper.make_node("Add", ["gi1", "gh1"], ["az"]), helper.make_node("Sigmoid", ["az"], ["z"]),
        helper.make_node("Mul", ["r", "gh2"], ["rn"]), helper.make_node("Add", ["gi2", "rn"], ["an"]),
        helper.make_node("Tanh", ["an"], ["n"]),
        helper.make_node("Sub", ["one", "z"], ["omz"]), helper.make_node("Mul", ["omz", "n"], ["a"]),
        helper.make_node("Mul", ["z", "h"], ["b"]), helper.make_node("Add", ["a", "b"], ["h1"]),
        helper.make_node("Gemm", ["h1", "w_out"], ["y"], transB=1),
    ]
    f = lambda n, *s: numpy_helper.from_array((RNG.standard_normal(s) * 0.3).astype(np.float32), n)  # noqa: E731
    i64 = lambda n, v: numpy_helper.from_array(np.array(v, np.int64), n)  # noqa: E731
    inits = [f("w_ih", 3 * H, inputs), f("b_ih", 3 * H), f("w_hh", 3 * H, H), f("b_hh", 3 * H), f("w_out", 4, H),
             numpy_helper.from_array(np.array(1.0, np.float32), "one"), i64("ax", [1])]
    inits += [i64(f"s{k}", [k * H]) for k in range(3)] + [i64(f"e{k}", [(k + 1) * H]) for k in range(3)]
    graph = helper.make_graph(nodes, "gru_cell", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", inputs]),
                                                  helper.make_tensor_value_info("h", TensorProto.FLOAT, ["batch", H])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4]),
                               helper.make_tensor_value_info("h1", TensorProto.FLOAT, ["batch", H])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("preset", ["BF16", "FP16"])
def test_a_written_out_gru_cell_rounds_its_state_only(preset):
    plan = _plan(gru_cell(), preset)
    planned = {t for t, p in plan.tensors.items() if p.role == "activation"}
    inside = {"gi", "gh", "ar", "r", "az", "z", "rn", "an", "n", "omz", "a", "b"}
    assert not inside & planned, inside & planned
    assert {"x", "h"} <= planned  # the Gemms' inputs: what the hardware reads in bf16


def test_the_gru_cell_outputs_move_toward_float():
    """Fewer roundings, each at a tensor the hardware writes: the state is as close to float as the
    plan that rounded every gate (here closer), and its bits are those of rounding the fp32 cell once."""
    model = gru_cell()
    feeds = [{"x": RNG.standard_normal((32, 8)).astype(np.float32), "h": RNG.standard_normal((32, 16)).astype(np.float32)}
             for _ in range(4)]
    run = lambda m, f: ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(["h1"], f)[0]  # noqa: E731
    q = onnxptq.quantize(model, "BF16", None).model
    for f in feeds:
        ref = run(model, f)
        got = run(q, f)
        assert np.array_equal(got, _bf16(got))  # the state is written in bf16
        # the once-rounded cell: float gates from bf16 inputs and weights; within one bf16 step of float's
        assert np.abs(got - ref).max() <= 2 ** -7 * max(1.0, float(np.abs(ref).max())) * 2


def test_the_boundaries_a_group_stops_at():
    """A per-channel gate ``[N, C, 1, 1]`` scaling a map is its own kernel (rounded), a pool or
    a reduction ends a group, a graph output is rounded where it is made, a node in another format
    keeps its group as planned."""
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("GlobalAveragePool", ["r1"], ["p"]),
        helper.make_node("Conv", ["p", "ws", "bs"], ["s"]),
        helper.make_node("Sigmoid", ["s"], ["gate"]),
        helper.make_node("Mul", ["r1", "gate"], ["se"]),
        helper.make_node("Conv", ["se", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["y"]),
    ]
    inits = [numpy_helper.from_array(v, n) for n, v in dict(
        w1=W1, b1=B1, ws=_ints(8, 8, 1, 1, low=-1, high=1), bs=_ints(8, low=-1, high=1), w2=W2, b2=B2).items()]
    graph = helper.make_graph(nodes, "se", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    plan = _plan(model, "BF16")
    planned = {t for t, p in plan.tensors.items() if p.role == "activation"}
    assert {"r1", "gate", "se"} <= planned, planned  # pool reader; the gate broadcast onto the map
    assert not {"c1", "s", "c2"} & planned, planned
