"""Library findings of the zoo's reruns (bench/RESULTS.md, zoo18 and zoo19), each a test that failed until the library
answered it (the first: analysis/floor.beyond_confirmation, used by algorithms/repair.enforce_floor), or an
``xfail(strict=True)`` until it does (the second, zoo19: the default's advice).

ddddocr_ocr BFP16 (48 calibration captchas) is one string below the 0.97 floor on the zoo's 192 held-out
captchas; the library's floor says "holds on its figures, NOT CONFIRMED … repair_uncertain=True repairs it as
broken". With ``repair_uncertain=True`` repair did not repair it: it reported "the floor breaks even with every
quantized node float … the loss is not the quantizers'" and delivered the plain model marked BROKEN, although the
all-float candidate reads every string as float does (strings 1.0000). The share cannot be confirmed on as few
held-out reads by ANY candidate, float included; the words blame the float graph for the data's size. The same
on a one-MatMul graph with 24 samples (below), in 0.5 s.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper


def _matmul_classes():
    """x [4, 16] → MatMul → y [4, 8]: 8 class scores a row, which the floor judges by top-1."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model, [{"x": rng.standard_normal((4, 16)).astype(np.float32)} for _ in range(24)]


def test_repair_uncertain_does_not_blame_float_for_too_few_reads():
    import onnxptq
    from onnxptq.config.presets import resolve_config

    model, data = _matmul_classes()
    plain = onnxptq.quantize(model, "BF16", data=data)
    # the default says it could not confirm, and that repair_uncertain=True could not act on these reads either
    assert plain.floor.ok and plain.floor.unconfirmed == ["y"]
    assert "repair_uncertain=True cannot repair it" in plain.summary()
    result = onnxptq.quantize(model, dataclasses.replace(resolve_config("BF16"), repair_uncertain=True), data=data)
    text = result.summary()
    # every row's top-1 is float's (1.0000 on 96 rows): the float graph loses nothing; too few held-out rows
    # confirm no candidate's share, and the summary must say that, not that float itself breaks the floor
    assert "top-1 1.0000" in text
    assert "breaks even with every quantized node float" not in text, text
    # said as what it is: could not confirm, and why repair did not act on it
    assert result.floor.ok and result.floor.unconfirmed == ["y"]
    assert "repair_uncertain=True cannot repair it" in text, text
    assert "repair_uncertain=True repairs it as broken" not in text, text


def test_the_default_does_not_advise_repair_uncertain_where_it_cannot_repair():
    """ddddocr_ocr BFP16 on main 73fb8c34 (bench/RESULTS.md, zoo19): with defaults the summary ends "repair_uncertain=True
    repairs it as broken"; with that option on the same 48 captchas the summary ends "repair_uncertain=True cannot
    repair it: on as few reads no candidate, every node float included, could confirm it" and nothing is repaired (8
    held-out reads: a share of 1 on 8 reads has a 90 % bound of 0.83, below 0.97). Whether the option can act is
    known before it is run (``floor._confirmable`` of the share's bound), so the default should not advise it there.
    The same on the one-MatMul graph."""
    import onnxptq
    from onnxptq.config.presets import resolve_config

    model, data = _matmul_classes()
    uncertain = onnxptq.quantize(model, dataclasses.replace(resolve_config("BF16"), repair_uncertain=True), data=data)
    assert "repair_uncertain=True cannot repair it" in uncertain.summary()  # the option's own answer on this data
    plain = onnxptq.quantize(model, "BF16", data=data)
    assert plain.floor.ok and plain.floor.unconfirmed == ["y"]
    assert "repair_uncertain=True repairs it as broken" not in plain.summary(), plain.summary()
