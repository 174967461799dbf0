"""GroupNorm as exporters write it without ``GroupNormalization`` (graph/structure.py, issue 27 item 1).

torch's nn.GroupNorm below opset 18 is ``Reshape(N, G, −1) → InstanceNormalization(ones, zeros) →
Reshape back → · γ + β``; an InstanceNorm exported as a one-group GroupNorm is the same with G = 1;
other exporters write the mean/variance by ``ReduceMean`` over (C/G, H, W) of a (N, G, C/G, H, W)
reshape. Each is one region from the Conv output that is grouped to the tensor after ``+ β``: before
this rule the plan rounded the grouped tensor, the InstanceNormalization output, the reshape back and
the ``· γ`` under BF16 (fuzz16's ``groupnorm_instnorm`` corner), where the fused op rounds none of them.
The written-out activations checked beside them (HardSwish by ``Clip``, Mish by ``Softplus``) were one
region already and stay so.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from _structure_graphs import _B
from onnxptq.analysis.metrics import cosine_similarity
from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config
from onnxptq.graph.structure import find_regions

C, G, HW = 8, 2, 6


class _G(_B):
    def __init__(self) -> None:
        super().__init__()
        self.rng = np.random.default_rng(5)

    def affine(self, t: str) -> str:
        gamma = self.const(self.rng.uniform(0.5, 1.5, (C, 1, 1)))
        return self.op("Add", self.op("Mul", t, gamma), self.const(self.rng.normal(0, 0.1, (C, 1, 1))))


def _instnorm(b: _G, z: str, groups: int) -> str:
    r = b.op("Reshape", z, b.ints([0, groups, -1]))
    n = b.op("InstanceNormalization", r, b.const(np.ones(groups)), b.const(np.zeros(groups)), epsilon=1e-5)
    return b.affine(b.op("Reshape", n, b.op("Shape", z)))


def _reducemean(b: _G, z: str) -> str:
    r = b.op("Reshape", z, b.ints([0, G, C // G, HW, HW]))
    d = b.op("Sub", r, b.op("ReduceMean", r, axes=[2, 3, 4], keepdims=1))
    var = b.op("ReduceMean", b.op("Mul", d, d), axes=[2, 3, 4], keepdims=1)
    n = b.op("Div", d, b.op("Sqrt", b.op("Add", var, b.const(1e-5))))
    return b.affine(b.op("Reshape", n, b.ints([0, C, HW, HW])))


SPELLINGS = {
    "groupnorm_instnorm": (lambda b, z: _instnorm(b, z, G), "GroupNorm (InstanceNormalization over groups)", 5),
    "instnorm_one_group": (lambda b, z: _instnorm(b, z, 1), "GroupNorm (InstanceNormalization over groups)", 5),
    "groupnorm_reducemean": (_reducemean, "LayerNorm/GroupNorm (mean/variance)", 11),
    "hardswish_clip": (lambda b, z: b.op("Div", b.op("Mul", z, b.op("Clip", b.op("Add", z, b.const(3.0)), b.const(0.0), b.const(6.0))),
                                         b.const(6.0)), "HardSwish", 4),
    "mish_softplus": (lambda b, z: b.op("Mul", z, b.op("Tanh", b.op("Softplus", z))), "Mish", 3),
}


def _model(spelling: str) -> onnx.ModelProto:
    """x → Conv 3×3 (a common mode per channel, as a real feature map has) → the spelling → Conv 1×1."""
    b = _G()
    z = b.op("Conv", "x", b.const(b.rng.normal(0, 0.3, (C, 3, 3, 3))), b.const(b.rng.normal(0, 2.0, C)), pads=[1] * 4)
    y = SPELLINGS[spelling][0](b, z)
    out = b.op("Conv", y, b.const(b.rng.normal(0, 0.3, (4, C, 1, 1))))
    graph = helper.make_graph(b.nodes, spelling, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, HW, HW])],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    model = onnx.shape_inference.infer_shapes(model)
    onnx.checker.check_model(model)
    return model


def _data(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((1, 3, HW, HW)).astype(np.float32)} for _ in range(n)]


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
def test_each_spelling_is_one_region_from_the_ungrouped_input_to_the_affine_output(spelling):
    model = _model(spelling)
    regions = find_regions(model)
    assert len(regions) == 1, regions
    region = regions[0]
    producer = {o: n for n in model.graph.node for o in n.output}
    assert region.kind == SPELLINGS[spelling][1]
    assert producer[region.x].op_type == "Conv"  # the ungrouped tensor, not the grouped reshape of it
    assert [n.op_type for n in model.graph.node if region.y in n.input] == ["Conv"]  # after · γ + β
    assert len(region.nodes) == SPELLINGS[spelling][2]


@pytest.mark.parametrize("preset", ["BF16", "MX9"])
@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
def test_inside_stays_float_and_the_output_holds(spelling, preset):
    model = _model(spelling)
    # the inside, read off the graph itself: what the nodes between the two Convs make, but their output
    y = model.graph.node[-1].input[0]
    interior = {o for n in model.graph.node if n.op_type not in ("Conv", "Shape") for o in n.output} - {y}
    result = quantize(model, resolve_config(preset).replace(repair=False), _data(16, 1))
    assert not interior & set(result.plan.tensors), sorted(interior & set(result.plan.tensors))
    assert all("written-out" in result.plan.float_tensors.get(t, "written-out") for t in interior)
    assert y in result.plan.tensors  # the output after · γ + β is quantized, as the fused op's would be
    ref = ort.InferenceSession(model.SerializeToString())
    got = ort.InferenceSession(result.model.SerializeToString())
    cosines = [cosine_similarity(ref.run(None, f)[0], got.run(None, f)[0]) for f in _data(6, 11)]
    assert min(cosines) >= 0.99, cosines


def test_an_instance_norm_read_twice_after_it_is_no_region():
    """A normalization op whose output escapes (read by the affine and by a second branch) has no inside."""
    b = _G()
    z = b.op("Conv", "x", b.const(b.rng.normal(0, 0.3, (C, 3, 3, 3))), pads=[1] * 4)
    n = b.op("InstanceNormalization", z, b.const(np.ones(C)), b.const(np.zeros(C)))
    y = b.op("Add", b.affine(n), n)
    graph = helper.make_graph(b.nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, HW, HW])],
                              [helper.make_tensor_value_info(y, TensorProto.FLOAT, None)], b.inits)
    assert find_regions(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])) == []
