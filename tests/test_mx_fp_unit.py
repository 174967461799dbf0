"""MX FP-element bodies divide by the per-block unit ``scale·2^(emin-mbits)`` once and round in units
of the element's smallest step (onnx_ops.mx._fp_elements): bit-exact against formats/mx.py where
that unit is a float32 subnormal (block scales at the E8M0 floor 2^-127: units down to 2^-143),
where ``x/unit`` underflows (subnormal elements in a block of huge ones), at the saturation bound
and on ±Inf, NaN, ±0, for every FP element, the branch-free body (no search, and the unsaturated
exponent) and the searched one (plain formulas in an ``If``), on a whole-axis view and a tiled one.
The structure (one ``Div`` by the unit, no ``Mul`` by ``2^(mbits-emin)`` before ``Round``) is pinned
in tests/test_mx_wide_constants.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

from _format_testing import assert_same_bits, fragment_session
from onnxptq.formats import fake_quantize
from onnxptq.formats.mx import ELEMENT_FORMATS
from onnxptq.onnx_ops import build_qdq

FP = ["fp8_e4m3", "fp8_e5m2", "fp6_e3m2", "fp6_e2m3", "fp4_e2m1"]
#: (declared shape, run shape): whole axis one block (x's own shape), a ragged axis (tiled view).
SHAPES = [((2, 32, 3, 4), (2, 32, 3, 4)), ((2, 40, 3, 4), (2, 40, 3, 4))]


def _edge_blocks(shape: tuple, element_dtype: str, seed: int) -> np.ndarray:
    """Per (row, block): a block maximum from the E8M0 floor's neighbourhood, the element's
    saturation bound and float32's edges; the other elements fractions of it (ties of the element
    grid in the normal and subnormal ranges), float32 subnormals and a few non-finite values."""
    fmt = ELEMENT_FORMATS[element_dtype]
    rng = np.random.default_rng(seed)
    f32 = np.finfo(np.float32)
    tops = np.array([0.0, 1e-45, 3e-39, 2.0**-127 * 0.75, 2.0**-127, 2.0**-126, 1.0,
                     fmt.max_norm, fmt.max_norm * 1.03, 2.0**100, f32.max], np.float32)
    step = 2.0 ** (fmt.emin - fmt.mbits - fmt.emax)  # the smallest step over the maximum's binade
    fracs = np.array([0.5, 0.25, step, 1.5 * step, 0.5 * step, 0.75 * step, 3 / 16, 0.0], np.float32)
    x = np.zeros(shape, np.float32)
    n, c = shape[0], shape[1]
    rest = int(np.prod(shape[2:]))
    flat = x.reshape(n, c, rest)
    for i in range(n):
        for j0 in range(0, c, 32):
            j1 = min(j0 + 32, c)
            top = np.float32(rng.choice(tops))
            sign = rng.choice(np.array([-1.0, 1.0], np.float32), (j1 - j0, rest))
            with np.errstate(under="ignore"):
                flat[i, j0:j1] = sign * top * rng.choice(fracs, (j1 - j0, rest))
            flat[i, j0, 0] = top * rng.choice(np.array([-1.0, 1.0], np.float32))
    tiny = rng.random(x.size) < 0.05  # x/unit underflows where the block maximum is large
    x.reshape(-1)[tiny] = rng.choice(np.array([1e-45, -1e-45, 3e-39, -2.5e-40, -0.0], np.float32), int(tiny.sum()))
    special = rng.random(x.size) < 0.02
    x.reshape(-1)[special] = rng.choice(np.array([np.inf, -np.inf, np.nan, -0.0], np.float32), int(special.sum()))
    return x


@pytest.mark.parametrize("shape,run", SHAPES, ids=str)
@pytest.mark.parametrize("scale_search", [0, 2, 3])
@pytest.mark.parametrize("element_dtype", FP)
def test_fp_unit_bits_at_the_edges(element_dtype, scale_search, shape, run) -> None:
    frag = build_qdq("mx", "x", "y", name="q", opset=21, shape=shape, dtype="float32", element_dtype=element_dtype,
                     axis=1, block_size=32, rounding_mode=2, scale_search=scale_search)
    sess = fragment_session(frag, list(shape), TensorProto.FLOAT)
    for seed in (0, 1):
        x = _edge_blocks(run, element_dtype, seed + scale_search)
        ref = fake_quantize(x, "mx", element_dtype=element_dtype, axis=1, block_size=32, rounding_mode=2,
                            scale_search=scale_search)
        assert_same_bits(sess.run(None, {"x": x})[0], ref, f"{frag.functions[0].name} seed {seed}")
