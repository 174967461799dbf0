"""The end of the pipeline in the documented order, with every step's time in the result.

save → report (README, DESIGN, docs/architecture.md): the model is on disk before the report that
describes it is written. ``build_model`` returns the time of its optional refine steps (bias
correction, finetuning) instead of writing it into the calibration it reads, so a search that builds
many candidates from one calibration does not change it, and the single build's times reach
``QuantizationResult.timings``.
"""

from __future__ import annotations

import copy

import onnxptq
from onnxptq.analysis import report_html
from onnxptq.graph import io
from onnxptq.pipeline.build import build_model
from onnxptq.pipeline.calibrate import calibrate_once

from conftest import small_cnn_feeds


def test_save_comes_before_the_report(tmp_path, small_cnn, monkeypatch) -> None:
    order: list[str] = []
    write = io.save_model, io.save_serialized, report_html.write_report

    def saving(save):  # either save: the model (io.save_model) or the bytes finish judged (io.save_serialized)
        def wrapped(*args, **kwargs):
            order.append("save")
            return save(*args, **kwargs)
        return wrapped

    def reporting(*args, **kwargs):
        order.append("report" if (tmp_path / "q.onnx").exists() else "report before the file")
        return write[2](*args, **kwargs)

    monkeypatch.setattr(io, "save_model", saving(write[0]))
    monkeypatch.setattr(io, "save_serialized", saving(write[1]))
    monkeypatch.setattr(report_html, "write_report", reporting)
    result = onnxptq.quantize(small_cnn, "A8W8", small_cnn_feeds(4), output=tmp_path / "q.onnx", eval_samples=2,
                              report_path=tmp_path / "r.html")
    assert order == ["save", "report"]
    assert result.output_path.exists() and (tmp_path / "r.html").exists()
    assert list(result.timings).index("emit") < list(result.timings).index("report")


def test_bias_correction_time_reaches_the_result_and_the_calibration_stays_as_it_was(small_cnn) -> None:
    config = onnxptq.get_preset("A8W8").replace(bias_correction=True)
    calibrated = calibrate_once(small_cnn, config, small_cnn_feeds(6), eval_samples=2)
    before = copy.deepcopy(calibrated.timings)
    built = build_model(calibrated, config)
    assert calibrated.timings == before
    assert set(built.timings) == {"bias correction"} and built.timings["bias correction"] > 0
    assert built.model is built[2] and built.plan.tensors

    result = onnxptq.quantize(small_cnn, config, small_cnn_feeds(6), eval_samples=2)
    assert result.timings["bias correction"] > 0
    assert "bias correction" in result.summary()
