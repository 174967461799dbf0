"""Run two models on the same feeds and compare their first outputs (for tests).

Why one home: several tests build a float graph and its quantized twin and assert how close the
quantized first output stays, pooled over the feeds; each had its own copy of these lines.
"""

from __future__ import annotations

import numpy as np
import onnx


def pooled_output_cosine(model_a: onnx.ModelProto, model_b: onnx.ModelProto, feeds: list[dict[str, np.ndarray]]) -> float:
    """Cosine of the two models' first outputs, every feed's values concatenated (float64)."""
    import onnxruntime as ort

    a = ort.InferenceSession(model_a.SerializeToString(), providers=["CPUExecutionProvider"])
    b = ort.InferenceSession(model_b.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.concatenate([a.run(None, f)[0].ravel() for f in feeds]).astype(np.float64)
    y = np.concatenate([b.run(None, f)[0].ravel() for f in feeds]).astype(np.float64)
    return float(x @ y / (np.linalg.norm(x) * np.linalg.norm(y)))


def first_outputs(model: onnx.ModelProto, feeds: list[dict[str, np.ndarray]]) -> np.ndarray:
    """The model's first output on every feed, concatenated along the first axis (one thread)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return np.concatenate([session.run(None, f)[0] for f in feeds])


def preset_plan(model: onnx.ModelProto, preset: str):
    """The plan a preset makes for ``model`` after the pipeline's preparation (no calibration)."""
    import onnxptq
    from onnxptq.pipeline.plan import make_plan
    from onnxptq.pipeline.prepare import prepare_for_quantization

    config = onnxptq.get_preset(preset)
    return make_plan(prepare_for_quantization(model, config), config)
