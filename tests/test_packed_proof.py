"""The block packer's shortcut (onnx_ops/packed.py, ``PROVE_BY_CODES``, issue 26 item 1): a block
whose codes were all found under a scale the decode chain computes exactly is taken as exact
without decoding it. The shortcut must change nothing: the same packed bytes (codes, exponents,
shifts, patches, which weights stay unpacked) as decoding and comparing every block, on weights
built to reach every branch — blocks of Inf/NaN (exponent byte 255), subnormal and huge blocks,
±0, fake-quantized values another exponent decodes (the retries), values off every grid (patches,
or the weight left unpacked) — and onnxruntime must decode what it packed to the values given."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto

from onnxptq.formats import fake_quantize
from onnxptq.graph.walk import FreshNames
from onnxptq.onnx_ops import packed
from onnxptq.onnx_ops.packed import WeightPacker

from tests.test_packed_weights import FORMATS, _decode_model, _weights

BLOCK_KEYS = sorted(k for k, (fmt, _) in FORMATS.items() if fmt in ("bfp", "mx"))


def _cases(fmt: str, base: dict) -> list[tuple[str, np.ndarray, np.ndarray, dict]]:
    """(name, weight, the values to store, attributes): the reference's own values, and values
    moved off the first exponent candidate or off the grid."""
    rng = np.random.default_rng(5)
    out = []
    for name, (values, axis) in _weights(rng).items():
        attrs = dict(base, axis=axis)
        out.append((name, values, fake_quantize(values, fmt, **attrs), attrs))
    w = rng.normal(0, 0.2, (48, 64)).astype(np.float32)
    w[0, :8] = np.float32(3.0e38)                      # a block near the top of float32
    w[1, :5] = [np.nan, 1.0, -np.inf, 2.0, np.inf]     # exponent byte 255 (BFP/MX9) or flushed (MX)
    w[2] *= np.float32(2.0**-140)                      # subnormal blocks
    w[3, ::2] = -0.0
    w[4, 1::2] *= np.float32(2.0**-20)                 # sub-blocks far below their block's peak
    attrs = dict(base, axis=1)
    fq = fake_quantize(w, fmt, **attrs)
    doubled = fq.copy()
    doubled[5:7] *= np.float32(2.0)                    # another exponent decodes these rows
    halved = fq.copy()
    halved[7:9] *= np.float32(0.5)
    stray = fq.copy()
    stray[9, 3] = np.float32(0.123456789)              # one value off the grid: a patch
    off = fq.copy()
    off[10:] = rng.normal(0, 0.2, (38, 64)).astype(np.float32)  # many: the weight stays unpacked
    zeroed = fq.copy()
    zeroed[1] = 0.0  # the Inf/NaN row stored as zeros: exponent byte 255 would decode 0 * Inf = NaN
    out += [("edge", w, fq, attrs), ("doubled", w, doubled, attrs), ("halved", w, halved, attrs),
            ("stray", w, stray, attrs), ("off", w, off, attrs), ("zeroed", w, zeroed, attrs)]
    return out


def _pack(fmt: str, base: dict, prove: bool, monkeypatch) -> tuple[list, WeightPacker, dict]:
    monkeypatch.setattr(packed, "PROVE_BY_CODES", prove)
    packer = WeightPacker(13, FreshNames())
    frags = {}
    for name, values, fq, attrs in _cases(fmt, base):
        frags[name] = (packer.add(name, values, fq, fmt, attrs, f"{name}_out"), fq)
    head = packer.finish()
    serial = [(name, None if f is None else ([n.SerializeToString() for n in f.nodes], [t.SerializeToString() for t in f.initializers]))
              for name, (f, _) in frags.items()]
    serial.append(("head", ([n.SerializeToString() for n in head.nodes], [t.SerializeToString() for t in head.initializers])))
    monkeypatch.setattr(packer, "finish", lambda: head)
    return serial, packer, frags


@pytest.mark.parametrize("key", BLOCK_KEYS)
def test_shortcut_packs_the_same_bytes_as_decoding_every_block(key, monkeypatch):
    fmt, base = FORMATS[key]
    slow, _, _ = _pack(fmt, base, False, monkeypatch)
    fast, packer, frags = _pack(fmt, base, True, monkeypatch)
    assert [n for n, _ in fast] == [n for n, _ in slow]
    for (name, a), (_, b) in zip(fast, slow):
        assert a == b, f"{key}/{name}: the shortcut packed other bytes than decoding every block"
    packed_names = [n for n, (f, _) in frags.items() if f is not None]
    # the cases reach what they are for: packed weights, retried or patched rows, an unpacked one
    assert {"conv", "edge", "doubled", "halved", "stray", "zeroed"} <= set(packed_names), f"{key}: {packed_names}"
    assert frags["off"][0] is None, f"{key}: a weight of many off-grid values was packed"
    assert any(i.name.startswith("stray_patch") for i in frags["stray"][0].initializers), f"{key}: no patch for the stray value"

    # onnxruntime decodes the packed weights to the given values, bit for bit
    use = {f"{n}_out": f for n, (f, _) in frags.items() if f is not None}
    expected = {f"{n}_out": fq for n, (f, fq) in frags.items() if f is not None}
    dtypes = {k: TensorProto.FLOAT16 if v.dtype == np.float16 else TensorProto.FLOAT for k, v in expected.items()}
    model = _decode_model(packer, use, dtypes, {k: v.shape for k, v in expected.items()})
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    outs = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {})))
    for name, fq in expected.items():
        u = np.uint16 if fq.dtype == np.float16 else np.uint32
        assert np.array_equal(outs[name].view(u), fq.view(u)), f"{key}/{name}: decoded values differ"
