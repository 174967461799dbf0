"""The plan rules that, once every tensor has its format, keep some of them float by structure.

Why one module: each rule lives in its own module with its reasons (peak_nms.py, zero_guards.py,
gain_vectors.py, bias_epilogues.py), and ``assign.make_plan`` calls them through this one function,
so a new rule is one line here, not another import and clause in the planner (the layering test
holds assign.py under 350 lines). Each rule drops its tensors from ``tensors`` itself and returns
``{tensor: reason}`` for ``Plan.float_tensors``; they run in this order, each on what the one
before left.
"""

from __future__ import annotations

from ...config.schema import QuantConfig
from .. import runtime
from .bias_epilogues import bias_epilogue_float
from .fed_back_outputs import fed_back_outputs_float
from .float_dot_readers import float_dot_readers
from .gain_vectors import coarse_gain_vectors
from .peak_nms import peak_nms_float
from .recurrent_inputs import recurrent_inputs_float
from .recurrent_weights import recurrent_weights
from .select import _Graph
from .types import TensorPlan
from .zero_guards import zero_guard_float

__all__ = ["late_float_rules"]


def late_float_rules(tensors: dict[str, TensorPlan], g: _Graph, config: QuantConfig) -> dict[str, str]:
    """Apply the late float rules to ``tensors`` in place; return every ``{tensor: reason}`` they kept float."""
    why = {**peak_nms_float(tensors, g), **zero_guard_float(tensors, g), **coarse_gain_vectors(tensors, g)}
    why.update(fed_back_outputs_float(tensors, g))
    why.update(recurrent_inputs_float(tensors, g))
    why.update(recurrent_weights(tensors, g, config))
    if runtime.is_cpu(config):  # integer-only NPU hardware cannot hand a float product to its bias Add
        why.update(bias_epilogue_float(tensors, g))
    why.update(float_dot_readers(tensors, g))  # last: it reads what the rules above left planned
    return why
