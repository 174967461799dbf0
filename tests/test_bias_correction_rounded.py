"""Bias correction hands the weights it rounds to emit (pipeline/emit.Rounded): emit folds them without
rounding them a second time, and the delivered model is byte for byte the one it rounds itself."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from onnxptq import get_preset, quantize
from onnxptq.pipeline import emit as emit_module
from onnxptq.pipeline.emit import Rounded
from test_bias_correction import _captcha_like, _first_conv_on_pixels


def _quantize(monkeypatch: pytest.MonkeyPatch, handed: bool) -> tuple[bytes, list[str], dict]:
    """MXFP8_E4M3 (bias correction on by default with 12 feeds), repair off: the delivered model's bytes,
    the weights emit rounded itself, and the result's bias correction timing (present: it ran)."""
    rounds: list[str] = []
    own = emit_module.fake_quantize_in_slices

    def counted(values, fmt, attrs):
        rounds.append(values.shape)
        return own(values, fmt, attrs)

    with monkeypatch.context() as m:
        m.setattr(emit_module, "fake_quantize_in_slices", counted)
        if not handed:
            m.setattr(Rounded, "take", lambda self, *a: None)  # emit rounds every weight itself
        cfg = get_preset("MXFP8_E4M3").replace(repair=False)
        cfg = cfg.replace(calibration=dataclasses.replace(cfg.calibration, progress=False))
        result = quantize(_first_conv_on_pixels(), cfg, _captcha_like(12, 1))
    return result.model.SerializeToString(), rounds, result.timings


def test_emit_takes_the_weights_bias_correction_rounded(monkeypatch: pytest.MonkeyPatch) -> None:
    handed, handed_rounds, timings = _quantize(monkeypatch, True)
    own, own_rounds, _ = _quantize(monkeypatch, False)
    assert "bias correction" in timings  # the correction ran: both corrected weights were rounded by it
    assert handed == own  # the same model, byte for byte
    assert len(own_rounds) == 2 and handed_rounds == [], (own_rounds, handed_rounds)


def test_a_rounding_is_taken_only_for_its_key_dtype_and_shape() -> None:
    values = np.arange(12, dtype=np.float32).reshape(3, 4)
    attrs = {"element_dtype": "fp8_e4m3", "block_size": 32, "axis": 1}
    rounded = Rounded()
    rounded.put("W", "mx", attrs, values)
    assert rounded.take("W", "mx", {**attrs, "axis": 0}, values) is None  # other attributes: emit rounds it
    assert len(rounded) == 0  # and the entry is gone either way (not held through emit)
    for like in (values.astype(np.float16), values.reshape(4, 3)):
        rounded.put("W", "mx", attrs, values)
        assert rounded.take("W", "mx", attrs, like) is None
    rounded.put("W", "mx", attrs, values)
    assert rounded.take("V", "mx", attrs, values) is None and len(rounded) == 1
    assert rounded.take("W", "mx", attrs, values) is values
