"""Node selection: which nodes a config quantizes and why the others stay float.

The op-type, name and exclusion rules (:func:`_skip_reason`), the CPU target's rules
(:func:`_cpu_skip_reason`, :func:`_drop_isolated_cpu_nodes`: Q/DQ only where onnxruntime has an
integer kernel that pays for it), and the read-only graph index (:class:`_Graph`) the planner walks.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Iterable

import numpy as np
import onnx

from ...config.schema import QuantConfig, TensorQuant
from ...graph.external import tensor_values
from ...graph.opsets import is_onnx_domain
from ...graph.ops import DEFAULT_OP_TYPES, FLOAT_TYPES, FUSIBLE_ACTIVATIONS, FUSIBLE_PRODUCERS, PASS_THROUGH, RECURRENT
from ...graph.walk import ScopeIndex, downstream_nodes
from .. import runtime

class _Graph:
    """Read-only indexes over a model's graphs: the main graph, and with ``subgraphs`` every
    If/Loop/Scan body too (tensor names are unique across a model's scopes, so one index serves
    all; a body reading an outer tensor is one more consumer of it)."""

    def __init__(self, model: onnx.ModelProto, subgraphs: bool = True) -> None:
        index = ScopeIndex(model)
        scopes = index.scopes if subgraphs else [index.main]
        graphs = [s.graph for s in scopes]
        self.nodes = list(index.nodes()) if subgraphs else list(model.graph.node)
        #: names of the nodes a Loop or Scan runs once per iteration (in its body, at any depth)
        self.iterated: set[str] = {n.name for s in scopes if _iterated(s) for n in s.nodes}
        self.initializers = {t.name: t for g in graphs for t in g.initializer}
        self.inputs = [i.name for i in model.graph.input if i.name not in self.initializers]
        #: outputs of the graph that produces them (a body output is renamed in its own body)
        self.outputs = {o.name for g in graphs for o in g.output}
        self.producer: dict[str, onnx.NodeProto] = {}
        self.consumers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
        for node in self.nodes:
            for out in node.output:
                if out:
                    self.producer[out] = node
            for name in node.input:
                if name:
                    self.consumers[name].append(node)
        #: tensors a Loop/If/Scan body reads from an enclosing scope (no node input of the scope that
        #: owns them: onnxruntime's node sees them as implicit inputs only)
        self.outer_read: set[str] = set()
        for s in scopes[1:]:
            own = {o for n in s.nodes for o in n.output} | {i.name for i in s.graph.input} | {t.name for t in s.graph.initializer}
            self.outer_read.update(i for n in s.nodes for i in n.input if i and i not in own)
        infos = [vi for g in graphs for vi in list(g.value_info) + list(g.input) + list(g.output)]
        self._at_load: set[str] | None = None  # runs_at_load's tensors, made on first use
        self.elem_type: dict[str, int] = {}
        self.rank: dict[str, int] = {}
        #: known axis lengths (None where symbolic or unknown), for tensors with a known rank
        self.dims: dict[str, tuple[int | None, ...]] = {}
        for vi in infos:
            if vi.type.HasField("tensor_type"):
                self.elem_type[vi.name] = vi.type.tensor_type.elem_type
                if vi.type.tensor_type.HasField("shape"):
                    dims = vi.type.tensor_type.shape.dim
                    self.rank[vi.name] = len(dims)
                    self.dims[vi.name] = tuple(d.dim_value if d.HasField("dim_value") else None for d in dims)
        for init in self.initializers.values():
            self.elem_type[init.name] = init.data_type
            self.rank[init.name] = len(init.dims)
            self.dims[init.name] = tuple(int(d) for d in init.dims)

    def is_float(self, name: str) -> bool:
        return self.elem_type.get(name) in FLOAT_TYPES

    def runs_at_load(self, node: onnx.NodeProto) -> bool:
        """Whether every input of ``node`` is a constant or made by such a node: onnxruntime
        computes it once when it loads the model (a chain prepare keeps computed because folding
        it would store a tensor many times its inputs: graph/passes/fold_constants.py ``grows``).
        Quantizing it saves no run time and costs the weight it makes its precision (onnx-asr's
        resampler under FP16: a sinc argument up to 450 in half precision)."""
        if self._at_load is None:
            made: set[str] = set()
            for n in self.nodes:
                ins = [i for i in n.input if i]
                if ins and is_onnx_domain(n.domain) and n.op_type not in _NOT_AT_LOAD \
                        and not any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in n.attribute) \
                        and all(i in made or self.is_constant(i) for i in ins):
                    made.update(o for o in n.output if o)
            self._at_load = made
        return bool(node.output) and all(o in self._at_load for o in node.output if o)

    def made_at_load(self, name: str) -> bool:
        """Whether tensor ``name`` is made by a node that :meth:`runs_at_load` (a computed weight)."""
        producer = self.producer.get(name)
        return producer is not None and self.runs_at_load(producer)

    def is_constant(self, name: str) -> bool:
        """An initializer or a ``Constant`` node's output: a value fixed before any input is seen."""
        producer = self.producer.get(name)
        return name in self.initializers or (producer is not None and producer.op_type == "Constant")

    def constant_value(self, name: str) -> np.ndarray | None:
        """The value of an initializer or of a ``Constant`` node's ``value`` tensor; None for a computed tensor."""
        if name in self.initializers:
            return tensor_values(self.initializers[name])
        producer = self.producer.get(name)
        if producer is not None and producer.op_type == "Constant":
            for attr in producer.attribute:
                if attr.name == "value":
                    return onnx.numpy_helper.to_array(attr.t)
        return None


def _iterated(scope) -> bool:
    """Whether ``scope`` is (inside) the body of a Loop or Scan: its nodes run once per step."""
    while scope is not None and scope.owner is not None:
        if scope.owner.op_type in ("Loop", "Scan"):
            return True
        scope = scope.parent
    return False


#: Ops that never count as computed once at load: their result differs per run, or is a format.
_NOT_AT_LOAD = frozenset({"RandomUniform", "RandomNormal", "RandomUniformLike", "RandomNormalLike", "Multinomial",
                          "Bernoulli", "Dropout", "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"})


def _excluded(name: str, patterns: Iterable[str]) -> bool:
    for pattern in patterns:
        if pattern == name:
            return True
        if pattern.startswith("^") and ".*" in pattern and re.match(pattern, name):
            return True
    return False


def _skip_reason(node, g: _Graph, config: QuantConfig, op_types: set[str], quantized: set[str]) -> str | None:
    if config.nodes_to_quantize and node.name not in config.nodes_to_quantize:
        return "not in nodes_to_quantize"
    if _excluded(node.name, config.nodes_to_exclude):
        return "excluded"
    if node.op_type not in op_types:
        return f"op type {node.op_type} not quantized"
    if not is_onnx_domain(node.domain):
        return f"domain {node.domain}"
    if not any(g.is_float(i) for i in node.input if i) and not any(g.is_float(o) for o in node.output if o):
        return "no float tensors"
    if node.op_type in PASS_THROUGH and not config.force_quantize_no_input_check:
        if not node.input or node.input[0] not in quantized:
            return "pass-through op whose input is not quantized"
    if any(i in g.initializers and _all_inf(g.initializers[i]) for i in node.input if i):
        return "an initializer input is entirely ±inf"
    if g.runs_at_load(node):
        return "runs once at load on constants (its result is read as a weight)"
    return None


def _all_inf(tensor: onnx.TensorProto) -> bool:
    if tensor.data_type not in FLOAT_TYPES:
        return False
    values = tensor_values(tensor)
    return values.size > 0 and bool(np.all(np.isinf(values)))


def _node_formats(node: onnx.NodeProto, config: QuantConfig) -> tuple[TensorQuant | None, TensorQuant | None]:
    """(activation, weight) formats the config gives ``node``, before any runtime adjustment."""
    act, weight = config.activation, config.weight
    if node.op_type in config.op_type_overrides:
        act, weight = config.op_type_overrides[node.op_type]
    if node.name in config.node_overrides:
        act, weight = config.node_overrides[node.name]
    return act, weight


def depthwise_conv(node: onnx.NodeProto, g: _Graph, multiplier_one: bool = False) -> bool:
    """A Conv of a constant weight whose every output channel reads one input channel (``group`` > 1, the
    weight ``[C_out, 1, kh, kw]``); ``multiplier_one``: one output channel per group as well (``C_out = group``)."""
    if node.op_type != "Conv" or len(node.input) < 2 or node.input[1] not in g.initializers:
        return False
    group = next((onnx.helper.get_attribute_value(a) for a in node.attribute if a.name == "group"), 1)
    dims = g.initializers[node.input[1]].dims
    return group > 1 and len(dims) >= 2 and dims[1] == 1 and (not multiplier_one or dims[0] == group)


def is_lookup_table(node: onnx.NodeProto, g: _Graph) -> bool:
    """Whether ``node`` is a ``Gather`` whose data is a float constant of rank ≥ 2: a lookup table
    (word/position embeddings), read row by row with indices computed at run time.

    Why it is decided here, by dataflow: on the CPU target a data-movement op is quantized only
    behind an integer producer, and a table has none, so its bytes stayed float under the integer
    presets (minilm_l3 A8W8 at ×0.77 of fp32, all of it the 30522×384 word table). A table is a
    weight: it is stored int8 per row (axis 0) and dequantized after the lookup, on the gathered
    rows only (``graph/passes/lookup_tables.py``)."""
    if node.op_type != "Gather" or not is_onnx_domain(node.domain) or not node.input:
        return False
    table = g.initializers.get(node.input[0])
    return table is not None and table.data_type in FLOAT_TYPES and len(table.dims) >= 2


def _cpu_skip_reason(node: onnx.NodeProto, config: QuantConfig, selected_outputs: set[str],
                     g: _Graph | None = None) -> str | None:
    """Why the CPU target leaves ``node`` float although the op-type rules select it.

    A Q/DQ pair around an op that onnxruntime's CPU provider has no integer kernel for only
    converts back and forth; data-movement ops and fused activations are worth quantizing only
    behind an integer producer (they then run on its integer output). Convolutions that onnxruntime
    runs slower as QLinearConv than in float are left to :func:`_drop_isolated_cpu_nodes`, which
    sees their neighbours. Explicit op-type choices
    (``op_types``, ``extra_op_types``, overrides, ``quantize_all_op_types``, ``nodes_to_quantize``)
    are the user's and are honoured.
    """
    if not runtime.integer_placement(config, _node_formats(node, config)[0]) or _explicit(node, config):
        return None
    if node.op_type in RECURRENT:
        # No integer GRU/LSTM/RNN kernel, but their W/R are most of a seq2seq model's bytes:
        # they are stored quantized behind a DequantizeLinear (onnxruntime folds it and runs the
        # float kernel); the input X and the state stay float (assign.make_plan).
        return None
    if g is not None and is_lookup_table(node, g):
        return None  # its table is what is quantized (stored int8, dequantized after the lookup)
    if g is not None and node.name in g.iterated and node.op_type not in runtime.CPU_MATRIX_OPS | RECURRENT:
        return ("runtime cpu: a Loop/Scan body runs float at every step (its weights are loop-invariant values "
                "from outside it, so no integer kernel forms there); only its dot products' weights are stored quantized")
    if node.op_type not in runtime.CPU_OP_TYPES:
        return f"runtime cpu: onnxruntime has no integer {node.op_type} kernel"
    if node.op_type in runtime.CPU_DATA_MOVEMENT | runtime.CPU_FUSED_ACTIVATIONS:
        if not node.input or node.input[0] not in selected_outputs:
            return f"runtime cpu: {node.op_type} runs on integers only behind an integer producer"
    return None


def configured_op_types(config: QuantConfig) -> set[str]:
    """The op types ``config`` names for quantization: ``op_types`` (or the defaults), plus
    ``extra_op_types`` and the overrides' keys. ``quantize_all_op_types`` is the caller's to add
    (make_plan adds the graph's own op types; calibration's early refusal skips its check)."""
    return (set(config.op_types) if config.op_types is not None else set(DEFAULT_OP_TYPES)) | set(config.extra_op_types) | set(config.op_type_overrides)


def _explicit(node: onnx.NodeProto, config: QuantConfig) -> bool:
    """Whether the user chose ``node``'s op type or the node itself for quantization explicitly."""
    return (config.op_types is not None or config.quantize_all_op_types or node.op_type in config.extra_op_types
            or node.op_type in config.op_type_overrides or node.name in config.nodes_to_quantize)


def _drop_isolated_cpu_nodes(selected: list[onnx.NodeProto], skipped: dict[str, str], g: _Graph,
                             config: QuantConfig) -> list[onnx.NodeProto]:
    """On the CPU target, unselect the cheap integer ops that no selected node feeds.

    An Add/Mul/Concat/pooling/... whose data inputs all come from float ops (e.g. PP-LCNetV3's
    learnable shift after a HardSwish, an SE block's pooling of a float depthwise output) would
    become a QLinear kernel behind one QuantizeLinear per input: in float it costs next to
    nothing, and one QuantizeLinear on its output (where an integer reader needs one) replaces
    those, with one rounding instead of two, and on a smaller tensor where the op reduces (a
    GlobalAveragePool; onnxruntime would otherwise also move the QuantizeLinear up through a
    MaxPool in front of it and run its slow uint8 MaxPool). Conv/MatMul/Gemm are kept
    (their integer kernel pays for the Q/DQ around it), and so are explicit choices (op types,
    node names, per-node formats such as the mixed-precision search's). Only nodes with 8-bit
    activations are considered: the rules weigh onnxruntime's uint8 kernels, and it has none for
    16-bit activations (A16W8 runs float between its Q/DQ either way). Data-movement
    ops and fused activations that lose their integer producer go too; repeated to a fixed point.
    PP-OCRv4 rec A8W8 (bench/RESULTS.md, issue 16): 14 depthwise Convs, the stem and 14 such Adds
    float, CER 0.055 → 0.037 at 0.41× float latency.
    """
    kept = list(selected)
    while True:
        names = {n.name for n in kept}
        produced = {o for n in kept for o in n.output if o}
        drop = []
        for node in kept:
            act = _node_formats(node, config)[0]
            if (not runtime.integer_placement(config, act) or not runtime.has_integer_kernels(act)
                    or _explicit(node, config) or node.name in config.node_overrides):
                continue
            if node.op_type in RECURRENT or is_lookup_table(node, g):
                continue  # its weights (table) are what is quantized (_cpu_skip_reason), not its inputs
            data = [i for i in node.input if i and i not in g.initializers]
            if node.op_type in runtime.CPU_MATRIX_OPS:
                weight = g.initializers.get(node.input[1]) if len(node.input) > 1 else None
                dims = list(weight.dims) if weight is not None else None
                read = _read_by_selected(node, names, g)
                slower = runtime.float_conv_reason(node, dims)
                if slower and not (read and data and data[0] in produced):
                    drop.append((node, slower))
                elif weight is not None and runtime.is_image_stem(node, dims) and not read:
                    drop.append((node, "runtime cpu: an image stem runs faster in float, and no integer reader needs "
                                       "its output quantized"))
                continue
            if node.op_type in runtime.CPU_DATA_MOVEMENT | runtime.CPU_FUSED_ACTIVATIONS:
                if not data or data[0] not in produced:
                    drop.append((node, f"runtime cpu: {node.op_type} runs on integers only behind an integer producer"))
                continue
            if not any(i in produced for i in data):
                drop.append((node, f"runtime cpu: no integer producer; the {node.op_type} runs float and its "
                                   "output is quantized once where an integer reader needs it"))
        if not drop:
            return kept
        for node, reason in drop:
            skipped[node.name] = reason
        gone = {id(n) for n, _ in drop}
        kept = [n for n in kept if id(n) not in gone]


def _read_by_selected(node: onnx.NodeProto, names: set[str], g: _Graph) -> bool:
    """Whether a node in ``names`` reads ``node``'s outputs, directly or behind a Relu/Clip (an
    activation onnxruntime fuses into the producer, selected or not)."""
    readers = downstream_nodes(node.output, g.consumers, lambda n: n.op_type in runtime.CPU_FUSED_ACTIVATIONS)
    return any(reader.name in names for reader in readers)


def _fused_activations(config: QuantConfig) -> frozenset[str]:
    """Activations that take no quantizer between them and their producer on this target."""
    return runtime.CPU_FUSED_ACTIVATIONS if runtime.is_cpu(config) else FUSIBLE_ACTIVATIONS


def _feeds_fused_activation(node, out: str, g: _Graph, selected: set[str], config: QuantConfig) -> bool:
    if node.op_type not in FUSIBLE_PRODUCERS or out in g.outputs:
        return False
    consumers = g.consumers.get(out, [])
    return (len(consumers) == 1 and consumers[0].op_type in _fused_activations(config)
            and consumers[0].name in selected)
