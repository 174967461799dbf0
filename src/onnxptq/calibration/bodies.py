"""Calibrating tensors that live inside If/Loop/Scan bodies.

onnxruntime fetches only main-graph values, and a body tensor exists only while its body runs.
:func:`expose` rewrites a copy of the model so that each requested body tensor leaves its body as
an extra output, level by level, up to the main graph:

* **If** branch: the tensor becomes an extra output of its branch and of the If node; the other
  branch gets an *empty* tensor of the same type and rank in that position, so a run that takes
  the other branch returns an empty array, which the runner skips. A branch the calibration data
  never takes thus ends with no statistics (never invented ones), and the pipeline leaves it float.
* **Loop** / **Scan** body: the tensor becomes an extra *scan output*, which onnxruntime stacks over
  the iterations on a new leading axis; the runner folds those axes into the sample axis, so the
  statistics cover every iteration.

A tensor of an If branch inside a Loop/Scan body cannot leave that way (an iteration taking the
other branch would stack an empty tensor with full ones, which onnxruntime rejects): it is
reported in :attr:`Exposed.unreachable` with the reason, and left to the caller (left float).
So is a Loop body tensor whose shape changes from one iteration to the next: a loop-carried value
that a Concat of itself and more grows each step, and everything computed from it (a greedy
decoder's accumulated logits and tokens, as a scripted PyTorch loop exports them: g2p_en's
``predict``), which onnxruntime refuses to stack ("Inconsistent shape in loop output").
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

import onnx
from onnx import helper

from ..graph.walk import Scope, ScopeIndex

log = logging.getLogger(__name__)

__all__ = ["Exposed", "expose"]

_OUTER = "__onnxptq_outer"


@dataclass
class Exposed:
    """A copy of the model whose main graph outputs the requested body tensors."""

    model: onnx.ModelProto
    #: body tensor -> the main-graph output that carries it
    outer: dict[str, str] = field(default_factory=dict)
    #: body tensor -> leading iteration axes the Loop/Scan bodies on its way stacked in front
    stacked: dict[str, int] = field(default_factory=dict)
    #: body tensor -> why it could not be exposed
    unreachable: dict[str, str] = field(default_factory=dict)


def _type_of(scope: Scope, name: str) -> tuple[int, int | None]:
    """(element type, rank or None) of ``name`` as its graph's value_info / outputs declare it."""
    g = scope.graph
    for vi in list(g.value_info) + list(g.output) + list(g.input):
        if vi.name == name and vi.type.HasField("tensor_type"):
            tt = vi.type.tensor_type
            return tt.elem_type, (len(tt.shape.dim) if tt.HasField("shape") else None)
    for init in g.initializer:
        if init.name == name:
            return init.data_type, len(init.dims)
    return onnx.TensorProto.UNDEFINED, None


def _sibling(scope: Scope) -> onnx.GraphProto:
    """The other branch of the If owning ``scope``."""
    other = "else_branch" if scope.attribute == "then_branch" else "then_branch"
    for attr in scope.owner.attribute:  # type: ignore[union-attr]
        if attr.name == other:
            return attr.g
    raise ValueError(f"If node {scope.owner.name!r} has no {other}")  # type: ignore[union-attr]


def _append_output(graph: onnx.GraphProto, name: str, elem_type: int) -> None:
    vi = onnx.ValueInfoProto(name=name)
    if elem_type != onnx.TensorProto.UNDEFINED:
        vi.type.tensor_type.elem_type = elem_type
    graph.output.append(vi)


#: ops that pass a value on with its shape (the accumulation's update and its carried value are met through them)
_SAME_SHAPE = frozenset({"Identity", "Cast"})


def _through(tensor: str, producer: dict[str, onnx.NodeProto]) -> str:
    """``tensor`` walked up through :data:`_SAME_SHAPE` ops to the first tensor another op made (or a body input)."""
    for _ in range(8):
        node = producer.get(tensor)
        if node is None or node.op_type not in _SAME_SHAPE or not node.input:
            return tensor
        tensor = node.input[0]
    return tensor


def _iteration_shaped(body: onnx.GraphProto) -> dict[str, str]:
    """Tensors of a Loop body whose shape changes from one iteration to the next, each with why: a loop-carried value
    whose update is a ``Concat`` of the value itself (through Identity/Cast) and more (an accumulation: a greedy
    decoder's tokens or logits), and every tensor computed from such a value (conservatively: a Gather of its last row
    has a fixed shape, but is left with it). A Concat of a *slice* of the value (a sliding window: its shape stays)
    is no accumulation."""
    readers: dict[str, list[onnx.NodeProto]] = {}
    producer: dict[str, onnx.NodeProto] = {}
    for node in body.node:
        for i in node.input:
            readers.setdefault(i, []).append(node)
        for o in node.output:
            producer[o] = node
    states = [i.name for i in body.input[2:]]
    updates = [o.name for o in body.output[1:1 + len(states)]]
    shaped: dict[str, str] = {}
    for state, update in zip(states, updates):
        grower = producer.get(_through(update, producer))
        if grower is None or grower.op_type != "Concat" or state not in {_through(i, producer) for i in grower.input}:
            continue
        why = (f"its shape changes from one iteration to the next (computed from the loop-carried {state!r}, which "
               f"Concat {grower.name!r} grows each step): its values cannot be stacked over the iterations")
        derived, stack = {state}, [state]
        while stack:
            for node in readers.get(stack.pop(), ()):
                for o in node.output:
                    if o and o not in derived:
                        derived.add(o)
                        stack.append(o)
        for name in derived:
            shaped.setdefault(name, why)
    return shaped


def expose(model: onnx.ModelProto, names: Iterable[str]) -> Exposed:
    """A copy of ``model`` whose main graph also outputs each body tensor in ``names``.

    Names that are main-graph tensors are ignored (the runner reads them directly); names found
    nowhere raise KeyError.
    """
    aug = onnx.ModelProto()
    aug.CopyFrom(model)
    index = ScopeIndex(aug)
    result = Exposed(aug)
    taken = set(index.home)
    counter = 0
    shaped: dict[int, dict[str, str]] = {}
    for name in names:
        scope = index.home.get(name)
        if scope is None:
            raise KeyError(f"tensor {name!r} is not in the model (no graph or body defines it)")
        if scope.is_main:
            continue
        chain = [scope, *[s for s in scope.ancestors() if not s.is_main]]
        blocked = next((s for s in chain if s.owner.op_type == "If" and s.parent is not None and s.parent.inside_loop()), None)
        if blocked is not None:
            result.unreachable[name] = (f"inside {blocked.label}, itself inside a Loop/Scan body: its value cannot be "
                                        "stacked over iterations that take the other branch")
            continue
        unknown = next((s for s in chain if s.owner.op_type not in ("If", "Loop", "Scan")), None)
        if unknown is not None:
            result.unreachable[name] = f"inside {unknown.label} (only If, Loop and Scan bodies can pass values out)"
            continue
        if scope.owner.op_type == "Loop":
            varying = shaped.setdefault(id(scope), _iteration_shaped(scope.graph))
            if name in varying:
                result.unreachable[name] = f"inside {scope.label}, {varying[name]}"
                continue
        elem_type, rank = _type_of(scope, name)
        current, stacked = name, 0
        for body in chain:
            owner = body.owner
            assert owner is not None
            if current in {o.name for o in body.graph.output} | {i.name for i in body.graph.input}:
                # Already an output (a branch result, a loop-carried value) or a body input: a copy
                # under a new name leaves, so no name repeats among the outputs, a Loop stacks
                # every step, and onnxruntime's Scan (which fails on an input passed straight
                # through as a scan output) gets a produced value.
                counter += 1
                copy = f"{name}{_OUTER}_copy{counter}"
                body.graph.node.append(helper.make_node("Identity", [current], [copy], name=copy))
                current = copy
            _append_output(body.graph, current, elem_type)
            if owner.op_type == "If":
                sibling = _sibling(body)
                counter += 1
                empty = f"{name}{_OUTER}_empty{counter}"
                dims = [0] * (rank if rank is not None else 1)
                sibling.node.append(helper.make_node(
                    "Constant", [], [empty], name=empty,
                    value=helper.make_tensor(empty + "_value", elem_type or onnx.TensorProto.FLOAT, dims, [])))
                _append_output(sibling, empty, elem_type)
            else:
                stacked += 1
                if owner.op_type == "Scan":
                    for attr in owner.attribute:
                        if attr.name in ("scan_output_axes", "scan_output_directions"):
                            attr.ints.append(0)
            counter += 1
            outer = f"{name}{_OUTER}{counter}"
            while outer in taken:
                counter += 1
                outer = f"{name}{_OUTER}{counter}"
            taken.add(outer)
            owner.output.append(outer)
            current = outer
        _append_output(aug.graph, current, elem_type)
        result.outer[name] = current
        result.stacked[name] = stacked
    if result.outer:
        log.debug("calibration: %d body tensors passed out to the main graph", len(result.outer))
    return result
