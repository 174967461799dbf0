"""Shared helpers for the format tests: test data, running a fragment in onnxruntime, bit comparison."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort

F32 = np.finfo(np.float32)

#: Values every format must handle: zeros, fp32 subnormals, infinities, NaN, normal extremes.
EDGE_VALUES = np.array(
    [0.0, -0.0, 1e-45, -1e-45, 1e-40, -1e-40, 1.1754942e-38, F32.tiny, -F32.tiny, F32.max, -F32.max,
     np.inf, -np.inf, np.nan, -np.nan, 1.0, -1.0, 0.5, -0.5, 65504.0, 65520.0, -65520.0, 448.0, 464.0,
     57344.0, 61440.0, 3.3895314e38, 3.39e38],
    dtype=np.float32,
)


def log_uniform(n: int, seed: int = 0) -> np.ndarray:
    """``n`` float32 values with magnitudes log-uniform over 1e-6…1e6 and random signs."""
    rng = np.random.default_rng(seed)
    mag = np.exp(rng.uniform(np.log(1e-6), np.log(1e6), n))
    return (mag * rng.choice([-1.0, 1.0], n)).astype(np.float32)


def sample_values(n: int = 100_000, seed: int = 0) -> np.ndarray:
    """Log-uniform values with the edge cases placed at the front (total length ``n``)."""
    x = log_uniform(n, seed)
    x[: EDGE_VALUES.size] = EDGE_VALUES
    return x


def mx_edge_data(shape: tuple, seed: int, rate: float) -> np.ndarray:
    """Log-uniform magnitudes with MX's edge cases (±Inf, NaN, ±0, subnormals, the float32 maximum, ties,
    the FP8 maxima) sprinkled in at ``rate``, and the first third scaled by 1e-6 (blocks of small values:
    the element formats' subnormal grids)."""
    n = int(np.prod(shape))
    x = log_uniform(n, seed=seed)
    rng = np.random.default_rng(seed)
    specials = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-45, -3e-41, F32.tiny / 2, F32.max, -F32.max,
                         1.5, -2.5, 0.75, 448.0, 57344.0, -1e-30], np.float32)
    pick = rng.random(n) < rate
    x[pick] = rng.choice(specials, int(pick.sum()))
    x[: n // 3] *= np.float32(1e-6)
    return x.reshape(shape)


def run_model(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    """Run a one-input model ``x -> y`` in a plain onnxruntime CPU session."""
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def assert_same_bits(got: np.ndarray, want: np.ndarray, context: str = "") -> None:
    """Equal dtype, shape and bit patterns; NaN only needs to be NaN in both (payloads may differ)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, f"{context}: dtype {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, f"{context}: shape {got.shape} != {want.shape}"
    gn, wn = np.isnan(got), np.isnan(want)
    np.testing.assert_array_equal(gn, wn, err_msg=f"{context}: NaN positions differ")
    view = np.uint32 if got.dtype == np.float32 else np.uint16
    g = np.where(gn, 0, got).view(view) if got.dtype.kind == "f" else got
    w = np.where(wn, 0, want).view(view) if want.dtype.kind == "f" else want
    np.testing.assert_array_equal(g, w, err_msg=f"{context}: bit patterns differ")


def fragment_session(frag, dims, elem: int = onnx.TensorProto.FLOAT) -> ort.InferenceSession:
    """A 1-thread CPU session on a quantizer fragment (``build_qdq``) alone: input ``x`` of
    ``dims`` (ints, names or None) and element type ``elem``, output ``y``, its functions embedded."""
    from onnx import helper

    graph = helper.make_graph(frag.nodes, "fragment", [helper.make_tensor_value_info("x", elem, dims)],
                              [helper.make_tensor_value_info("y", elem, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("onnxptq", 1)],
                              functions=frag.functions)
    model.ir_version = 10
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def run_static(fmt: str, x: np.ndarray, **attrs) -> tuple[np.ndarray, str]:
    """Run ``fmt``'s body specialised to ``x.shape`` (as the emitter builds it) in a model with that
    static input shape; returns the result and the function's name."""
    from onnx import helper

    from onnxptq.onnx_ops import build_qdq

    # As the emitter builds it: float32 inputs get the body without the Cast pair.
    frag = build_qdq(fmt, "x", "y", name="q", opset=21, shape=x.shape, dtype=x.dtype.name, **attrs)
    sess = fragment_session(frag, list(x.shape), helper.np_dtype_to_tensor_dtype(x.dtype))
    return sess.run(None, {"x": x})[0], frag.functions[0].name
