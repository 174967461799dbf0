"""Graph outputs in a log domain (dB, nats), and the scale that takes them back to linear values.

Why the floor needs them: a cosine on dB values is blind to dB errors. A log-mel output sits at
roughly −80…+60 dB; an error of 4 dB on every loud bin (E4M3's step at |x| ≈ 64) leaves the cosine
of the dB values at 0.999, while every frame is off by far more than the 1 dB a user of a
spectrogram reads. In the linear domain the same error is a factor 2.5 on the bins that carry the
energy, and the cosine says so. So an output computed as ``k·ln(x) + c`` (through scalings by
constants, offsets, clips, maxima and data movement after a ``Log``) is judged on
``exp((y − max y_float) / k)``: the linear values up to a constant factor, which a cosine ignores.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import numpy_helper

__all__ = ["log_domain_outputs", "to_linear"]

#: ops that keep ``y = k·ln(x) + c`` in the same form with the same ``k`` (clips, offsets, max over
#: values, data movement)
_SAME_SCALE = frozenset("Clip Max Min Relu ReduceMax ReduceMin Reshape Transpose Squeeze Unsqueeze Flatten Identity Cast "
                        "Slice Gather Concat".split())


def _constants(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    values = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer if not t.external_data}
    for n in model.graph.node:
        if n.op_type == "Constant":
            for a in n.attribute:
                if a.name == "value":
                    values[n.output[0]] = numpy_helper.to_array(a.t)
    return values


def log_domain_outputs(model: onnx.ModelProto) -> dict[str, float]:
    """``{graph output: k}`` for outputs computed as ``k·ln(x) + c`` (module docstring)."""
    producer = {o: n for n in model.graph.node for o in n.output if o}
    consts = _constants(model)
    found: dict[str, float] = {}
    for out in model.graph.output:
        name, k = out.name, 1.0
        for _ in range(32):
            node = producer.get(name)
            if node is None:
                break
            if node.op_type == "Log":
                if math.isfinite(k) and k != 0:
                    found[out.name] = k
                break
            data = [i for i in node.input if i and i not in consts]
            scalars = [consts[i] for i in node.input if i in consts and consts[i].size == 1]
            if node.op_type in ("Mul", "Div") and len(data) == 1 and len(scalars) == 1 and node.input[0] == data[0]:
                value = float(scalars[0].reshape(-1)[0])
                k = k * value if node.op_type == "Mul" else k / value
            elif node.op_type == "Mul" and len(data) == 1 and len(scalars) == 1:
                k = k * float(scalars[0].reshape(-1)[0])
            elif node.op_type in ("Add", "Sub") and len(data) >= 1:
                if node.op_type == "Sub" and node.input[0] in consts:
                    k = -k  # c − y
                # else an offset, constant or computed from the same values (x − max x): same k
            elif node.op_type not in _SAME_SCALE:
                break
            if not data:
                break
            name = data[0]
    return found


def to_linear(reference: np.ndarray, values: np.ndarray, k: float) -> tuple[np.ndarray, np.ndarray]:
    """Both arrays back to linear values, ``exp(y / k − max(reference / k))`` (float64, bounded)."""
    zr = reference.astype(np.float64) / k
    zg = values.astype(np.float64) / k
    top = float(np.max(zr)) if zr.size else 0.0
    return np.exp(np.clip(zr - top, -700.0, 50.0)), np.exp(np.clip(zg - top, -700.0, 50.0))
