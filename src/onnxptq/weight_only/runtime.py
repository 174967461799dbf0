"""onnxruntime sessions for weight-only models, with the accuracy level they run at.

onnxruntime 1.32 fuses blocked ``DequantizeLinear`` + ``MatMul`` into ``MatMulNBits`` and, by
default, runs it with int8-quantized activations (accuracy level 4). The session entry
``session.qdq_matmulnbits_accuracy_level = 1`` keeps float32 compute: then the only error is the
weights'. (For ``form="matmulnbits"`` the node's own ``accuracy_level`` attribute decides.)
"""

from __future__ import annotations

from typing import Any

from ..sessions import open_session

#: The onnxruntime session entry that sets the accuracy level of fused DQ + MatMul.
ACCURACY_KEY = "session.qdq_matmulnbits_accuracy_level"


def session(model: Any, *, accuracy_level: int | None = None, threads: int | None = None) -> Any:
    """A CPU session on ``model``; ``accuracy_level`` None leaves onnxruntime's default."""
    config = {} if accuracy_level is None else {ACCURACY_KEY: str(int(accuracy_level))}
    return open_session(model, threads=threads, config=config)
