"""The accuracy floor with repair (analysis/floor.py, algorithms/repair.py, docs/accuracy.md).

A planted sensitive node (tests/_structure_graphs.planted_model): ``MatMul_hot``'s weight holds
1000 in the row that reads a dead hidden unit, so float never shows it while each output column's
int8 grid (step ~8) rounds every ordinary weight to 0 (output cosine 0.0 at A8W8). Without repair the floor is reported broken; by default the node is
found, kept float and named in the warning, the summary, the plan and the CLI's output.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from _structure_graphs import pattern_data, pattern_model, planted_model
from onnxptq.analysis.floor import floor_for
from onnxptq.analysis.metrics import cosine_similarity
from onnxptq.api import quantize
from onnxptq.calibration import methods
from onnxptq.config.presets import resolve_config
from onnxptq.errors import AccuracyError

A8W8 = resolve_config("A8W8")


def _cosine(model: onnx.ModelProto, quantized: onnx.ModelProto) -> float:
    ref = ort.InferenceSession(model.SerializeToString())
    got = ort.InferenceSession(quantized.SerializeToString())
    return float(np.mean([cosine_similarity(ref.run(None, f)[0], got.run(None, f)[0]) for f in pattern_data(6, seed=21)]))


def test_repair_off_reports_the_broken_floor_beside_the_figures(caplog):
    model = planted_model()
    with caplog.at_level(logging.WARNING):
        result = quantize(model, A8W8.replace(repair=False), pattern_data(32))
    assert result.floor is not None and not result.floor.ok
    assert result.floor.samples == 8 and not result.floor.reused  # 32 samples: 8 held out, 24 calibrated
    assert result.calibration_samples == 24
    assert _cosine(model, result.model) < 0.5
    text = result.summary()
    assert text.splitlines()[1].strip() == "against float, mean per sample on 8 held-out samples:"
    assert "[accuracy floor BROKEN]" in text.splitlines()[2]  # on the very line that prints the PSNR
    assert "NOT within the floor" in text
    assert any("BROKEN" in r.getMessage() and "repair is off" in r.getMessage() for r in caplog.records)
    assert result.plan.to_json()["repair"]["note"].startswith("repair is off")


def test_default_repair_keeps_the_planted_node_float_and_says_so(caplog):
    model = planted_model(depth=10)
    with caplog.at_level(logging.WARNING):
        # The default config but for the 16-bit step (float repair is what this test pins; the step:
        # tests/test_repair_step_up.py); the time budget is widened, so a loaded machine cannot stop the search early.
        result = quantize(model, A8W8.replace(repair_budget=50.0, repair_step_up=False), pattern_data(32))
    assert result.floor.ok and _cosine(model, result.model) >= 0.98
    kept = list(result.repair["kept_float"])
    assert "MatMul_hot" in kept and len(kept) <= 2
    # Bisection, not node by node: fewer builds than the plan has nodes.
    assert result.repair["evaluations"] < result.repair["candidates"]
    warning = next(r.getMessage() for r in caplog.records if r.name.endswith("repair"))
    assert "MatMul_hot" in warning and "cosine 0.0000" in warning and "holds" in warning
    text = result.summary()
    assert "REPAIRED" in text and "MatMul_hot" in text and "before: out: cosine 0.0000" in text and ": holds" in text
    plan = result.plan.to_json()
    assert "MatMul_hot" in plan["kept_float"] and "accuracy floor" in plan["kept_float"]["MatMul_hot"]
    assert plan["repair"]["after"]["ok"] and not plan["repair"]["before"]["ok"]
    assert result.plan.skipped_nodes["MatMul_hot"].startswith("kept float by repair")


def test_strict_raises_and_writes_nothing(tmp_path):
    out = tmp_path / "q.onnx"
    with pytest.raises(AccuracyError, match="accuracy floor") as info:
        quantize(planted_model(), A8W8.replace(strict=True), pattern_data(32), output=out)
    assert not out.exists() and not list(tmp_path.iterdir())
    assert info.value.verdict is not None and info.value.verdict.broken == ["out"]


def test_a_held_floor_costs_one_held_out_evaluation():
    model = pattern_model("silu")
    result = quantize(model, "A8W8", pattern_data(12))
    assert result.floor.ok and result.repair is None and "repair" not in result.timings
    # 12 samples: a third (4) held out of calibration, judged on them, and said
    assert not result.floor.reused and result.floor.samples == 4 and "4 held-out samples" in result.summary()
    assert result.calibration_samples == 8


def test_small_data_is_split_and_only_two_feeds_are_reused():
    """12-23 feeds: the first third is held out (calibration never sees it); 1-11 feeds: reused, and said."""
    from onnxptq.pipeline.calibrate import split_holdout

    feeds = pattern_data(12)
    rest, held, reused = split_holdout(iter(feeds), 8)
    rest = list(rest)
    assert not reused and [id(f) for f in held] == [id(f) for f in feeds[::3]] and [id(f) for f in rest] == [id(f) for i, f in enumerate(feeds) if i % 3]
    rest, held, reused = split_holdout(iter(pattern_data(15)), 8)
    assert not reused and len(list(rest)) == 10 and len(held) == 5
    rest, held, reused = split_holdout(iter(feeds[:11]), 8)  # below MIN_SPLIT: judged on calibration feeds
    assert reused and len(list(rest)) == 11 and len(held) == 8
    result = quantize(pattern_model("silu"), "A8W8", pattern_data(4))
    assert result.floor.reused and "too few to hold out" in result.summary() and result.calibration_samples == 4


def test_floors_per_family():
    got = {p: (floor_for(resolve_config(p)).family) for p in ("BF16", "FP16", "A16W8", "BFP16", "MX9", "MXINT8", "A8W8",
                                                              "MXFP8_E4M3", "FP8_E4M3", "MX6", "MX4", "A8W4")}
    assert got == {"BF16": "16-bit", "FP16": "16-bit", "A16W8": "16-bit", "BFP16": "16-bit", "MX9": "16-bit", "MXINT8": "16-bit",
                   "A8W8": "8-bit", "MXFP8_E4M3": "8-bit", "FP8_E4M3": "8-bit", "MX6": "4/6-bit", "MX4": "4/6-bit", "A8W4": "4/6-bit"}
    floor = floor_for(A8W8.replace(floor_cosine=0.5))
    assert (floor.cosine, floor.top1) == (0.5, 0.95)


def test_a_collectors_range_warning_is_said_once(caplog):
    collector = methods.make_collector("minmax", name="t")
    with caplog.at_level(logging.WARNING):
        methods.compute_range(collector, "minmax")
        methods.compute_range(collector, "minmax")  # the range guard, then solve
    assert sum("no value was collected" in r.getMessage() for r in caplog.records) == 1


def test_cli_prints_the_summary_once_and_names_the_repair(tmp_path):
    model_path, data_path = tmp_path / "m.onnx", tmp_path / "d.npz"
    onnx.save(planted_model(), model_path)
    np.savez(data_path, x=np.concatenate([f["x"] for f in pattern_data(32)]))
    src = str(Path(__file__).resolve().parents[1] / "src")

    def cli(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "onnxptq", "quantize", str(model_path), "-o", str(tmp_path / "q.onnx"),
                               "--data", str(data_path), "--no-progress", "--plan", str(tmp_path / "plan.json"), *extra],
                              capture_output=True, text=True, env={"PYTHONPATH": src, "PATH": "/usr/bin:/bin"}, timeout=120)

    run = cli()
    assert run.returncode == 0, run.stderr
    both = run.stdout + run.stderr
    assert both.count("quantized ") == 1 and both.count("accuracy floor (") == 2  # the summary once; the warning once
    assert "REPAIRED" in run.stdout and "MatMul_hot" in run.stdout
    assert "MatMul_hot" in json.loads((tmp_path / "plan.json").read_text())["stepped_up"]  # A8W8: 16-bit step first
    run = cli("--no-repair-step-up")  # float, not 16-bit, for the responsible node
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert run.returncode == 0 and not plan["stepped_up"] and "MatMul_hot" in plan["repair"]["kept_float"], run.stdout
    run = cli("--no-repair")
    assert run.returncode == 0 and "BROKEN" in run.stdout and "REPAIRED" not in run.stdout
    run = cli("--strict")
    assert run.returncode == 2 and "accuracy floor" in run.stderr


def test_a_search_without_budget_keeps_everything_float_and_says_so():
    """repair_budget=0: no search; the floor still holds (every quantized node float) and the note says why."""
    result = quantize(planted_model(), A8W8.replace(repair_budget=0.0), pattern_data(32))
    assert result.floor.ok and len(result.repair["kept_float"]) == result.repair["candidates"]
    assert not result.repair["finished"] and "budget" in result.summary()
