"""Block maxima taken in two halves (``onnx_ops.body.max_by_halves``): where the bodies use them,
and that they give the NumPy references' bits on activation-shaped tensors.

onnxruntime's CPU ReduceMax/ReduceMin over the block axis of a ``(rows, bs, post)`` view is slow
when the view has one row (a batch-1 activation whose channels are one block, or the transposed
view of a last axis); on tensors of HALVES_MIN_SIZE elements or more the bodies then reduce over
half-blocks with a factor 2 in front and merge the two halves with Split + Max. These tests pin which bodies do (a change of the rule shows
here) and check the values, edge values (zeros of both signs, subnormals, ±Inf, NaN, the float32
maximum) included, on the presets' own attributes. The per-shape grids of
``test_formats_mx.py``/``test_formats_bfp.py`` cover the other views.
"""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest

from _format_testing import EDGE_VALUES, assert_same_bits, log_uniform, run_static
from onnxptq.config.presets import BFP16_ATTRS, MX_PRIME_ATTRS
from onnxptq.formats import fake_quantize
from onnxptq.onnx_ops import build_qdq

MXINT8 = ("mx", {"element_dtype": "int8", "axis": 1, "block_size": 32, "rounding_mode": 2})
MXFP8 = ("mx", {"element_dtype": "fp8_e4m3", "axis": 1, "block_size": 32, "rounding_mode": 2})
MX9 = ("bfp", dict(MX_PRIME_ATTRS, bit_width=16))
BFP16 = ("bfp", dict(BFP16_ATTRS, bit_width=16))


def _count_splits(function: onnx.FunctionProto) -> int:
    """Split nodes anywhere in a body (its If branches included)."""
    def count(nodes) -> int:
        return sum((n.op_type == "Split") + sum(count(a.g.node) for a in n.attribute
                                                if a.type == onnx.AttributeProto.GRAPH) for n in nodes)

    return count(function.node)


def _splits(fmt: str, attrs: dict, shape) -> int:
    """Split nodes anywhere in the body built for ``shape``; for MX bodies, checked against the
    name's ``h`` (one name, one body: ``mx.takes_halves`` decides both)."""
    frag = build_qdq(fmt, "x", "y", name="q", opset=21, shape=shape, dtype="float32", **attrs)
    splits = _count_splits(frag.functions[0])
    if fmt == "mx":
        named = re.search(r"_p\d+l?(?:w\d+)?h", frag.functions[0].name) is not None
        assert named == (splits > 0), frag.functions[0].name
    return splits


@pytest.mark.parametrize("preset,shape,axis,halves", [
    (MXINT8, ("N", 16, 48, 48), 1, True),     # one block along the axis, any batch: blocks of 16
    (MXINT8, (1, 64, 24, 24), 1, True),       # blocks of 32, two rows
    (MXINT8, (1, 8, 48, 48), 1, False),       # blocks of 8: not halved
    (MXINT8, (1, 1, 128, 128), 3, True),      # the transposed view of the last axis
    (MXINT8, (1, 16, 30, 30), 1, False),      # under HALVES_MIN_SIZE elements: four nodes more cost more
    (MXFP8, ("N", 24, 32, 32), 1, True),
    (MX9, (1, 16, 48, 48), 1, True),          # to_bfp_prime, sub-blocks tile the axis, one block
    (MX9, (1, 48, 24, 24), 1, False),         # three blocks along the axis: rows >= 2 already
    (MX9, (1, 1, 128, 128), 3, True),
    (MX9, (1, 16, 30, 30), 1, False),
    (BFP16, (1, 6, 64, 64), 1, True),         # the whole axis shorter than a block
    (BFP16, (1, 16, 48, 48), 1, False),       # blocks of 8 in two rows: halves measured slower
    (BFP16, (1, 1, 128, 128), 3, True),
])
def test_which_bodies_halve(preset, shape, axis, halves) -> None:
    fmt, attrs = preset
    assert (_splits(fmt, dict(attrs, axis=axis), shape) > 0) == halves


@pytest.mark.parametrize("shape,scale_search,halves", [
    (("b", 64, "t"), 0, False),      # shape values that do not fold: the copying view, which takes no halves
    (("b", 64, "t"), 1, False),
    ((1, 64, 48, 48), 1, False),     # a search by error: the blocks whole
    ((1, 64, 48, 48), 0, True),
    (("N", 64, "h", "w"), 0, False),
])
def test_mx_halves_rule_names_the_body(shape, scale_search, halves) -> None:
    """``build`` and ``make_function`` read one rule (``mx.takes_halves``): the ``h`` in a body's
    name where and only where its maxima are taken by halves; the copying view (``d<n>r<rank>``) only
    for a body that takes none, and asked for halves directly it names none either."""
    from onnxptq.onnx_ops import mx

    attrs = dict(MXINT8[1], scale_search=scale_search)
    assert (_splits("mx", attrs, shape) > 0) == halves
    direct = mx.make_function("int8", 2, 0, 21, static=(1, 32, 0), float32=True, halve=True, copied=(64, 3))
    assert _count_splits(direct) == 0 and re.search(r"_p\d+l?(?:w\d+)?h", direct.name) is None, direct.name


@pytest.mark.parametrize("preset", [MXINT8, MXFP8, MX9, BFP16], ids=["MXINT8", "MXFP8", "MX9", "BFP16"])
@pytest.mark.parametrize("shape,axis", [((1, 16, 32, 32), 1), ((1, 24, 28, 28), 1), ((2, 16, 24, 24), 1),
                                        ((1, 6, 64, 48), 1), ((1, 1, 128, 128), 3)])
def test_halved_bodies_bit_exact(preset, shape, axis) -> None:
    """Random log-uniform activations, then with edge values mixed in (Inf/NaN take the masked
    formulas, a whole block of ±0 or of subnormals the plain ones)."""
    fmt, attrs = preset
    attrs = dict(attrs, axis=axis)
    rng = np.random.default_rng(sum(shape))
    x = log_uniform(int(np.prod(shape)), seed=int(rng.integers(1 << 30))).reshape(shape)
    finite_edges = x.copy().reshape(-1)
    zeros_and_tiny = EDGE_VALUES[np.isfinite(EDGE_VALUES) & (np.abs(EDGE_VALUES) < 1e-37)]
    finite_edges[: 4 * 32] = rng.choice(zeros_and_tiny, 4 * 32)  # whole blocks of zeros/subnormals
    edges = x.copy().reshape(-1)
    idx = rng.choice(edges.size, 40, replace=False)
    edges[idx] = rng.choice(EDGE_VALUES, idx.size)
    for what, data in (("log-uniform", x), ("zeros and subnormals", finite_edges.reshape(shape)),
                       ("edges", edges.reshape(shape))):
        got, name = run_static(fmt, data, **attrs)
        assert_same_bits(got, fake_quantize(data, fmt, **attrs), f"{what} {shape} axis {axis} {name}")
