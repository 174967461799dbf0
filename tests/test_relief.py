"""Value maps judged by their relief cosine (analysis/relief.py): which outputs by structure and data, the figure against
an independent computation, a map that holds is not flagged, a table of independent scores is not read so, and a
search's bound is taken on the relief where it is the lower figure (bench/RESULTS.md, zoo20 and relief21)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxptq.analysis.floor import chosen_cosine, floor_for, measure, readings_of
from onnxptq.analysis.relief import relief_cosine, relief_outputs
from onnxptq.config.presets import resolve_config
from test_zoo_findings import _height_maps


def _tail(last: str | None, shape: list, name: str = "out") -> onnx.ModelProto:
    """x → 3×3 Conv to one channel → Mul by a constant → ``last`` (None: nothing) → ``name`` of declared ``shape``."""
    w = numpy_helper.from_array(np.full((1, 1, 3, 3), 1 / 9, np.float32), "w")
    k = numpy_helper.from_array(np.array(2.0, np.float32), "k")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Mul", ["k", "c"], ["m"])]
    if last is not None:
        nodes.append(helper.make_node(last, ["m"], ["l"]))
    nodes.append(helper.make_node("Reshape" if len(shape) == 3 else "Identity",
                                  ["l" if last else "m"] + (["s"] if len(shape) == 3 else []), [name]))
    inits = [w, k] + ([numpy_helper.from_array(np.array([0, 64, 64], np.int64), "s")] if len(shape) == 3 else [])
    graph = helper.make_graph(nodes, "tail", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 64, 64])],
                              [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_outputs_by_structure():
    assert relief_outputs(_tail(None, ["N", 1, 64, 64])) == {"out"}
    assert relief_outputs(_tail("Relu", ["N", 64, 64])) == {"out"}  # [N, H, W]: one map a row
    assert relief_outputs(_tail(None, ["N", 3, 32, 32])) == set()  # three declared channels: not one map
    for bound in ("Sigmoid", "Tanh", "Softmax"):  # probabilities and gates: read by their masks, not their relief
        assert relief_outputs(_tail(bound, ["N", 1, 64, 64])) == set(), bound


def _fields(seed: int) -> list[np.ndarray]:
    """Smooth height maps ``[2, 1, 64, 64]`` a feed, each its own level and relief (tests/test_zoo_findings.py's)."""
    return [f["denoised"] for f in _height_maps(seed, feeds=6)]


def test_the_relief_cosine_is_float_centred_and_pooled():
    """Against the definition written out: every map's float mean taken off both, one cosine over all maps."""
    rng = np.random.default_rng(1)
    refs = _fields(1)
    gots = [r + rng.normal(0, 0.02, r.shape).astype(np.float32) + np.float32(0.03) for r in refs]
    found = relief_cosine(refs, gots)
    x = np.concatenate([(r - r.mean(axis=(2, 3), keepdims=True)).ravel() for r in refs]).astype(np.float64)
    y = np.concatenate([(g - r.mean(axis=(2, 3), keepdims=True)).ravel() for r, g in zip(refs, gots)]).astype(np.float64)
    assert found is not None and found.maps == 12 and len(found.sums) == 6
    assert abs(found.cosine - x @ y / np.linalg.norm(x) / np.linalg.norm(y)) < 1e-9
    assert min(found.correlation) > 0.9


def test_a_map_that_holds_is_not_flagged():
    """BF16-like noise (terrain BF16: RMS error 0.003 on maps of relief 0.08-0.3; relief cosine 0.9990): judged by
    its relief, which holds the 16-bit floor."""
    rng = np.random.default_rng(2)
    refs = _fields(2)
    gots = [r + rng.normal(0, 0.003, r.shape).astype(np.float32) for r in refs]
    verdict = measure([{"out": r} for r in refs], [{"out": g} for g in gots], floor_for(resolve_config("BF16")),
                      **readings_of(_tail(None, ["N", 1, 64, 64])))
    check = verdict.outputs["out"]
    assert verdict.ok and check.relief is not None and check.relief.cosine >= 0.99, check.describe()
    assert "relief cosine" in check.describe()
    assert not verdict.wants_calibration_feeds and not verdict.unconfirmed  # its bound clears the floor: nothing more run


def test_a_lifted_low_map_breaks_and_its_bound_is_the_reliefs():
    """The same maps, each lifted by half its relief: the pooled cosine holds (the levels carry it), the relief breaks;
    a search's bound on it (``chosen_cosine``) is the relief's figure, not the pooled cosine's."""
    refs = _fields(3)
    gots = [r + np.float32(0.05) for r in refs]
    verdict = measure([{"out": r} for r in refs], [{"out": g} for g in gots], floor_for(resolve_config("BFP16")),
                      **readings_of(_tail(None, ["N", 1, 64, 64])))
    check = verdict.outputs["out"]
    assert check.cosine > 0.99 and check.relief is not None and check.relief.cosine < 0.99
    assert not verdict.ok and verdict.broken == ["out"]
    bound = chosen_cosine(check, verdict.floor, 3)
    assert bound is not None and bound.share == check.relief.cosine


def test_independent_scores_are_not_read_as_a_relief():
    """A ``[N, 1, 64, 64]`` output of independent cells (neighbour correlation ~0) is no field: a lift that would break
    a relief reading leaves it judged by its pooled cosine alone."""
    rng = np.random.default_rng(4)
    refs = [(-0.6 + 0.1 * rng.standard_normal((2, 1, 64, 64))).astype(np.float32) for _ in range(6)]
    gots = [r + np.float32(0.05) for r in refs]
    assert relief_cosine(refs, gots) is None
    verdict = measure([{"out": r} for r in refs], [{"out": g} for g in gots], floor_for(resolve_config("BFP16")),
                      **readings_of(_tail(None, ["N", 1, 64, 64])))
    assert verdict.ok and verdict.outputs["out"].relief is None


def test_small_maps_are_not_fields():
    """Fewer than 8 cells a side: a handful of values, not a relief."""
    rng = np.random.default_rng(5)
    refs = [np.cumsum(np.cumsum(rng.standard_normal((2, 1, 6, 6)), 2), 3).astype(np.float32) for _ in range(4)]
    assert relief_cosine(refs, refs) is None


def _noisy(seed: int, noise: list[float]) -> tuple[list[dict[str, np.ndarray]], list[dict[str, np.ndarray]]]:
    """Feeds of smooth maps (``_fields``), each quantized map float's plus white noise of ``noise[i]`` times each map's
    own relief (its spatial std): a feed's relief cosine about ``1 / sqrt(1 + noise²)``."""
    rng = np.random.default_rng(seed)
    refs = _fields(seed)[:len(noise)]
    gots = [(r + rng.normal(0, 1, r.shape) * r.std(axis=(2, 3), keepdims=True) * k).astype(np.float32)
            for r, k in zip(refs, noise)]
    return [{"out": r} for r in refs], [{"out": g} for g in gots]


def test_a_relief_its_few_held_out_feeds_leave_open_is_judged_on_the_calibration_feeds_too():
    """terrain_unet MXINT8's shape (tail22): 4 held-out feeds, one losing relief (0.985) and three keeping it, pool to 0.995,
    above the 16-bit floor 0.99, their jackknife bound across it; the calibration feeds lose relief (0.97 each). They may
    break it, never confirm it: broken on the pooled figure, said so. With calibration feeds that keep it, it holds on its
    figure, "could NOT confirm" (the held-out feeds' bound). On main both held, with no word of the bound."""
    floor = floor_for(resolve_config("MXINT8"))
    readings = readings_of(_tail(None, ["N", 1, 64, 64]))
    held = _noisy(10, [0.17, 0.01, 0.01, 0.01])
    first = measure(*held, floor, **readings)
    check = first.outputs["out"]
    assert check.relief is not None and check.relief.cosine >= floor.cosine and first.ok
    assert first.wants_calibration_feeds, "the held-out feeds leave the relief open: the calibration feeds are asked for"
    losing = measure(*held, floor, **readings, seen=_noisy(20, [0.25] * 6))
    check = losing.outputs["out"]
    assert losing.broken == ["out"], check.describe()
    assert check.relief.seen == 6 and check.relief.cosine < floor.cosine and "6 calibration samples" in check.describe()
    assert losing.ok_needs_calibration_feeds  # repair judges its candidates on the same feeds
    keeping = measure(*held, floor, **readings, seen=_noisy(20, [0.01] * 6))
    check = keeping.outputs["out"]
    assert keeping.ok and keeping.unconfirmed == ["out"] and check.relief.seen == 0
    assert check.unconfirmed.low < floor.cosine <= check.unconfirmed.share


def _level_model() -> onnx.ModelProto:
    """x → 1×1 ``Conv`` (weight 1) → ``Clip`` −1…1 → ``denoised`` ``[N, 1, 64, 64]``: a value map by structure, whose
    block-format error is the input's (MXINT8's step is set by each block's largest value)."""
    w = numpy_helper.from_array(np.ones((1, 1, 1, 1), np.float32), "w")
    lo, hi = (numpy_helper.from_array(np.array(v, np.float32), n) for v, n in ((-1.0, "lo"), (1.0, "hi")))
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Clip", ["c", "lo", "hi"], ["denoised"])]
    graph = helper.make_graph(nodes, "level", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 64, 64])],
                              [helper.make_tensor_value_info("denoised", TensorProto.FLOAT, ["N", 1, 64, 64])], [w, lo, hi])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_quantize_judges_a_relief_its_lucky_held_out_feeds_hold_on_the_calibration_feeds_and_repairs_it():
    """The pipeline end to end (terrain_unet MXINT8's case, tail22): 12 feeds of maps with a relief of 0.01, on a high
    level (−0.6: MXINT8's step there is 1/128, the relief cosine ~0.975) or a low one (−0.03: ~1.0). The floor holds out
    feeds 0, 3, 6, 9 (pipeline/calibrate.py); three of them are low, so they pool to ~0.994, above the 16-bit floor, while
    the calibration feeds, all high, read ~0.975. On main that delivered a bare "holds"; now the calibration feeds are
    run and pooled, the relief breaks, and repair steps the Conv up (1 node: about a second)."""
    from onnxptq import quantize

    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:64, 0:64] / 64.0
    data = []
    for i in range(12):
        maps = []
        for _ in range(2):
            f = sum(rng.standard_normal() * np.sin(2 * np.pi * (k * xx + rng.uniform())) * np.cos(2 * np.pi * (k * yy + rng.uniform()))
                    for k in (1, 2, 3))
            maps.append((-0.03 if i in (3, 6, 9) else -0.6) + 0.01 * (f - f.mean()) / f.std())
        data.append({"x": np.stack(maps)[:, None].astype(np.float32)})
    result = quantize(_level_model(), "MXINT8", data=data)
    repair = result.repair or {}
    assert repair.get("stepped_up") or repair.get("kept_float"), result.summary()
    assert "calibration samples" in repair.get("before_text", ""), repair.get("before_text")
    assert result.floor.ok and result.floor.outputs["denoised"].relief.cosine >= 0.99
