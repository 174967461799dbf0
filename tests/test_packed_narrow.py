"""Packed weights in fewer bytes, bit for bit (issue 26 item 2, branch packed20): MX4's 3-bit and MX6's
5-bit element codes in planes of their own width (a 4-bit and a 6-bit container before), one-element
blocks' fields narrower than a byte in planes, and block exponents stored as runs (a flag a block and
the run starts).

Why: the issue asks every MX4/MXFP4/MXFP6 file ≤ 0.20× fp32 and every MX6 one ≤ 0.30× on every model;
PP-OCR cls MX4 was 0.2144 (a quarter of its element bytes padding), PP-OCR rec MXFP6_E3M2 0.2009 (its
blocks' exponents a 4-bit field each, where 56 % repeat the block before; bench/RESULTS.md packed20).
PP-OCR cls under MX4 and MX6 (the real model's files): tests/test_lean_file_sizes.py's CLS_LIMITS.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from onnxptq.onnx_ops import packed
from test_packed_layout import _pack_and_run


def test_runs_decode_every_block_and_free_blocks_start_no_run():
    """``starts[cumsum(flags)]`` gives every block's index back; a ±0 block (free: any scale) takes the
    index before it, so it neither ends nor starts a run; leading free blocks take the first real one's."""
    index = np.array([5, 5, 9, 5, 5, 5, 7, 7, 3], np.int64)
    free = np.zeros(index.size, bool)
    free[[0, 4]] = True  # a free block at the start and one inside a run of 5s
    index[4] = 0  # its own byte is anything
    flags, starts = packed.exponent_runs(index, free)
    assert list(flags) == [1, 0, 1, 1, 0, 0, 1, 0, 1]
    assert list(starts) == [5, 5, 9, 5, 7, 3]  # the first twice: cumsum(flags) counts from 1
    back = starts[np.cumsum(flags)]
    assert np.array_equal(back[~free], index[~free])
    assert back[0] == 5 and back[4] == 5
    flags, starts = packed.exponent_runs(np.array([4, 0, 0]), np.ones(3, bool))  # all free: one run
    assert list(flags) == [1, 0, 0] and list(starts) == [0, 0]


def _channel_scaled(rng: np.random.Generator, rows: int, cols: int, spread: int) -> np.ndarray:
    """A weight whose rows (output channels) sit each in its own binade, as trained convolutions'
    do: the blocks along a row mostly share their exponent (every 8th element ±1.5, the rest below
    it), one block in eight a binade or two lower."""
    w = rng.uniform(-1, 1, (rows, cols)).astype(np.float32)
    w[:, ::8] = 1.5 * rng.choice([-1.0, 1.0], (rows, cols // 8))
    lower = rng.random((rows, cols // 8)) < 0.125
    w *= np.repeat(np.where(lower, np.ldexp(1.0, -rng.integers(1, 3, lower.shape)), 1.0), 8, axis=1).astype(np.float32)
    return (w * np.ldexp(np.float32(1), rng.integers(-spread, spread + 1, (rows, 1)))).astype(np.float32)


@pytest.mark.parametrize("key", ["BFP16", "MX9", "MXFP6_E3M2", "MXINT8"])
@pytest.mark.parametrize("opset", [13, 17])
def test_exponents_as_runs_where_blocks_repeat_the_one_before(key, opset, monkeypatch):
    """Blocks along a row sharing the row's binade: the exponents are stored as runs (a 1-bit flag a
    block, the run starts), in fewer bytes than the planes or escape of every block (``RUN_EXPONENTS``
    off), and decode bit for bit in onnxruntime (optimised and not, ``_pack_and_run``), ±0 blocks included."""
    rng = np.random.default_rng(5)
    w = _channel_scaled(rng, 128, 1024, 6)
    w[3, :40] = 0.0
    w[7, 64:] = -0.0
    sizes = {}
    for on in (False, True):
        monkeypatch.setattr(packed, "RUN_EXPONENTS", on)
        model, inits = _pack_and_run(key, {"w": (w, 1)}, opset=opset)
        names = sorted(inits)
        assert any(n.endswith("_exponents_flags") for n in names) == on, names
        sizes[on] = model.ByteSize()
    assert sizes[True] < sizes[False] - 256, sizes


def test_run_starts_take_the_escape_where_a_few_binades_dominate(monkeypatch):
    """Runs whose starts crowd into a few binades beside rare tiny rows: the starts are stored by
    frequency with an escape (a 2-bit field and a byte an escaped start), bit for bit."""
    rng = np.random.default_rng(8)
    w = _channel_scaled(rng, 200, 512, 1)
    w[::25] *= np.ldexp(np.float32(1), -rng.permutation(60)[:8] - 20)[:, None].astype(np.float32)  # 8 decayed rows
    _, inits = _pack_and_run("BFP16", {"w": (w, 1)}, opset=17)
    names = sorted(inits)
    assert any(n.endswith("_exponents_flags") for n in names) and any(n.endswith("_exponents_runs_esc") for n in names), names


@pytest.mark.parametrize("key, bits", [("MX4", 3), ("MX6", 5)])
def test_one_element_blocks_narrower_than_a_byte_take_planes(key, bits):
    """A depthwise conv (blocks of one element along its single input channel) under MX4/MX6: each
    element's sign, fraction and exponent rank fit in fewer than 8 bits, so they are stored in planes of
    4/2/1 bits (``NARROW_SINGLES``), not a byte each as before packed20; bit for bit in onnxruntime."""
    rng = np.random.default_rng(4)
    dw = rng.normal(0, 0.3, (512, 1, 5, 5)).astype(np.float32)  # 12 800 one-element blocks
    _, inits = _pack_and_run(key, {"dw": (dw, 1)}, opset=17)
    singles = {n: onnx.numpy_helper.to_array(t) for n, t in inits.items() if "_singles" in n}
    assert singles, sorted(inits)
    stored = sum(a.size for a in singles.values())
    assert stored < 0.9 * dw.size, (key, {n: a.shape for n, a in singles.items()})
