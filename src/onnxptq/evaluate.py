"""Report: how far a quantized model's outputs are from the float model's, on held-out samples.

Honest figures are a product promise: every quantization reports, per graph output, the cosine
similarity, the L2 error (mean squared error) and the PSNR of the quantized outputs against the
float outputs on the same inputs.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
import onnx


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity of two flattened arrays (1.0 when both are all zero)."""
    a = np.asarray(a, dtype=np.float64).ravel()
    b = np.asarray(b, dtype=np.float64).ravel()
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    if na == 0 and nb == 0:
        return 1.0
    if na == 0 or nb == 0:
        return 0.0
    return float(np.dot(a, b) / (na * nb))


def mse(a: np.ndarray, b: np.ndarray) -> float:
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(np.mean((a - b) ** 2)) if a.size else 0.0


def psnr(reference: np.ndarray, test: np.ndarray) -> float:
    """Peak signal-to-noise ratio in dB, the peak being the reference's largest magnitude."""
    err = mse(reference, test)
    peak = float(np.max(np.abs(reference))) if np.size(reference) else 0.0
    if err == 0:
        return float("inf")
    if peak == 0:
        return float("-inf")
    return float(10.0 * np.log10(peak * peak / err))


def _session(model: onnx.ModelProto):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def compare_models(reference: onnx.ModelProto, candidate: onnx.ModelProto,
                   feeds: Iterable[dict[str, np.ndarray]], *, candidate_session=None) -> dict[str, dict[str, float]]:
    """Per graph output of ``reference``: mean cosine, mean L2 (MSE) and PSNR over ``feeds``."""
    ref_sess = _session(reference)
    cand_sess = candidate_session if candidate_session is not None else _session(candidate)
    names = [o.name for o in ref_sess.get_outputs()]
    sums: dict[str, dict[str, float]] = {n: {"cosine": 0.0, "l2": 0.0, "psnr": 0.0} for n in names}
    count = 0
    for feed in feeds:
        ref_out = ref_sess.run(names, feed)
        cand_out = cand_sess.run(names, feed)
        for name, r, c in zip(names, ref_out, cand_out):
            sums[name]["cosine"] += cosine(r, c)
            sums[name]["l2"] += mse(r, c)
            sums[name]["psnr"] += min(psnr(r, c), 200.0)
        count += 1
    if count == 0:
        return {}
    return {n: {k: v / count for k, v in s.items()} for n, s in sums.items()}
