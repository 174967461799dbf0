"""Plan: which tensor gets which format. A pure function of (prepared model, config).

The plan is the one place where "what is quantized, how" is decided. Later steps only execute it:
calibration measures exactly the activations the plan lists, the solver turns their statistics
into scales, and the emitter writes the nodes. The plan serialises to JSON so users can read it
(``onnxptq inspect``) and tests can assert on it without running anything.

One job a module: ``types`` (:class:`Plan`, :class:`TensorPlan` and their JSON), ``select`` (which
nodes a config quantizes), ``assign`` (:func:`make_plan`: each tensor's role, format and axis),
and ``rules`` (the post-rules over the whole first plan). The plan a model is delivered with is
this one after calibration's checks: :func:`onnxptq.pipeline.final_plan.final_plan` (coverage and
the range guard). The op tables are graph facts
(:mod:`onnxptq.graph.ops`), node naming a graph step (:mod:`onnxptq.graph.naming`).
"""

from .assign import make_plan
from .types import Plan, Role, TensorPlan

__all__ = ["Plan", "Role", "TensorPlan", "make_plan"]
