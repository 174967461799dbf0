"""The quantizer on the real PP-OCR models: task accuracy against float, validity in plain onnxruntime.

Data: text lines rendered with Pillow and DejaVu (testkit.ocr). Calibration uses 64 lines
(seed 1), evaluation 200 other lines (seed 3). Bounds (issue 3): A8W8 rec CER ≤ float + 0.02,
A16W8 ≤ float + 0.01, cls A8W8 within 1 point; the float formats' bounds are stated per preset.
"""

from __future__ import annotations

import dataclasses
import numpy as np
import onnx
import onnxruntime as ort
import pytest

from onnxptq import get_preset, quantize
from testkit import ocr, ocr_reference
from testkit.models import model_path

pytestmark = pytest.mark.slow

CALIB_LINES = 64
EVAL_LINES = 200
#: The config change of the cases that measure a preset's model itself, without the repair search.
NO_REPAIR = {"repair": False}


def _batches(images: np.ndarray, size: int = 8) -> list[dict[str, np.ndarray]]:
    return [{"x": images[i : i + size]} for i in range(0, len(images), size)]


def _plain_session(model: onnx.ModelProto) -> ort.InferenceSession:
    """A default onnxruntime CPU session: nothing registered, all graph optimizations on.

    One intra-op thread: the suite runs one test per core (``-n 2`` on 2 cores), where a second,
    spinning pool thread only takes CPU from the other worker (the float rec model over 96 lines:
    9.0 CPU s with the default pool, 6.3 with one thread, the same CER). The graph, its fusions and
    kernels are those of the default session."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module")
def rec():
    # Rendered lines and the float CER come from the disk cache shared with test_per_tensor_ppocr
    # (testkit.ocr_reference): the same data, computed once per machine instead of once per file.
    path = model_path("rec")
    return {"path": path, **ocr_reference.rec_reference(path, CALIB_LINES, 1, EVAL_LINES, 3)}


@pytest.fixture(scope="module")
def cls():
    path = model_path("cls")
    return {"path": path, **ocr_reference.cls_reference(path, CALIB_LINES, 1, EVAL_LINES, 3)}


def _rec_cer(rec, preset: str, **changes) -> tuple[float, object]:
    config = get_preset(preset)
    config = config.replace(calibration=dataclasses.replace(config.calibration, progress=False))
    if changes:
        config = config.replace(**changes)
    result = quantize(rec["path"], config, _batches(rec["calib"]))
    session = _plain_session(result.model)
    cer = ocr.rec_cer(session, rec["images"], rec["texts"], characters=rec["chars"])
    return cer, result


def test_a8w8_rec_within_002_cer_of_float(rec):
    # Without repair, as A16W8 below: the bound is on the A8W8 model itself. The floor's CTC reads
    # on 64 lines sit at its edge here (4 of 64 read differently: "could NOT confirm" or broken by the
    # CPU's kernels), and a repair would step half the nodes to 16-bit, while the CER holds either way.
    cer, result = _rec_cer(rec, "A8W8", **NO_REPAIR)
    print(f"rec A8W8 CER {cer:.4f} (float {rec['float']:.4f})")
    assert rec["float"] < 0.08
    assert cer <= rec["float"] + 0.02
    ops = {n.op_type for n in result.model.graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops
    # int8, or uint8 where this CPU's integer GEMM saturates (QuantConfig.saturation_guard)
    weights = [t for t in result.model.graph.initializer if t.data_type in (onnx.TensorProto.INT8, onnx.TensorProto.UINT8)]
    assert len(weights) >= 40, "Conv/MatMul weights are stored as 8-bit integers"


def test_a16w8_rec_within_001_cer_of_float(rec):
    # Without repair, as the block formats below: the accuracy floor breaks on rec's CTC reads while
    # the CER holds (0.0393 without repair, 0.0444 with), and the repair search was half of this test's
    # CPU (bench/RESULTS.md, "The suite's rec tests without the repair search"): the bound is on the
    # A16W8 model itself.
    cer, result = _rec_cer(rec, "A16W8", **NO_REPAIR)
    print(f"rec A16W8 CER {cer:.4f} (float {rec['float']:.4f})")
    assert cer <= rec["float"] + 0.01
    zero_points = [t for t in result.model.graph.initializer if t.name.endswith("_zero_point") and t.data_type == onnx.TensorProto.INT16]
    assert zero_points, "activations are int16"
    assert result.plan.repair["before"]["outputs"], "repair off: the floor still judged the A16W8 model delivered as is"


#: (preset, extra config changes, CER bound above float) for the float formats on rec.
#: BFP16, MX9 and MXINT8 are measured without repair: the accuracy floor judges them (its figures
#: are in ``result.metrics`` and the plan) but keeps nothing float, so the bound holds the format's
#: own model, which repair could otherwise mask by keeping the damaged nodes float. Their floor breaks
#: on these 64 lines' CTC reads, and the repair search that followed was half of each test's CPU
#: (bench/RESULTS.md, "The suite's rec tests without the repair search"). Repair on this model stays
#: covered by MXFP8_E4M3 below, which needs it for its bound, and repair itself by test_accuracy_floor.py.
FLOAT_FORMATS_REC = [
    ("BF16", {}, 0.005),
    ("BF16", {"bf16_qdq_to_cast": False}, 0.005),
    ("BFP16", NO_REPAIR, 0.01),
    ("MX9", NO_REPAIR, 0.01),
    ("MXINT8", NO_REPAIR, 0.02),
    ("MXFP8_E4M3", {}, 0.005),
]


def _changes_id(value) -> str:
    """Test ids that say which config change a case makes ("default" for none)."""
    if not isinstance(value, dict):
        return str(value)
    if not value:
        return "default"
    return "norepair" if value == NO_REPAIR else "qdq"


#: PP-OCRv4 rec loses much to 3-bit mantissas: MXFP8_E4M3 CER 0.604 on these 200 lines (float
#: 0.039) before FP-element MX biases stayed float and depthwise weights stopped blocking along
#: their length-1 axis (pipeline/plan/fp_blocks.py), 0.419 after, 0.394 with repair=False, 0.237 once only
#: dot-product operands are encoded and weights search their exponent (docs/formats.md "MXFP8
#: placement"); what is left is E4M3's rounding itself (docs/formats.md "MXFP8 on PP-OCRv4 rec"), which
#: the default accuracy floor repairs by keeping the sensitive nodes at higher precision: CER 0.041
#: (issue 27 item 5's bound, float + 0.005). The output must also still correlate with float: cosine ≥ 0.6.
MXFP8_REC_MIN_COSINE = 0.6


@pytest.mark.parametrize("preset,changes,bound", FLOAT_FORMATS_REC, ids=_changes_id)
def test_float_formats_rec(rec, preset, changes, bound):
    cer, result = _rec_cer(rec, preset, **changes)
    print(f"rec {preset} {changes} CER {cer:.4f} (float {rec['float']:.4f}) cosine {result.metrics} "
          f"repair kept {sorted(result.plan.repair.get('kept_float', {}))}")
    if preset == "MXFP8_E4M3":
        assert next(iter(result.metrics.values()))["cosine"] >= MXFP8_REC_MIN_COSINE
    assert cer <= rec["float"] + bound
    if changes == NO_REPAIR:
        assert result.plan.repair["before"]["outputs"], "repair off: the floor still judged the model delivered as is"
    ops = {(n.domain, n.op_type) for n in result.model.graph.node}
    if preset == "BF16" and not changes:
        assert ("", "Cast") in ops and not any(d == "onnxptq" for d, _ in ops)
    if changes.get("bf16_qdq_to_cast") is False:
        assert any(d == "onnxptq" for d, _ in ops), "Q/DQ form uses the embedded function"
    if preset in ("BFP16", "MX9"):
        assert any(op.startswith("BFPQuantizeDequantize") for _, op in ops)
    if preset.startswith("MX") and preset != "MX9":
        # The file holds MX functions exactly where the plan keeps MX tensors; a plan without any must
        # be repair's doing, said in its record (rec MXFP8_E4M3: every node stepped up to BF16, the
        # ladder's last rung, CER 0.037 where float is 0.039).
        planned = any(t.quant is not None and t.quant.format == "mx" for t in result.plan.tensors.values())
        assert any(op.startswith("MXQuantizeDequantize") for _, op in ops) == planned
        assert planned or (result.plan.repair or {}).get("stepped_up"), "no MX tensor and no repair saying why"


#: (preset, accuracy points allowed below float) on cls.
#: MXFP8_E4M3 keeps 3 mantissa bits: measured 3 points below float on these 200 lines.
CLS_PRESETS = [("A8W8", 1.0), ("A16W8", 1.0), ("BF16", 0.5), ("BFP16", 1.0), ("MX9", 1.0), ("MXINT8", 2.0), ("MXFP8_E4M3", 4.0)]


@pytest.mark.parametrize("preset,points", CLS_PRESETS)
def test_cls_presets(cls, preset, points):
    config = get_preset(preset)
    config = config.replace(calibration=dataclasses.replace(config.calibration, progress=False))
    result = quantize(cls["path"], config, _batches(cls["calib"]))
    acc = ocr.cls_accuracy(_plain_session(result.model), cls["images"], cls["labels"])
    print(f"cls {preset} accuracy {acc:.4f} (float {cls['float']:.4f})")
    assert acc >= cls["float"] - points / 100


@pytest.mark.parametrize("preset", ["U8S8", "U8U8", "S8S8", "S16S8", "U16S8"])
def test_every_integer_type_combination_loads_in_plain_onnxruntime(cls, preset):
    """Unsigned per-channel parameters on elementwise ops once made onnxruntime's CPU QDQ fusion
    emit QLinearAdd with vector scales, which it then refuses to load (U8U8 on both models)."""
    config = get_preset(preset)
    config = config.replace(calibration=dataclasses.replace(config.calibration, progress=False))
    result = quantize(cls["path"], config, _batches(cls["calib"][:16]), eval_samples=0)
    session = _plain_session(result.model)
    out = session.run(None, {"x": cls["images"][:8]})[0]
    assert np.isfinite(out).all()
    assert ocr.cls_accuracy(session, cls["images"], cls["labels"]) >= 0.8
