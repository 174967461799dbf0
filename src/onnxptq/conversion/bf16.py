"""Whole-model conversion of float models to BF16, without calibration data.

Four layouts, named as the reference tool names them (``--format``):

``with_cast`` (default)
    The graph keeps computing in float32. Weights are saturated to the BF16 range and stored as
    BFLOAT16 initializers followed by ``Cast(to=FLOAT)`` (onnxruntime folds that Cast once at session
    start, so it costs nothing per run and the file is half the size). Activations pass through
    ``Cast(to=BFLOAT16) -> Cast(to=FLOAT)`` pairs: by default (``activations="compute_inputs"``)
    where Conv/MatMul/Gemm read them, i.e. the operands a BF16 matrix engine sees, at about float
    speed; with ``activations="all"`` after every op that is not already BF16-exact, the reference
    tool's layout (1.7-1.9x float on PP-OCR rec: onnxruntime's Cast is not cheap). Why not compute in bfloat16: onnxruntime's CPU
    provider has no bfloat16 kernel for MatMul, Conv, Add, Mul, Softmax, ... (probed below), so a
    "real" BF16 graph is float compute plus casts anyway, only with more of them.
``customqdq``
    The same rounding points, written as explicit quantize/dequantize pairs: functions
    ``onnxptq.BF16QuantizeLinear`` / ``onnxptq.BF16DequantizeLinear`` (scale 1, built from ``Div``,
    ``Cast``, ``Mul`` and embedded in the model), on weights as well as activations. The reference
    tool needs its own custom-op library here; ours runs on stock onnxruntime.
``simulate_bf16``
    Weights rounded to BF16 and stored as float32, one Cast pair after each graph input, no
    activation rounding: the cheapest model that sees BF16 weights and inputs.
``bf16``
    Tensors really are BFLOAT16. Nodes whose op has a bfloat16 kernel in onnxruntime CPU (probed by
    building a one-node model) run in bfloat16; every other node runs in float32 behind Cast nodes,
    so the result always loads and runs in onnxruntime. Graph inputs and outputs keep their types.

Before converting, the graph is prepared (Constant nodes lifted to initializers, constant folding,
duplicate-node elimination, merging of MatMuls that share an input, opset >= 13 because ``Cast`` to
bfloat16 needs it). Saturation follows the reference tool (spec §3.2): weight magnitudes are clipped
to [1.17549435e-38, 3.38953139e38] (zeros stay zero), so no weight becomes inf; activations are cast
with round-to-nearest-even and overflow to inf, as BF16 hardware does.

Tensors that steer shapes are never rounded: float values computed from ``Shape``/``Size`` and the
float coordinate inputs of ``Resize``/``Upsample``/``Range`` (rounding a scale of 1/3 to BF16 changes
the output size, not just its values).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..formats import floating
from ..formats.base import DOMAIN, DOMAIN_VERSION
from ..graph.opsets import is_onnx_domain, model_opset
from ..graph.walk import FreshNames, all_graphs, declared_elem_types, rename_uses, subgraphs
from ..onnx_ops import floating as floating_ops
from ..sessions import open_session

log = logging.getLogger(__name__)

FORMATS = ("with_cast", "customqdq", "simulate_bf16", "bf16")
#: Largest finite bfloat16 and smallest normal float32: the saturation bounds of spec §3.2.
BF16_MAX = np.float32(floating.BF16_MAX)
FLT_MIN = np.float32(floating.FLT_MIN)
#: ``Cast`` to BFLOAT16 exists from opset 13 on.
MIN_OPSET = 13

FLOAT = TensorProto.FLOAT
BFLOAT16 = TensorProto.BFLOAT16
FLOAT16 = TensorProto.FLOAT16

#: Ops whose float outputs are exactly representable in BF16 whenever their float inputs are:
#: they move, select or compare values without arithmetic. A Cast pair after them changes nothing,
#: so we leave it out (a pure latency saving).
BF16_CLOSED_OPS = frozenset(
    {
        "Identity", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Slice", "Gather",
        "GatherElements", "GatherND", "Concat", "Split", "Relu", "MaxPool", "Max", "Min", "Neg",
        "Abs", "Pad", "Tile", "Expand", "Clip", "ReduceMax", "ReduceMin", "GlobalMaxPool",
        "DepthToSpace", "SpaceToDepth", "Dropout", "Where", "Sign", "Ceil", "Floor", "Round",
        "ScatterElements", "ScatterND", "TopK", "Compress",
    }
)
#: (op_type, input index) of float inputs that steer shapes or coordinates; never rounded.
SHAPE_INPUTS = frozenset(
    {("Resize", 1), ("Resize", 2), ("Upsample", 1), ("Range", 0), ("Range", 1), ("Range", 2)}
)
#: Ops whose outputs describe shapes, not data: float values derived only from them stay float.
SHAPE_SOURCES = frozenset({"Shape", "Size"})
#: Ops that a BF16 device runs on its matrix engine: with ``activations="compute_inputs"`` only their
#: float activation inputs are rounded (weights always are).
COMPUTE_OPS = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm", "Einsum"})
#: Where activations are rounded in with_cast/customqdq: after every op ("all", the reference
#: tool's layout) or only where a matrix op reads them ("compute_inputs").
ACTIVATION_MODES = ("all", "compute_inputs")


# --------------------------------------------------------------------------------------------
# Numerics (the NumPy truth the ONNX graphs are tested against)
# --------------------------------------------------------------------------------------------


def saturate(weights: np.ndarray) -> np.ndarray:
    """Clip weight magnitudes to the BF16 range as the reference tool does (spec §3.2).

    Why: a float32 weight above the largest bf16 would round to inf and poison every output it
    touches. Zeros stay zero; non-zero magnitudes below FLT_MIN are raised to it; NaN stays NaN.
    """
    w = np.asarray(weights, dtype=np.float32)
    mag = np.abs(w)
    nonzero = mag != 0
    if not (np.any(mag[nonzero] > BF16_MAX) or np.any(mag[nonzero] < FLT_MIN)):
        return w
    clipped = np.where(nonzero, np.sign(w) * np.clip(mag, FLT_MIN, BF16_MAX), w)
    return clipped.astype(np.float32)


def to_bf16(values: np.ndarray) -> np.ndarray:
    """Round float32 to bfloat16, nearest-even, overflow to inf (ONNX ``Cast`` semantics), stored
    as bfloat16. The rounding is the BF16 format's reference (:func:`onnxptq.formats.floating.round_element`)."""
    return round_bf16(values).astype(ml_dtypes.bfloat16)


def round_bf16(values: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 -> float32: the value a BF16 tensor holds, as float32 (no saturation)."""
    return floating.round_element(values, "bf16", saturate=False)


# --------------------------------------------------------------------------------------------
# Graph preparation (switch-over point to the shared passes)
# --------------------------------------------------------------------------------------------


def prepare_graph(model: onnx.ModelProto, *, optimize: bool = True, merge_matmuls: bool = True) -> onnx.ModelProto:
    """Run the shared preparation passes and raise the opset to at least :data:`MIN_OPSET`.

    The passes live in :mod:`onnxptq.graph.passes`, run by :func:`onnxptq.pipeline.prepare.prepare` (Constant lifting, constant folding, BN folding,
    CSE, MatMul merge). ``optimize=False`` keeps the graph as it is apart from the opset and the
    lifting of Constant weights, which the conversion needs to find them.
    """
    from ..pipeline.prepare import prepare

    opset = max(model_opset(model), MIN_OPSET)
    if not optimize:
        return prepare(
            model, opset=opset, eliminate_identity=False, fold_constants=False, fold_batchnorm=False,
            merge_matmuls=False, cse=False,
        )
    return prepare(model, opset=opset, merge_matmuls=merge_matmuls)


# --------------------------------------------------------------------------------------------
# Graph analysis
# --------------------------------------------------------------------------------------------


def _elem_types(model: onnx.ModelProto) -> dict[str, int]:
    """Element type of every named tensor in every graph, from ONNX type inference."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception as exc:  # a model the inference cannot handle still converts where types are declared
        log.warning("type inference failed (%s); using declared types only", exc)
        inferred = model
    return declared_elem_types(inferred.graph)


def _shape_derived(graph: onnx.GraphProto, inherited: set[str], initializers: set[str]) -> set[str]:
    """Names whose values come only from shapes (``Shape``/``Size``) and constants.

    A float computed from a shape (say a length divided by 4) must keep every digit: BF16 holds
    integers exactly only up to 256.
    """
    derived = set(inherited)
    for node in graph.node:
        inputs = [i for i in node.input if i]
        if node.op_type in SHAPE_SOURCES:
            derived.update(node.output)
        elif inputs and any(i in derived for i in inputs) and all(
            i in derived or i in initializers for i in inputs
        ):
            derived.update(node.output)
        for sub in subgraphs(node):
            derived |= _shape_derived(sub, derived, initializers)
    return derived


def _uses(graph: onnx.GraphProto) -> dict[str, list[tuple[onnx.NodeProto, int]]]:
    """Consumers of every name, subgraph references (implicit inputs) included."""
    uses: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for g in all_graphs(graph):
        for node in g.node:
            for idx, name in enumerate(node.input):
                if name:
                    uses.setdefault(name, []).append((node, idx))
    return uses


@dataclass
class _Context:
    """What every graph of one conversion shares."""

    model: onnx.ModelProto
    types: dict[str, int]
    shape_derived: set[str]
    excluded_weights: set[str]
    names: FreshNames
    fmt: str
    target: int = BFLOAT16
    activations: str = "all"
    stats: dict[str, int] = field(default_factory=lambda: {"weights": 0, "rounding_points": 0, "float_islands": 0})

    def is_float(self, name: str) -> bool:
        return self.types.get(name) == FLOAT and name not in self.shape_derived


def _analyse(model: onnx.ModelProto, fmt: str, target: int = BFLOAT16) -> _Context:
    types = _elem_types(model)
    inits = {i.name for g in all_graphs(model.graph) for i in g.initializer}
    derived = _shape_derived(model.graph, set(), inits)
    uses = _uses(model.graph)
    excluded = {
        name
        for name in inits
        if any((node.op_type, idx) in SHAPE_INPUTS for node, idx in uses.get(name, []))
    }
    return _Context(model, types, derived, excluded, FreshNames(model), fmt, target)


# --------------------------------------------------------------------------------------------
# Rounding points: with_cast, customqdq, simulate_bf16
# --------------------------------------------------------------------------------------------


def _rounding_nodes(ctx: _Context, src: str, dst: str, scale_name: str) -> list[onnx.NodeProto]:
    """Nodes that write round_bf16(``src``) to ``dst`` (float32), in the layout of ``ctx.fmt``: the
    BF16 form of :mod:`onnxptq.onnx_ops.floating` (a Cast pair, or its Q/DQ function pair)."""
    mid = ctx.names(f"{dst}_bf16")
    ctx.stats["rounding_points"] += 1
    if ctx.fmt == "customqdq":
        return floating_ops.bf16_qdq_nodes(src, mid, dst, scale_name, names=(ctx.names(f"{dst}_QuantizeLinear"), ctx.names(f"{dst}_DequantizeLinear")))
    return floating_ops.cast_pair(src, mid, dst, BFLOAT16, names=(ctx.names(f"{dst}_cast_bf16"), ctx.names(f"{dst}_cast_fp32")))


def _convert_weights_rounded(ctx: _Context, graph: onnx.GraphProto, scale_name: str) -> list[onnx.NodeProto]:
    """Saturate every float weight of ``graph``; return the nodes that must precede its consumers."""
    graph_inputs = {i.name for i in graph.input}
    head: list[onnx.NodeProto] = []
    for init in graph.initializer:
        if init.data_type != FLOAT or init.name in ctx.excluded_weights or init.name in graph_inputs:
            continue
        values = saturate(numpy_helper.to_array(init))
        ctx.stats["weights"] += 1
        if ctx.fmt == "simulate_bf16":
            init.CopyFrom(numpy_helper.from_array(round_bf16(values), init.name))
        elif ctx.fmt == "with_cast":
            stored = ctx.names(f"{init.name}_bf16")
            head.append(helper.make_node("Cast", [stored], [init.name], name=ctx.names(f"{init.name}_cast"), to=FLOAT))
            init.CopyFrom(numpy_helper.from_array(to_bf16(values), stored))
        else:  # customqdq: float weight + explicit Q/DQ, as the reference tool's layout
            original, stored = init.name, ctx.names(f"{init.name}_float")
            init.CopyFrom(numpy_helper.from_array(values, stored))
            head.extend(_rounding_nodes(ctx, stored, original, scale_name))
    return head


def _insert_rounding(ctx: _Context, graph: onnx.GraphProto, exact: set[str], scale_name: str, top: bool) -> None:
    """Add rounding points to ``graph`` (recursively) for with_cast / customqdq / simulate_bf16."""
    head = _convert_weights_rounded(ctx, graph, scale_name)
    weights = {i.name for i in graph.initializer if i.data_type == FLOAT} | {n.output[0] for n in head}
    carried = {i.name for i in graph.input} if not top and ctx.activations == "all" else set()
    exact = set(exact) | weights | carried
    nodes: list[onnx.NodeProto] = list(head)
    if top:
        for inp in graph.input:
            if not ctx.is_float(inp.name) or inp.name in weights:
                continue
            rounded = ctx.names(f"{inp.name}_bf16_rounded")
            rename_uses(graph, inp.name, rounded)
            nodes.extend(_rounding_nodes(ctx, inp.name, rounded, scale_name))
            exact.add(rounded)
    rounded_for_compute: dict[str, str] = {}
    for node in list(graph.node):
        for sub in subgraphs(node):
            _insert_rounding(ctx, sub, exact, scale_name, top=False)
        if ctx.fmt == "simulate_bf16":
            nodes.append(node)
            continue
        if ctx.activations == "compute_inputs":
            if node.op_type in COMPUTE_OPS and is_onnx_domain(node.domain):
                for idx, name in enumerate(node.input):
                    if not name or name in exact or not ctx.is_float(name):
                        continue
                    if name not in rounded_for_compute:
                        rounded_for_compute[name] = ctx.names(f"{name}_bf16_rounded")
                        nodes.extend(_rounding_nodes(ctx, name, rounded_for_compute[name], scale_name))
                    node.input[idx] = rounded_for_compute[name]
            nodes.append(node)
            continue
        nodes.append(node)
        float_inputs = [i for i in node.input if i and ctx.types.get(i) in (FLOAT, None)]
        closed = node.op_type in BF16_CLOSED_OPS and all(i in exact for i in float_inputs)
        for idx, out in enumerate(node.output):
            if not out or not ctx.is_float(out):
                continue
            if not closed:
                produced = ctx.names(f"{out}_fp32")
                node.output[idx] = produced
                nodes.extend(_rounding_nodes(ctx, produced, out, scale_name))
            exact.add(out)
    del graph.node[:]
    graph.node.extend(nodes)


# --------------------------------------------------------------------------------------------
# bf16: real bfloat16 tensors, float islands where onnxruntime has no kernel
# --------------------------------------------------------------------------------------------

_PROBE_CACHE: dict[tuple, bool] = {}


def has_cpu_kernel(node: onnx.NodeProto, input_types: list[int | None], output_types: list[int], opsets: dict[str, int]) -> bool:
    """True when onnxruntime's CPU provider accepts ``node`` with these element types.

    Asked of onnxruntime itself by building a one-node model: the kernel tables change between
    releases, and a hard-coded list would go stale silently.
    """
    key = (node.domain, node.op_type, opsets.get(node.domain, 0), tuple(input_types), tuple(output_types))
    if key in _PROBE_CACHE:
        return _PROBE_CACHE[key]
    ok = False
    if all(t is not None for t in input_types):
        inputs, in_names = [], []
        for k, (name, t) in enumerate(zip(node.input, input_types)):
            if not name:
                in_names.append("")
                continue
            in_names.append(f"i{k}")
            inputs.append(helper.make_tensor_value_info(f"i{k}", t, None))
        outs = [f"o{k}" if o else "" for k, o in enumerate(node.output)]
        probe = helper.make_node(node.op_type, in_names, outs, domain=node.domain)
        probe.attribute.extend(node.attribute)
        graph = helper.make_graph(
            [probe], "probe", inputs,
            [helper.make_tensor_value_info(o, t, None) for o, t in zip(outs, output_types) if o],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()])
        model.ir_version = 8
        try:
            open_session(model, optimization="none", log_severity=4)
            ok = True
        except Exception:
            ok = False
    _PROBE_CACHE[key] = ok
    return ok


def _make_island(
    ctx: _Context, node: onnx.NodeProto, nodes: list[onnx.NodeProto], low: set[str], widened: dict[str, str], float_outs: list[str]
) -> None:
    """Append ``node`` to run in float32: Casts widen its low-precision inputs and narrow its outputs."""
    ctx.stats["float_islands"] += 1
    for idx, name in enumerate(node.input):
        if name in low:
            if name not in widened:
                widened[name] = ctx.names(f"{name}_fp32")
                nodes.append(helper.make_node("Cast", [name], [widened[name]], name=widened[name], to=FLOAT))
            node.input[idx] = widened[name]
    nodes.append(node)
    for idx, out in enumerate(node.output):
        if out in float_outs:
            produced = ctx.names(f"{out}_fp32")
            node.output[idx] = produced
            nodes.append(helper.make_node("Cast", [produced], [out], name=ctx.names(f"{out}_cast"), to=ctx.target))
            low.add(out)


def _retype_bf16(ctx: _Context, graph: onnx.GraphProto, low: set[str], top: bool, opsets: dict[str, int]) -> None:
    """Convert ``graph`` (recursively) to real ``ctx.target`` tensors with float islands."""
    T = ctx.target
    for init in graph.initializer:
        if init.data_type == FLOAT and init.name not in ctx.excluded_weights:
            values = saturate(numpy_helper.to_array(init))
            if T == BFLOAT16:
                lowp = to_bf16(values)
            else:  # float16 saturates at its own largest finite value
                lowp = np.clip(values, -65504.0, 65504.0).astype(np.float16)
            init.CopyFrom(numpy_helper.from_array(lowp, init.name))
            low.add(init.name)
            ctx.stats["weights"] += 1
    nodes: list[onnx.NodeProto] = []
    widened: dict[str, str] = {}
    if top:
        for inp in graph.input:
            if ctx.is_float(inp.name) and inp.name not in low:
                cast = ctx.names(f"{inp.name}_cast")
                rename_uses(graph, inp.name, cast)
                nodes.append(helper.make_node("Cast", [inp.name], [cast], name=cast, to=T))
                low.add(cast)
    else:  # subgraph inputs (loop-carried values, iteration state) follow the outer types
        for inp in graph.input:
            if ctx.is_float(inp.name):
                inp.type.tensor_type.elem_type = T
                low.add(inp.name)

    def typed(name: str) -> int | None:
        return T if name in low else ctx.types.get(name)

    for node in list(graph.node):
        float_outs = [o for o in node.output if o and ctx.is_float(o)]
        if any(True for _ in subgraphs(node)):
            # onnxruntime's If/Loop/Scan kernels take no bfloat16 state, so the node is a float
            # island: float in and out, its bodies bf16 inside with Casts at their own borders.
            for sub in subgraphs(node):
                _retype_bf16(ctx, sub, low, top=True, opsets=opsets)
            _make_island(ctx, node, nodes, low, widened, float_outs)
            continue
        if node.op_type == "Cast" and is_onnx_domain(node.domain):
            to = next(a for a in node.attribute if a.name == "to")
            if to.i == FLOAT and float_outs:
                to.i = T
                low.update(float_outs)
            nodes.append(node)
            continue
        touches = any(i in low for i in node.input) or float_outs
        if not touches:
            nodes.append(node)
            continue
        in_types = [typed(i) if i else 0 for i in node.input]
        out_types = [T if o in float_outs else ctx.types.get(o, FLOAT) for o in node.output]
        if has_cpu_kernel(node, in_types, out_types, opsets):
            nodes.append(node)
            low.update(float_outs)
            continue
        _make_island(ctx, node, nodes, low, widened, float_outs)
    del graph.node[:]
    graph.node.extend(nodes)
    if top:
        tail = []
        for out in graph.output:
            if out.name in low:
                lowp = ctx.names(f"{out.name}_cast")
                for n in graph.node:
                    for idx, o in enumerate(n.output):
                        if o == out.name:
                            n.output[idx] = lowp
                rename_uses(graph, out.name, lowp)
                tail.append(helper.make_node("Cast", [lowp], [out.name], name=ctx.names(f"{out.name}_cast_back"), to=FLOAT))
        graph.node.extend(tail)
    else:
        for out in graph.output:
            if out.name in low:
                out.type.tensor_type.elem_type = T
    # Inferred types of renamed/retyped tensors are stale; onnxruntime infers them again.
    del graph.value_info[:]


# --------------------------------------------------------------------------------------------
# Entry points
# --------------------------------------------------------------------------------------------


def convert_float_to_bf16(
    model: onnx.ModelProto,
    fmt: str = "with_cast",
    *,
    optimize: bool = True,
    merge_matmuls: bool = True,
    activations: str = "compute_inputs",
    target: int = BFLOAT16,
) -> onnx.ModelProto:
    """Convert a float32 model to one of the BF16 layouts (see the module docstring).

    ``target`` FLOAT16 with ``fmt="bf16"`` gives a real float16 model by the same machinery (used to
    make fp16 models for tests and by ``convert_fp16_to_bf16``'s round trips).
    Returns a new model; the argument is not modified.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown --format {fmt!r}; expected one of {', '.join(FORMATS)}")
    if target != BFLOAT16 and fmt != "bf16":
        raise ValueError("a float16 target is only available with format 'bf16' (real low-precision tensors)")
    work = onnx.ModelProto()
    work.CopyFrom(model)
    _check_float_model(work)
    work = prepare_graph(work, optimize=optimize, merge_matmuls=merge_matmuls)
    if activations not in ACTIVATION_MODES:
        raise ValueError(f"unknown activations mode {activations!r}; expected one of {', '.join(ACTIVATION_MODES)}")
    ctx = _analyse(work, fmt, target)
    ctx.activations = activations
    opsets = {o.domain or "": o.version for o in work.opset_import}
    if fmt == "bf16":
        _retype_bf16(ctx, work.graph, set(), top=True, opsets=opsets)
    else:
        scale_name = ""
        if fmt == "customqdq":
            scale_name = ctx.names("bf16_qdq_scale")
            work.graph.initializer.append(numpy_helper.from_array(np.array(1.0, np.float32), scale_name))
            work.functions.extend(floating_ops.bf16_qdq_functions(opsets.get("", MIN_OPSET)))
            work.opset_import.append(helper.make_opsetid(DOMAIN, DOMAIN_VERSION))
            ctx.excluded_weights.add(scale_name)  # the Q/DQ scale is not a weight to round
        _insert_rounding(ctx, work.graph, set(), scale_name, top=True)
        for g in all_graphs(work.graph):
            del g.value_info[:]
    log.info(
        "bf16 conversion (%s): %d weights, %d rounding points, %d float islands",
        fmt, ctx.stats["weights"], ctx.stats["rounding_points"], ctx.stats["float_islands"],
    )
    return work


def _check_float_model(model: onnx.ModelProto) -> None:
    try:
        onnx.checker.check_model(model, full_check=False)
    except onnx.checker.ValidationError as exc:
        raise ValueError(f"input model does not pass the ONNX checker: {exc}") from exc
    types = [i.type.tensor_type.elem_type for i in model.graph.input]
    weights = [i.data_type for i in model.graph.initializer]
    if FLOAT not in types + weights and not any(n.op_type == "Constant" for n in model.graph.node):
        raise ValueError("model has no float32 inputs or weights: nothing to convert to bf16")


