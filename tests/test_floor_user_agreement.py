"""An output read through a mapping the graph does not hold: the user tells the floor how (issue 27, branch terrain).

adaptive-terrain-diffusion's U-Net returns heights in an asinh model space ([-1, 1]); the package maps
them to metres through ``0.1·sinh(6.09·(x+1)/2)``, ~67 m per model unit at the peaks. BF16, BFP16,
MXINT8 and MXFP8_E4M3 kept the output's cosine at 0.996-0.9998 and 0.77-0.96 of the height cells
within 1 % of the range, and the floor said "holds": no figure taken on the graph's values can see
a reading applied outside it. ``QuantConfig.floor_output_agreement`` is how the user says it.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq.analysis.floor import FAMILY_FLOORS, Floor, measure
from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config
from onnxptq.config.schema import ConfigError
from onnxptq.errors import UsageError

SIXTEEN = Floor("16-bit", *FAMILY_FLOORS["16-bit"])
RANGE, ASINH = 22.16864013671875, 0.1  # the package's height range (m) and asinh scale


def heights(x: np.ndarray) -> np.ndarray:
    """The package's model space → metres (TerrainGenerator._from_model_space)."""
    norm = np.arcsinh(RANGE / ASINH)
    return np.clip(ASINH * np.sinh(np.clip((x + 1.0) * 0.5, 0.0, 1.0) * norm), 0.0, RANGE)


def cells_within_a_percent(ref: np.ndarray, got: np.ndarray) -> float:
    return float(np.mean(np.abs(heights(ref) - heights(got)) <= 0.01 * RANGE))


def _fields(n: int, seed: int = 0) -> list[np.ndarray]:
    """Height fields in model space: mostly low ground (near -1), a fifth of the cells in peaks near 1."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        x = rng.uniform(-1.0, -0.4, (1, 1, 32, 32))
        peaks = rng.random(x.shape) < 0.2
        out.append(np.where(peaks, rng.uniform(0.85, 0.99, x.shape), x).astype(np.float32))
    return out


def test_an_error_the_cosine_cannot_see_breaks_the_floor_when_the_user_names_the_reading():
    refs = _fields(4)
    rng = np.random.default_rng(1)
    gots = [(r + rng.normal(0, 0.006, r.shape)).astype(np.float32) for r in refs]  # ~BF16's output error
    reference, candidate = [{"y": r} for r in refs], [{"y": g} for g in gots]
    plain = measure(reference, candidate, SIXTEEN)
    assert plain.ok and plain.outputs["y"].cosine > 0.9999  # what the floor said: holds
    told = measure(reference, candidate, SIXTEEN, agreements={"y": cells_within_a_percent})
    check = told.outputs["y"]
    assert not told.ok and check.user_agreement is not None and check.user_agreement[1] == 4
    assert check.user_agreement[0] < SIXTEEN.top1 and "floor_output_agreement" in check.describe()
    # and a quantization that reads the same holds it
    assert measure(reference, reference, SIXTEEN, agreements={"y": cells_within_a_percent}).ok


def test_bad_agreement_options_name_the_option_and_the_output():
    with pytest.raises(ConfigError, match="floor_output_agreement"):
        dataclasses.replace(resolve_config("BF16"), floor_output_agreement={"y": "not a function"})
    refs = _fields(1)
    with pytest.raises(UsageError, match="'heights'.*does not have.*y"):
        measure([{"y": refs[0]}], [{"y": refs[0]}], SIXTEEN, agreements={"heights": cells_within_a_percent})
    with pytest.raises(UsageError, match=r"floor_output_agreement\['y'\] returned 2"):
        measure([{"y": refs[0]}], [{"y": refs[0]}], SIXTEEN, agreements={"y": lambda r, g: 2.0})


def _field_model():
    """x [N, 4, 32, 32] → Conv → Relu → Conv → Tanh → y [N, 1, 32, 32]: a field in [-1, 1]."""
    rng = np.random.default_rng(0)
    w1 = (rng.standard_normal((16, 4, 3, 3)) / 3).astype(np.float32)
    w2 = (rng.standard_normal((1, 16, 3, 3)) / 6).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["h"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "w2"], ["z"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("Tanh", ["z"], ["y"], name="tanh")]
    graph = helper.make_graph(nodes, "field", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 32, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 1, 32, 32])],
                              [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_quantize_judges_the_users_reading_and_repair_answers_it():
    """Through quantize(): the option reaches the verdict and repair. A reading no 16-bit format
    holds (every cell within 1e-4 of float's) breaks BF16's floor, which the cosine alone keeps."""
    model = _field_model()
    rng = np.random.default_rng(2)
    data = [{"x": rng.standard_normal((1, 4, 32, 32)).astype(np.float32)} for _ in range(12)]
    strict = lambda r, g: float(np.mean(np.abs(r - g) <= 1e-4))  # noqa: E731
    plain = quantize(model, dataclasses.replace(resolve_config("BF16"), repair=False), data=data)
    assert plain.floor.ok and plain.floor.outputs["y"].user_agreement is None
    told = quantize(model, dataclasses.replace(resolve_config("BF16"), floor_output_agreement={"y": strict}), data=data)
    assert told.floor.outputs["y"].user_agreement is not None
    assert told.repair and told.repair.get("kept_float")  # the break the reading showed was repaired
