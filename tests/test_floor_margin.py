"""A verdict from few held-out reads says how sure it is: "could not confirm" (issue 27, analysis/evidence.py).

A share that holds the floor on its figure (2 of 64 held-out rows lost: 0.969 against an 8-bit floor of
0.95) is not yet one that holds it: its Wilson bound (90 % each side) reaches 0.927. Such a verdict is
named in the summary, the warning and the plan with the data that would confirm it, never a bare
"holds"; repair acts on it only with ``repair_uncertain=True``. The bound is checked against an
independent inversion of the score test (bisection, no closed form) and the spec value of z.

The planted model: a tabular classifier ``[N, 32] → [N, 10]`` (8 rows a sample, 24 samples: 8 held out,
64 held-out rows) whose first feature's range is ``spread`` times the others', its weights that much
smaller: per-tensor A8W8 of the input crushes the other features more the larger the spread (5: no row
flips, 10: two of 64, 35: six of 64).
"""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq.analysis.evidence import CONFIDENT, ShareBound, reads_to_confirm, share_bound
from onnxptq.analysis.floor import Floor, floor_lines, measure
from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config

Z90 = 1.2815515655446004  # the standard normal's 0.9 quantile (Φ⁻¹(0.9))
EIGHT_BIT = Floor("8-bit", 0.98, 0.95)


def _score_bound(kept: float, count: int, z: float, side: int) -> float:
    """The Wilson bound by its definition: the share p on ``side`` (-1 low, +1 high) of the observed one where the
    score statistic (p̂ − p) / sqrt(p(1 − p)/n) reaches ``z``, found by bisection."""
    obs = kept / count
    lo, hi = (0.0, obs) if side < 0 else (obs, 1.0)
    if (side < 0 and obs == 0.0) or (side > 0 and obs == 1.0):
        return obs
    for _ in range(200):
        mid = (lo + hi) / 2
        stat = abs(obs - mid) / math.sqrt(mid * (1 - mid) / count)
        inside = stat < z
        if side < 0:
            lo, hi = (lo, mid) if inside else (mid, hi)
        else:
            lo, hi = (mid, hi) if inside else (lo, mid)
    return (lo + hi) / 2


@pytest.mark.parametrize("kept,count", [(62, 64), (64, 64), (16, 16), (15, 16), (30.6, 32), (189, 192), (1, 3)])
def test_the_bound_is_the_score_tests_inversion(kept, count):
    low, high = share_bound(kept, count)
    assert low == pytest.approx(_score_bound(kept, count, Z90, -1), abs=1e-9)
    assert high == pytest.approx(_score_bound(kept, count, Z90, +1), abs=1e-9)
    assert low <= kept / count <= high


def test_every_read_kept_needs_n_over_n_plus_z_squared():
    """All kept: the low end is n / (n + z²), so a floor f is confirmed from f z² / (1 − f) reads on (54 at 0.97)."""
    assert CONFIDENT == 0.9
    for n in (8, 16, 34, 64, 100):
        assert share_bound(n, n)[0] == pytest.approx(n / (n + Z90 ** 2), rel=1e-12)
    for floor in (0.97, 0.95, 0.90):
        assert reads_to_confirm(1.0, floor) == math.ceil(floor * Z90 ** 2 / (1 - floor))
    assert (reads_to_confirm(1.0, 0.97), reads_to_confirm(1.0, 0.95), reads_to_confirm(1.0, 0.90)) == (54, 32, 15)
    assert reads_to_confirm(0.94, 0.95) is None  # below the floor: nothing confirms it
    b = ShareBound.of(62 / 64, 64, "rows", 0.95)
    assert not b.confirmed and b.to_confirm is not None and share_bound(62 / 64 * b.to_confirm, b.to_confirm)[0] >= 0.95
    assert share_bound(62 / 64 * (b.to_confirm - 1), b.to_confirm - 1)[0] < 0.95  # the least such count


def _rows(flipped: int, count: int, seed: int = 0) -> tuple[list[dict], list[dict]]:
    """One feed of ``count`` class rows whose arg-max the candidate keeps on all but ``flipped``."""
    rng = np.random.default_rng(seed)
    ref = rng.normal(0, 1, (count, 10)).astype(np.float32)
    ref[np.arange(count), 0] += 4.0  # class 0 wins every row clearly
    got = ref + rng.normal(0, 1e-3, ref.shape).astype(np.float32)
    got[:flipped, 1] = got[:flipped, 0] + 1.0  # class 1 wins these
    return [{"logits": ref}], [{"logits": got}]


def test_a_share_on_few_rows_is_named_could_not_confirm_a_clear_one_holds():
    unsure = measure(*_rows(2, 64), EIGHT_BIT, {"logits": None})
    check = unsure.outputs["logits"]
    assert unsure.ok and unsure.unconfirmed == ["logits"] and check.top1 == pytest.approx(62 / 64)
    assert check.unconfirmed.low == pytest.approx(share_bound(62, 64)[0]) and check.unconfirmed.low < 0.95
    text = "\n".join(floor_lines(unsure))
    assert "NOT CONFIRMED: logits" in text and "could NOT confirm" in text and "give at least" in text
    assert ": holds —" not in text and unsure.to_json()["unconfirmed"] == ["logits"]
    sure = measure(*_rows(2, 400), EIGHT_BIT, {"logits": None})  # the same two flips among 400 rows: 0.995, bound 0.989
    assert sure.ok and not sure.unconfirmed and sure.outputs["logits"].unconfirmed is None
    assert ": holds —" in "\n".join(floor_lines(sure)) and "CONFIRM" not in "\n".join(floor_lines(sure))
    broken = measure(*_rows(10, 64), EIGHT_BIT, {"logits": None})  # 0.844: below, broken as before, no bound said
    assert not broken.ok and broken.outputs["logits"].unconfirmed is None
    asked = measure(*_rows(2, 64), Floor("8-bit", 0.98, 0.95, confirm=True), {"logits": None})
    assert not asked.ok and asked.outputs["logits"].unconfirmed is not None  # repair_uncertain: broken, so repaired


def test_calibration_rows_may_break_an_unconfirmed_share_but_never_confirm_it():
    held_ref, held_got = _rows(2, 64)
    clean = _rows(0, 400, seed=1)
    still = measure(held_ref, held_got, EIGHT_BIT, {"logits": None}, seen=clean)  # 462 of 464 pooled: not a confirmation
    assert still.ok and still.unconfirmed == ["logits"] and still.outputs["logits"].rows == 64
    assert still.wants_calibration_feeds and still.ok_needs_calibration_feeds  # repair's candidates judged alike
    lossy = _rows(40, 400, seed=2)
    broke = measure(held_ref, held_got, EIGHT_BIT, {"logits": None}, seen=lossy)  # 422 of 464: 0.909 pooled
    check = broke.outputs["logits"]
    assert not broke.ok and check.rows == 464 and check.seen_feeds == 1 and check.top1 < 0.95


def _classifier(spread: float, seed: int = 3):
    rng = np.random.default_rng(seed)
    w1 = rng.normal(0, 0.3, (32, 64)).astype(np.float32)
    w1[0] /= spread
    w2 = rng.normal(0, 0.3, (64, 10)).astype(np.float32)
    b2 = rng.normal(0, 0.1, (10,)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="dense1"), helper.make_node("Relu", ["h"], ["r"], name="relu1"),
             helper.make_node("MatMul", ["r", "w2"], ["m"], name="head"), helper.make_node("Add", ["m", "b2"], ["logits"], name="bias")]
    graph = helper.make_graph(nodes, "tabular", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 32])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])],
                              [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2"), numpy_helper.from_array(b2, "b2")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def _feeds(spread: float) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(5)
    out = []
    for _ in range(24):
        x = rng.normal(0, 1, (8, 32)).astype(np.float32)
        x[:, 0] *= spread
        out.append({"x": x})
    return out


@pytest.fixture(scope="module")
def straddling():
    return _classifier(10.0), _feeds(10.0)


def test_the_pipeline_names_a_straddling_verdict_and_repairs_it_only_when_asked(straddling, caplog):
    model, feeds = straddling
    with caplog.at_level(logging.WARNING):
        said = quantize(model, resolve_config("A8W8"), feeds)  # the defaults: repair on, repair_uncertain off
    check = said.floor.outputs["logits"]
    assert said.floor.ok and said.floor.unconfirmed == ["logits"] and 0.95 <= check.top1 < 1.0 and check.rows == 64
    assert not said.repair.get("kept_float") and not said.repair.get("stepped_up")  # named, not repaired
    assert said.plan.to_json()["repair"]["unconfirmed"] == ["logits"]
    summary = said.summary()
    assert "NOT CONFIRMED: logits" in summary and "could NOT confirm" in summary and "repair_uncertain=True" in summary
    assert summary.count("each side") == 1, summary  # the bound said once (the check's line), not again in the advice
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name.endswith("repair")]
    assert any("could NOT confirm logits" in w and "give at least" in w for w in warnings)
    asked = quantize(model, resolve_config("A8W8").replace(repair_uncertain=True), feeds)
    fixed = asked.floor.outputs["logits"]
    assert asked.floor.floor.confirm and asked.floor.ok and not asked.floor.unconfirmed and fixed.top1 == 1.0
    assert asked.repair.get("kept_float") or asked.repair.get("stepped_up")
    assert "REPAIRED" in asked.summary() and "NOT CONFIRMED" not in asked.summary()


def test_the_pipeline_says_a_clear_hold_plainly_and_repairs_a_clear_break():
    clear = quantize(_classifier(5.0), resolve_config("A8W8"), _feeds(5.0))
    assert clear.floor.ok and not clear.floor.unconfirmed and clear.repair is None
    assert "CONFIRM" not in clear.summary()
    broken = quantize(_classifier(35.0), resolve_config("A8W8"), _feeds(35.0))
    assert broken.repair.get("kept_float") or broken.repair.get("stepped_up")
    assert broken.floor.ok and broken.repair["before"]["ok"] is False


def test_the_cli_names_it_and_repairs_it_with_repair_uncertain(straddling, tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    import onnx

    model, feeds = straddling
    model_path, data_path = tmp_path / "m.onnx", tmp_path / "d.npz"
    onnx.save(model, model_path)
    np.savez(data_path, x=np.concatenate([f["x"] for f in feeds]))  # 192 rows, read back in batches of 8: the same 24 samples
    src = str(Path(__file__).resolve().parents[1] / "src")

    def cli(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "onnxptq", "quantize", str(model_path), "-o", str(tmp_path / "q.onnx"),
                               "--preset", "A8W8", "--data", str(data_path), "--batch-size", "8", "--no-progress", *extra],
                              capture_output=True, text=True, env={"PYTHONPATH": src, "PATH": "/usr/bin:/bin"}, timeout=120)

    said = cli()
    assert said.returncode == 0, said.stderr
    assert "NOT CONFIRMED: logits" in said.stdout and "could NOT confirm logits" in said.stderr and "REPAIRED" not in said.stdout
    asked = cli("--repair-uncertain")
    assert asked.returncode == 0 and "REPAIRED" in asked.stdout and "NOT CONFIRMED" not in asked.stdout, asked.stdout
