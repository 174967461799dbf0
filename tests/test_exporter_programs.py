"""torch's default exporter returns an ONNXProgram; quantize takes it as the model it holds.

``torch.onnx.export(model, args, dynamo=True)`` (torch ≥ 2.9's default) without a file returns an
``ONNXProgram``; before :mod:`onnxptq.graph.programs` passing it to ``quantize`` died in pathlib
with a bare ``TypeError``. One real export (a two-layer MLP, a few seconds) serves every test.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import onnxscript  # noqa: F401  (the dynamo exporter's backend: the test extra installs it, never skipped)
import torch

import onnxptq
from onnxptq.graph.programs import ModelTypeError

# torch.export's own deprecation inside its pytree pickling, not ours: kept out of the suite's output
pytestmark = pytest.mark.filterwarnings("ignore:`isinstance\\(treespec, LeafSpec\\)` is deprecated:FutureWarning")


@pytest.fixture(scope="module")
def program():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).eval()
    return torch.onnx.export(net, (torch.randn(1, 8),), dynamo=True, verbose=False)


def _data(proto: onnx.ModelProto, n: int = 12) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    name = proto.graph.input[0].name
    return [{name: rng.normal(size=(1, 8)).astype(np.float32)} for _ in range(n)]


def test_quantize_takes_the_dynamo_program(program):
    proto = program.model_proto
    assert not isinstance(program, onnx.ModelProto)  # the object torch returns, not a ModelProto
    data = _data(proto)
    from_program = onnxptq.quantize(program, "A8W8", data=data)
    from_proto = onnxptq.quantize(proto, "A8W8", data=data)
    assert from_program.plan.nodes == from_proto.plan.nodes and {"node_linear", "node_linear_1"} <= set(from_program.plan.nodes)  # both layers
    q = [n.op_type for n in from_program.model.graph.node]
    assert q.count("QuantizeLinear") >= 2 and q.count("DequantizeLinear") >= 2
    assert from_program.metrics[proto.graph.output[0].name]["cosine"] > 0.999


def test_a_model_of_another_type_is_named():
    with pytest.raises(ModelTypeError, match=r"model_proto.*got builtins\.dict"):
        onnxptq.quantize({"not": "a model"}, "A8W8")
    with pytest.raises(TypeError):  # still a TypeError for callers that catch that
        onnxptq.graph.io.load_model(3.5)
