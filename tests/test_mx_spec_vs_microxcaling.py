"""Our MX reference where it meets, and where it deliberately leaves, microsoft/microxcaling (the code behind the
OCP MX paper's direct-cast figures), on values worked out by hand from the spec (OCP MX v1.0 §6.3: X = the largest
power of two ≤ max|V| over 2^emax_elem; elements saturate at the max normal; ties to even).

bench/mxfp8_microxcaling.py runs microxcaling itself against ours on 2.2 M values per element type: with its
``round="even"`` every random, saturating, tie, subnormal, E8M0-floor, near-float32-max and ragged-axis block is bit
for bit the same; the only differences are the three pinned here (plus ties under its default ``round="nearest"``,
half away from zero).
"""

from __future__ import annotations

import numpy as np

from onnxptq.formats import fake_quantize


def _mx(x: np.ndarray, element: str = "fp8_e4m3") -> np.ndarray:
    return fake_quantize(np.asarray(x, np.float32), "mx", element_dtype=element, axis=-1, block_size=32, rounding_mode=2)


def test_e4m3_block_maximum_saturates_as_the_spec_and_microxcaling_do() -> None:
    """957 = 1.87·2^9: X = 2^(9-8) = 2, 957/2 = 478.5 > 448 clamps to 448 → 896 (microxcaling issue #4's example);
    the other elements keep E4M3's grid at X = 2 (3 mantissa bits: 1.0 → 1.0, 3.3 → 3.25, 0.01 → subnormal step
    2^-9·2 = 2^-8 → 0.01171875 (3 steps))."""
    got = _mx([[957.0, 1.0, 3.3, 0.01] + [0.0] * 28])
    np.testing.assert_array_equal(got[0, :4], np.float32([896.0, 1.0, 3.25, 0.01171875]))


def test_shared_exponent_is_the_power_of_two_below_the_maximum_even_one_ulp_below() -> None:
    """A block maximum one float32 ulp below 2^9 has floor(log2) = 8, so X = 2^0 and the maximum rounds to 512 > 448:
    it saturates to 448. microxcaling takes ``floor(torch.log2(amax))`` in float32, where log2(2^9 − ulp) rounds to
    9.0, and so uses X = 2 (the maximum then reads 512): the spec's rule is ours."""
    top = np.nextafter(np.float32(512.0), np.float32(0.0))
    got = _mx([[top, 3.3] + [0.0] * 30])
    np.testing.assert_array_equal(got[0, :2], np.float32([448.0, 3.25]))
    # MXINT8 (emax 0): X = 2^8, the maximum clamps to 127/64·256 = 508 and 3.3 reads 1/64·256 = 4 (microxcaling:
    # X = 2^9, 512 and 0)
    int8 = _mx([[top, 3.3] + [0.0] * 30], "int8")
    np.testing.assert_array_equal(int8[0, :2], np.float32([508.0, 4.0]))


def test_a_non_finite_value_leaves_its_block_quantized() -> None:
    """Inf and NaN pass through and take no part in the block maximum (spec: only finite values set X); microxcaling's
    block maximum becomes Inf/NaN and every value of that block comes back NaN. −0 keeps its sign."""
    got = _mx([[np.inf, 3.3, np.nan, -0.0, -1.0] + [0.0] * 27])
    assert np.isposinf(got[0, 0]) and np.isnan(got[0, 2])
    np.testing.assert_array_equal(got[0, [1, 4]], np.float32([3.25, -1.0]))
    assert got[0, 3] == 0 and np.signbit(got[0, 3])
