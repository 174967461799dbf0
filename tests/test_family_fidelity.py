"""bench/family_fidelity.py's figures against NumPy written out here, on made-up outputs and a two-op consumer model.

Why: the issue-27 finding (a format family's fidelity on continuous outputs does not separate DeepFilterNet3's broken
encoder rows from holding rows, bench/RESULTS.md "(dfn3enc, 2026-11-28)") rests on these figures: an SNR off by a
factor, a quiet frame counted as a total loss, or a consumer fed the wrong tensors would change the conclusion.
"""

from __future__ import annotations

import json
import pickle

import numpy as np
import onnx
from onnx import TensorProto, helper

from bench import family_fidelity as ff
from onnxptq.analysis.floor import Floor


def _noisy(r: np.ndarray, db: float, seed: int) -> np.ndarray:
    """``r`` plus noise scaled so the pair's SNR is exactly ``db``."""
    n = np.random.default_rng(seed).standard_normal(r.shape)
    return r + n * np.sqrt((r ** 2).sum() / (n ** 2).sum() / 10 ** (db / 10))


def test_pooled_and_worst_feed_snr_are_the_energy_ratios():
    rng = np.random.default_rng(0)
    refs = [rng.standard_normal((1, 40, 16)) for _ in range(2)]
    gots = [_noisy(refs[0], 30.0, 1), _noisy(refs[1], 20.0, 2)]
    fig = ff.output_figures(refs, gots)
    energy = sum((r ** 2).sum() for r in refs)
    error = sum(((r - g) ** 2).sum() for r, g in zip(refs, gots))
    assert abs(fig["snr"] - 10 * np.log10(energy / error)) < 1e-3
    assert abs(fig["worst_feed"] - 20.0) < 1e-3
    assert fig["frames"] == 80


def test_a_quiet_frame_is_weighed_against_its_feeds_level_not_its_own():
    r = np.ones((1, 10, 8))
    r[0, 3] = 1e-4  # a near-silent frame
    g = r.copy()
    g[0, 3] += 1e-3  # its error is 10x its own level, but 1e-3 of the feed's frame level
    fig = ff.output_figures([r], [g])
    # against its own energy the frame would be -20 dB; against QUIET (1/100) of the mean frame energy (7.2) 39.5 dB
    mean = (r[0] ** 2).sum(axis=1).mean()
    expected = -10 * np.log10((8 * 1e-6) / (ff.QUIET * mean))
    assert 39.0 < expected < 40.0 and fig["frames_30db"] == 1.0
    own = ff.frame_figures([r], [g])  # the gain reading weighs each frame by its own energy: that frame is lost
    assert own["share_17db"] == 0.9


def test_separation_names_only_the_below_rows_under_every_holding_row():
    def row(met: bool, snr: float, kind: str = "value") -> dict:
        return {"family": "16-bit", "met": met, "outputs": {"y": {"kind": kind, "snr": snr, "worst_feed": snr}}}

    rows = {"a.A16W8": row(True, 35.0), "b.A16W8": row(True, 29.0), "c.A16W8": row(False, 30.0),
            "d.A16W8": row(False, 20.0), "e.A16W8": row(True, 5.0, kind="class")}
    snr = next(s for s in ff.separation(rows, ("value",)) if s["figure"] == "snr")
    assert snr["lowest_holding"] == 29.0 and snr["lowest_holding_at"] == "b.A16W8:y" and snr["holding_rows"] == 2
    assert snr["separates"] == ["d.A16W8"]  # c (30 dB) sits above b's 29 dB: no floor breaks it and holds b
    assert snr["below"] == {"d.A16W8": 20.0, "c.A16W8": 30.0}


def _consumer(path) -> None:
    """y = 2 · (a + b): a float model whose inputs are named like the record's outputs."""
    x = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, "T", 8]) for n in ("a", "b")]
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "T", 8])
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    graph = helper.make_graph([helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Mul", ["s", "two"], ["y"])],
                              "consumer", x, [y], [two])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), str(path))


def test_a_consumer_reads_the_records_outputs_float_and_quantized(tmp_path):
    rng = np.random.default_rng(3)
    ref = [{"a": rng.standard_normal((1, 30, 8)).astype(np.float32), "b": rng.standard_normal((1, 30, 8)).astype(np.float32)}
           for _ in range(3)]
    got = [{k: (v + 0.05 * rng.standard_normal(v.shape)).astype(np.float32) for k, v in f.items()} for f in ref]
    with open(tmp_path / "m.A16W8.pkl", "wb") as fh:
        pickle.dump({"args": (ref, got, Floor("16-bit", 0.99, 0.97)), "kwargs": {}}, fh)
    (tmp_path / "m.A16W8.json").write_text(json.dumps({"agreement": 0.9, "task_floor": 0.97}))
    _consumer(tmp_path / "c.onnx")
    other = helper.make_graph([helper.make_node("Relu", ["z"], ["w"])], "other",
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("w", TensorProto.FLOAT, [1])])
    onnx.save(helper.make_model(other, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), str(tmp_path / "o.onnx"))
    found = ff.through_consumers([tmp_path], [str(tmp_path / "c.onnx"), str(tmp_path / "o.onnx")])
    assert [c["consumer"] for c in found] == ["c.onnx"]  # the model reading `z` has nothing of this record to read
    ys = [2 * (f["a"].astype(np.float64) + f["b"]) for f in ref]
    yg = [2 * (f["a"].astype(np.float64) + f["b"]) for f in got]
    dbs = np.concatenate([-10 * np.log10(((r - g) ** 2).sum(-1) / (r ** 2).sum(-1)).ravel() for r, g in zip(ys, yg)])
    frames = found[0]["frames"]["y"]
    assert frames["frames"] == 90 and abs(frames["p5"] - np.percentile(dbs, 5)) < 0.05
    assert frames["share_20db"] == round(float((dbs >= 20).mean()), 4)
    assert found[0]["task"] == 0.9 and isinstance(found[0]["ok"], bool)
