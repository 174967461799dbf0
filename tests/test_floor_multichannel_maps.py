"""A multi-channel probability map is judged by the regions its user thresholds (issue 27, "never silent").

basic-pitch's note/onset/contour posteriorgrams (``[windows, frames, pitches]``, each a ``Sigmoid``)
held the floor under MXFP8_E4M3 by cosine (0.996) while the package's notes kept 0.924 of float's:
the one-channel mask rule does not apply to a map with three axes longer than 1, so nothing but
the cosine judged it (analysis/maps.py, "Multi-channel maps"). A small transcriber is built here as
such a model is shaped: windows of a spectrogram-like input with notes (runs of frames at a pitch
and its octave), convolutions, a sigmoid posteriorgram ``[3, 64, 48]``; one planted sensitive
node, ``Conv_2``, whose weights for channel 0 are 50 times the others while that channel responds 50
times weaker (float unchanged), so A8W8's int8 weight grid leaves the others few codes. The map's cosine stays above the 8-bit floor while its notes
move.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxptq.analysis.maps import RegionAgreement, regions
from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config

B, T, F = 3, 64, 48
A8W8 = resolve_config("A8W8")


def transcriber(outlier: float = 50.0) -> onnx.ModelProto:
    """``x [B, T, F] → Unsqueeze → Conv → Relu → Conv_2 (the planted node) → Squeeze → Sigmoid → note [B, T, F]``."""
    rng = np.random.default_rng(5)
    w1 = np.abs(rng.standard_normal((8, 1, 3, 3))) * 0.3 + 0.2
    gain = 6.0
    w2 = np.full((1, 8, 3, 3), 2 * gain / 72)
    b1 = np.full(8, -0.1)
    w1[0] /= outlier  # channel 0 responds ``outlier`` times weaker and its next weights are
    b1[0] /= outlier
    w2[:, 0] *= outlier  # ``outlier`` times larger: float is unchanged (a Relu is positively homogeneous)
    inits = [numpy_helper.from_array(np.asarray(v, np.float32), n)
             for v, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (np.array([-0.9 * gain]), "b2"))]
    inits.append(numpy_helper.from_array(np.array([1], np.int64), "ax1"))
    nodes = [helper.make_node("Unsqueeze", ["x", "ax1"], ["x4"], name="Unsqueeze_in"),
             helper.make_node("Conv", ["x4", "w1", "b1"], ["c1"], name="Conv_1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="Relu_1"),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["logits"], name="Conv_2", pads=[1, 1, 1, 1]),
             helper.make_node("Squeeze", ["logits", "ax1"], ["l3"], name="Squeeze_out"),
             helper.make_node("Sigmoid", ["l3"], ["note"], name="Sigmoid_note")]
    graph = helper.make_graph(nodes, "transcriber", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, T, F])],
                              [helper.make_tensor_value_info("note", TensorProto.FLOAT, [B, T, F])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def clips(n: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Windows of noise with six notes each: a run of 6-20 frames at a pitch and half as loud an octave up."""
    rng = np.random.default_rng(seed)
    feeds = []
    for _ in range(n):
        x = 0.05 * rng.standard_normal((B, T, F))
        for b in range(B):
            for _ in range(6):
                t0, p, length, a = rng.integers(0, T - 12), rng.integers(0, F - 14), rng.integers(6, 20), rng.uniform(0.6, 1.2)
                x[b, t0:t0 + length, p] += a
                x[b, t0:t0 + length, p + 12] += 0.5 * a
        feeds.append({"x": x.astype(np.float32)})
    return feeds


def _notes(prob: np.ndarray) -> set[tuple[int, int, int]]:
    """Note events as a transcriber's decoder reads them: runs of at least 4 frames above 0.5 at a
    pitch, as (window, onset frame, pitch)."""
    above = prob > 0.5
    events = set()
    for b, p in zip(*np.nonzero(above.any(axis=1))):
        run = np.concatenate(([0], above[b, :, p].astype(np.int8), [0]))
        starts, stops = np.flatnonzero(np.diff(run) == 1), np.flatnonzero(np.diff(run) == -1)
        events.update((int(b), int(s), int(p)) for s, e in zip(starts, stops) if e - s >= 4)
    return events


def _note_f1(model_a: onnx.ModelProto, model_b: onnx.ModelProto, feeds: list[dict[str, np.ndarray]]) -> float:
    """F1 of model_b's notes against model_a's, an onset within 2 frames at the same pitch matching."""
    import onnxruntime as ort

    sa, sb = (ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]) for m in (model_a, model_b))
    hit = total = 0
    for f in feeds:
        a, b = _notes(sa.run(None, f)[0]), _notes(sb.run(None, f)[0])
        total += len(a) + len(b)
        free = set(b)
        for w, t0, p in sorted(a):
            match = next((x for x in sorted(free) if x[0] == w and x[2] == p and abs(x[1] - t0) <= 2), None)
            if match is not None:
                free.discard(match)
                hit += 2
    return hit / max(total, 1)


def test_a_posteriorgram_whose_notes_move_breaks_the_floor_while_its_cosine_holds():
    float_model, held = transcriber(), clips(32, seed=1000)
    off = quantize(float_model, A8W8.replace(repair=False), clips(24))
    check = off.floor.outputs["note"]
    assert check.cosine >= off.floor.floor.cosine and check.mask is None  # the cosine alone passed it (main: "holds")
    assert check.regions is not None and check.regions[0] < 0.95 and not off.floor.ok
    assert "regions above its levels" in off.summary() and "NOT within the floor" in off.summary()
    assert _note_f1(float_model, off.model, held) < 0.95  # the notes a decoder reads are really lost
    # the default repairs it, naming the planted node, and the notes come back
    # (the float repair, which keeps exactly the planted node; the 16-bit step: tests/test_repair_step_up.py)
    fixed = quantize(transcriber(), A8W8.replace(repair_budget=50.0, repair_step_up=False), clips(24))
    assert fixed.floor.ok and "Conv_2" in fixed.repair["kept_float"]
    assert fixed.floor.outputs["note"].regions[0] >= 0.95
    assert _note_f1(float_model, fixed.model, held) >= 0.95
    # without the planted node the same transcriber holds: the region judgement is not what breaks it
    plain = quantize(transcriber(outlier=1.0), A8W8.replace(repair=False), clips(24))
    assert plain.floor.ok and plain.floor.outputs["note"].regions[0] >= 0.97


def _flood_fill_partition(mask: np.ndarray) -> set[frozenset[int]]:
    """The components of ``mask`` by breadth-first flood fill, face neighbours within each leading index."""
    seen = np.zeros(mask.shape, bool)
    parts = set()
    for start in zip(*np.nonzero(mask)):
        if seen[start]:
            continue
        queue, cells = [start], []
        seen[start] = True
        while queue:
            cell = queue.pop()
            cells.append(np.ravel_multi_index(cell, mask.shape))
            for ax in range(1, mask.ndim):
                for step in (-1, 1):
                    nb = list(cell)
                    nb[ax] += step
                    nb = tuple(nb)
                    if 0 <= nb[ax] < mask.shape[ax] and mask[nb] and not seen[nb]:
                        seen[nb] = True
                        queue.append(nb)
        parts.add(frozenset(int(c) for c in cells))
    return parts


def test_regions_are_face_connected_and_never_cross_the_batch_axis():
    m = np.zeros((2, 5, 6), bool)
    m[0, 1:3, 1:3] = True  # a 2x2 block
    m[0, 4, :] = True  # a row, touching the block's corner only diagonally? no: separate rows
    m[0, 3, 5] = True  # joins the row from above
    m[1, 0, 0] = True  # the next window: its own region even where window 0 has cells above it
    m[1, 2:5, 5] = True
    lab = regions(m)
    assert len(np.unique(lab[m])) == 4 and (lab[~m] == -1).all()
    assert lab[0, 3, 5] == lab[0, 4, 0] and lab[1, 2, 5] != lab[0, 3, 5]
    # against a plain flood fill on random masks (dense speckle and large blobs alike)
    rng = np.random.default_rng(2)
    for density in (0.3, 0.6):
        mask = rng.random((2, 20, 30)) < density
        lab = regions(mask)
        assert _flood_fill_partition(mask) == {frozenset(np.flatnonzero((lab == k).ravel())) for k in np.unique(lab[mask])}
    diagonal = np.zeros((1, 3, 3), bool)
    diagonal[0, 0, 0] = diagonal[0, 1, 1] = True
    assert len(np.unique(regions(diagonal)[diagonal])) == 2


def test_region_agreement_counts_lost_and_spurious_regions_and_skips_speckle_and_one_channel_maps():
    ref = np.zeros((2, 40, 40))
    for b in range(2):
        for k in range(10):
            ref[b, 4 * k:4 * k + 3, k:k + 8] = 0.9  # 10 notes of 3x8 cells per window
    got = ref.copy()
    got[0, 0:3, 0:8] = 0.0  # one note lost
    got[1, 39, 0:6] = 0.9  # one spurious note (6 cells)
    got[1, 38, 30] = 0.9  # one speckle cell: no region
    agreement = RegionAgreement()
    agreement.add(ref, got)
    f1, count = agreement.judge(needed=34)
    # three levels of the range (0.18, 0.45, 0.72) each see 20 float regions, 1 lost, 1 spurious
    assert count == 60 and f1 == np.float64(2 * 57 / (2 * 57 + 3 + 3))
    assert RegionAgreement().judge(needed=1) is None
    few = RegionAgreement()
    few.add(ref, ref)
    assert few.judge(needed=61) is None  # fewer float regions than the floor needs: not judged
    one_channel = RegionAgreement()
    one_channel.add(ref[:1], got[:1])  # [1, 40, 40]: the one-channel mask rule's, not this one's
    assert not one_channel.valid and one_channel.judge(needed=1) is None
