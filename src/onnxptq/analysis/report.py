"""Per-tensor error report: where a quantized model loses accuracy against its float model.

For every quantized tensor ``T`` the report runs both models on the same samples and compares the
float model's ``T`` with the value the quantized model's consumers read in its place (a
DequantizeLinear, Cast or ``onnxptq`` function output, or a folded weight). Two errors per tensor:

- **vs float** (``sqnr_db``, ``cosine``, ``max_abs_err``, ``mse``): the quantized model's value
  against the float model's. It includes every error made upstream, so it is what the user sees at
  that point of the graph — but one bad layer drags down everything after it.
- **local** (``local_sqnr_db``, ``local_max_abs_err``): the tensor's own quantizer, its input
  against its output inside the quantized model. This names the quantizer that *adds* the noise,
  so the table is sorted worst-first on it by default (``sort="local"``); ``sort="model"`` sorts on
  the vs-float SQNR. For weights and biases both are the same thing (their input is the float
  constant).

Tensors are matched structurally, not by naming convention, so a model from another quantizer works
too: a node present in both models (same name, or same op type producing the same output) that
reads ``R`` in the quantized model where it read ``T`` in the float model makes ``R`` the quantized
form of ``T``; a node whose output ``T`` was renamed (a quantized graph output) makes the renamed
tensor the quantizer's input and ``T`` its output. With a plan (``onnxptq.quantize(...,
report_path=...)``) roles and formats come from the plan; without one they are read from the
inserted nodes.

Memory: samples are streamed one feed at a time into per-tensor running sums (signal power, noise
power, dot product, maxima), so it is O(tensors), never O(samples × tensors). Sessions run with
graph optimizations off: the report measures the model's ONNX semantics, not the integer kernels a
backend may fuse Q/DQ pairs into (exposing every tensor would block most fusions anyway). The two
can differ: on the small test CNN (A8W8) the output cosine is 0.99996 as written and 0.9974 under
onnxruntime's extended optimizations, which is what ``QuantizationResult.metrics`` measures.
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Literal, Mapping, Protocol

import numpy as np
import onnx
from onnx import numpy_helper

from ..graph.call_attributes import call_attributes
from ..graph.opsets import is_onnx_domain
from ..graph.ops import BIAS_INPUTS
from ..sessions import open_session
from .runtime_view import NodeKernel, runtime_kernels
from .runtime_view import summary as runtime_summary

log = logging.getLogger(__name__)


class Plan(Protocol):
    """What the report reads of a quantizer's plan (:class:`onnxptq.pipeline.plan.Plan` has it):
    the planned tensors by name (role, format, axis, saturation limits) and the range guard's
    decisions. A protocol: the report measures models and knows nothing of how a plan is made."""

    tensors: Mapping[str, Any]
    guard: Mapping[str, Mapping[str, Any]]

SortKey = Literal["local", "model"]
#: SQNR shown for an exact match (no error at all); keeps JSON finite and charts bounded.
EXACT_DB = 200.0


@dataclass
class TensorMatch:
    """Where one float tensor lives in the quantized model."""

    name: str
    #: the tensor the quantized model's consumers read instead of ``name``
    quantized: str
    #: the quantizer's input inside the quantized model (None: the float constant itself, or no
    #: tensor of the quantized model computes the float value; local error is then the vs-float one)
    pre: str | None
    #: the node (by name, in the float model) that reads it first, and its op type
    consumer: str | None = None
    consumer_op: str | None = None
    #: inserted nodes between ``pre`` and ``quantized`` (the quantizer), producer-first
    chain: list[onnx.NodeProto] = field(default_factory=list, repr=False)


@dataclass
class TensorError:
    """The error of one quantized tensor over all samples, worst-first in :class:`Report`."""

    name: str
    role: str
    op_type: str
    node: str | None
    format: str
    quantized_name: str
    elements: int
    sqnr_db: float
    cosine: float
    max_abs_err: float
    mse: float
    local_sqnr_db: float
    local_max_abs_err: float
    max_abs_ref: float
    nonfinite: int = 0
    #: position of the tensor in the float graph (inputs and constants first): the chart's x axis
    graph_index: int = 0
    #: what the range-mismatch guard did to this tensor and why (empty where it did nothing)
    guard: str = ""


@dataclass
class Report:
    """Everything :func:`write_report` writes: per-tensor errors, per-output figures, misses."""

    float_model: str
    quantized_model: str
    samples: int
    sort: SortKey
    tensors: list[TensorError]
    #: per graph output: cosine, SQNR and PSNR of the quantized output vs the float one
    outputs: dict[str, dict[str, float]]
    #: planned tensors the structural match could not find, with the reason
    unmatched: dict[str, str] = field(default_factory=dict)
    #: per node of the quantized model: what onnxruntime's CPU provider runs it as
    #: (:mod:`onnxptq.analysis.runtime_view`); empty when not computed
    runtime: list[NodeKernel] = field(default_factory=list)
    #: the range-mismatch guard's decisions by tensor (also those it left float, which have no row)
    guard: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "float_model": self.float_model,
            "quantized_model": self.quantized_model,
            "samples": self.samples,
            "sort": self.sort,
            "outputs": self.outputs,
            "unmatched": self.unmatched,
            "guard": self.guard,
            "tensors": [asdict(t) for t in self.tensors],
            "runtime": [asdict(r) for r in self.runtime],
            "runtime_summary": runtime_summary(self.runtime),
            "notes": {
                "sqnr_db": "10*log10(sum ref^2 / sum (ref - quantized)^2) over all samples, quantized model vs float model",
                "local_sqnr_db": "the same between the tensor's quantizer input and output inside the quantized model",
                "exact": f"{EXACT_DB} dB stands for no error at all",
                "runtime": "per node: 'integer' (onnxruntime CPU ran an integer kernel, or moved integer values), "
                           "'float' (a float op between DequantizeLinear and QuantizeLinear) or 'removed' (folded)",
            },
        }

    def table(self, top: int | None = None) -> str:
        """A plain-text table of the worst ``top`` tensors (what the command prints)."""
        rows = self.tensors if top is None else self.tensors[:top]
        width = max([len("tensor")] + [len(t.name) for t in rows])
        lines = [f"{'tensor':<{width}}  {'role':<10} {'op':<18} {'local dB':>9} {'SQNR dB':>8} {'cosine':>9} {'max|err|':>10}  format"]
        for t in rows:
            lines.append(
                f"{t.name:<{width}}  {t.role:<10} {t.op_type:<18} {t.local_sqnr_db:>9.2f} {t.sqnr_db:>8.2f} "
                f"{t.cosine:>9.6f} {t.max_abs_err:>10.4g}  {t.format}"
            )
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# structural matching


def _node_key(node: onnx.NodeProto, index: int) -> str:
    return node.name or f"{node.op_type}#{index}"


def _pair_nodes(float_model: onnx.ModelProto, quant_model: onnx.ModelProto) -> list[tuple[onnx.NodeProto, onnx.NodeProto]]:
    """Nodes present in both models: by name where names agree, else by an output they share,
    else by structure (:func:`_pair_by_structure`: a delivered onnxptq file writes short tensor
    names and no node names, pipeline/lean_file.py)."""
    qnodes = list(quant_model.graph.node)
    by_name = {n.name: n for n in qnodes if n.name}
    by_output = {o: n for n in qnodes for o in n.output if o}
    f_const, q_const = _constants(float_model), _constants(quant_model)
    pairs: list[tuple[onnx.NodeProto, onnx.NodeProto]] = []
    taken: set[int] = set()
    for fnode in float_model.graph.node:
        qnode = by_name.get(fnode.name) if fnode.name else None
        if qnode is None or qnode.op_type != fnode.op_type:
            qnode = next((by_output[o] for o in fnode.output if o in by_output), None)
            if qnode is None or qnode.op_type != fnode.op_type or qnode.domain != fnode.domain:
                continue
            # a name alone, where no node name agrees: a delivered file's short names reuse those the
            # quantized model no longer holds (a removed Cast pair's ``k`` on a weight's decode Cast),
            # so the node must also read constants where the float node does, and only there
            if any((f_in in f_const) != (q_in in q_const) for f_in, q_in in zip(fnode.input, qnode.input)):
                continue
        if id(qnode) in taken:
            continue
        taken.add(id(qnode))
        pairs.append((fnode, qnode))
    if len(pairs) < len(float_model.graph.node):
        pairs = _pair_by_structure(float_model, quant_model, pairs)
    return pairs


#: How far a reader may sit behind the tensor it reads in quantized form: the quantizer's own nodes
#: (a call; QuantizeLinear + DequantizeLinear; a Cast pair; a range guard), each taking the tensor
#: as its first input.
_QUANTIZER_DEPTH = 6


def _pair_by_structure(float_model: onnx.ModelProto, quant_model: onnx.ModelProto,
                       pairs: list[tuple[onnx.NodeProto, onnx.NodeProto]]) -> list[tuple[onnx.NodeProto, onnx.NodeProto]]:
    """``pairs`` completed by the graphs' structure: walking the float graph in order, a float node
    is paired with the first quantized node of its op type (same attributes preferred) that reads,
    at each input the float node reads from a paired node or a graph input, that node's output or
    a chain of inserted nodes (none of them paired, each reading it as its first input) from it;
    and at each input the float node reads from a constant, a constant (an initializer, or a node
    reading only constants: a weight's decode chain), and a computed tensor at every other input (one
    a removed node made: a Cast of a removed pair is not a weight's decode Cast). The quantized model's tensor names need not
    be the float model's (pipeline/lean_file.short_value_names renames them in a delivered file).

    Why by structure: onnxptq quantizes the prepared float model by inserting nodes only; every
    node of the float model is in the quantized model, reading the same tensors or quantized forms
    of them. A node onnxptq removed (an exact Cast pair, a folded weight chain) stays unpaired."""
    fnodes = list(float_model.graph.node)
    qnodes = list(quant_model.graph.node)
    paired_f = {id(f) for f, _ in pairs}
    paired_q = {id(q) for _, q in pairs}
    # float tensor -> the quantized model's tensor of the same value
    same: dict[str, str] = {}
    q_inputs = {i.name for i in quant_model.graph.input}
    for i in float_model.graph.input:
        if i.name in q_inputs:
            same[i.name] = i.name
    for f, q in pairs:
        same.update((fo, qo) for fo, qo in zip(f.output, q.output) if fo and qo)
    # the quantized tensors ``same`` names (a float tensor is made once and paired once: no key is
    # written twice, so the set only grows with ``same``)
    stop = set(same.values())
    f_const, q_const = _constants(float_model), _constants(quant_model)
    q_producer = {o: n for n in qnodes for o in n.output if o}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for n in qnodes:
        for i in dict.fromkeys(n.input):
            if i:
                readers.setdefault(i, []).append(n)
    by_type: dict[tuple[str, str], list[onnx.NodeProto]] = {}
    for n in qnodes:
        by_type.setdefault((n.domain, n.op_type), []).append(n)
    attrs: dict[int, list[bytes]] = {}

    def attributes(node: onnx.NodeProto) -> list[bytes]:
        """``node``'s attributes as bytes, serialised once and only for the nodes compared (a Loop's
        body or a Constant's tensor is large, and most nodes are paired by name before this)."""
        if id(node) not in attrs:
            attrs[id(node)] = sorted(a.SerializeToString(deterministic=True) for a in node.attribute)
        return attrs[id(node)]

    def source(name: str, stop: set[str]) -> str:
        """The tensor ``name`` is made from through inserted (unpaired) nodes' first inputs."""
        for _ in range(_QUANTIZER_DEPTH + 1):
            node = q_producer.get(name)
            if name in stop or node is None or id(node) in paired_q or not node.input:
                return name
            name = node.input[0]
        return name

    def fits(fnode: onnx.NodeProto, qnode: onnx.NodeProto, stop: set[str]) -> bool:
        if len(fnode.input) != len(qnode.input) or len(fnode.output) != len(qnode.output):
            return False
        for f_in, q_in in zip(fnode.input, qnode.input):
            if not f_in or not q_in:
                if bool(f_in) != bool(q_in):
                    return False
            elif f_in in same:
                if source(q_in, stop) != same[f_in]:
                    return False
            elif (f_in in f_const) != (q_in in q_const):  # a constant for a constant, a computed tensor for one
                return False
        return True

    for fnode in fnodes:
        if id(fnode) in paired_f:
            continue
        key = (fnode.domain, fnode.op_type)
        known = [same[i] for i in fnode.input if i in same]
        if known:  # the readers of its input, and of the inserted nodes after it
            candidates, frontier, seen = [], [known[0]], set()
            for _ in range(_QUANTIZER_DEPTH + 1):
                nxt = []
                for t in frontier:
                    for r in readers.get(t, ()):
                        if id(r) in seen or id(r) in paired_q:
                            continue
                        seen.add(id(r))
                        if (r.domain, r.op_type) == key:
                            candidates.append(r)
                        if r.input and r.input[0] == t:
                            nxt.extend(o for o in r.output if o and o not in stop)
                frontier = nxt
        else:
            candidates = [q for q in by_type.get(key, ()) if id(q) not in paired_q]
        fitting = [q for q in candidates if fits(fnode, q, stop)]
        if not fitting:
            continue
        qnode = fitting[0] if len(fitting) == 1 else next(
            (q for q in fitting if attributes(q) == attributes(fnode)), fitting[0])
        pairs.append((fnode, qnode))
        paired_f.add(id(fnode))
        paired_q.add(id(qnode))
        for fo, qo in zip(fnode.output, qnode.output):
            if fo and qo:
                same[fo] = qo
                stop.add(qo)
    return pairs


def _constants(model: onnx.ModelProto) -> set[str]:
    """The main graph's constant tensors: initializers, and outputs of nodes that read only constants
    (a ``Constant``; a weight's decode chain), with ``""`` (an absent optional input)."""
    const = {t.name for t in model.graph.initializer} | {""}
    for n in model.graph.node:
        if n.op_type == "Constant" or (n.input and all(i in const for i in n.input)):
            const.update(n.output)
    return const


def match_tensors(float_model: onnx.ModelProto, quant_model: onnx.ModelProto) -> dict[str, TensorMatch]:
    """Map every float tensor that the quantized model reads in quantized form to that form."""
    pairs = _pair_nodes(float_model, quant_model)
    paired_q = {id(q) for _, q in pairs}
    q_producer = {o: n for n in quant_model.graph.node for o in n.output if o}
    float_names = _defined_names(float_model)
    q_inits = {t.name for t in quant_model.graph.initializer}
    q_init_protos = {t.name: t for t in quant_model.graph.initializer}
    f_init_protos = {t.name: t for t in float_model.graph.initializer}
    matches: dict[str, TensorMatch] = {}

    def chain_from(name: str) -> list[onnx.NodeProto]:
        """Inserted nodes that compute ``name``, walked back until tensors the float model knows."""
        nodes: list[onnx.NodeProto] = []
        stack, seen = [name], set()
        while stack:
            current = stack.pop()
            if current in seen:
                continue
            seen.add(current)
            node = q_producer.get(current)
            if node is None or id(node) in paired_q:
                continue
            nodes.append(node)
            stack.extend(i for i in node.input if i and i not in float_names)
        return nodes[::-1]

    f_producer = {o: n for n in float_model.graph.node for o in n.output if o}
    counterpart = {id(f): q for f, q in pairs}
    f_inputs = {i.name for i in float_model.graph.input} - _initializer_names(float_model)

    def same_tensor(name: str) -> bool:
        """Whether ``name`` in the quantized model is the float model's ``name`` computed the same way
        (same producing node, or the same graph input): only then is it the quantizer's input. Another
        quantizer may drop a node (onnxruntime removes a Relu after a Conv and lets the Q/DQ clamp),
        leaving the name on a different value."""
        if name in f_inputs:
            return name in {i.name for i in quant_model.graph.input}
        fnode, qnode = f_producer.get(name), q_producer.get(name)
        return fnode is not None and qnode is not None and counterpart.get(id(fnode)) is qnode

    renamed: dict[str, str] = {}
    for fnode, qnode in pairs:
        for f_out, q_out in zip(fnode.output, qnode.output):
            if f_out and q_out and f_out != q_out:
                renamed[f_out] = q_out
    for fnode, qnode in pairs:
        for f_in, q_in in zip(fnode.input, qnode.input):
            if not f_in or not q_in or f_in == q_in or f_in in matches:
                continue
            if q_in in float_names and q_in not in q_inits and q_in not in q_producer:
                continue  # rewired to another float tensor: not a quantizer
            if q_in in q_producer and id(q_producer[q_in]) in paired_q:
                continue  # read from a different original node: a graph rewrite, not a quantizer
            if q_in in q_init_protos and f_in in f_init_protos and _same_values(f_init_protos[f_in], q_init_protos[q_in]):
                continue  # the same constant under another name (a delivered file's short names)
            pre = renamed.get(f_in) or (f_in if same_tensor(f_in) else None)
            matches[f_in] = TensorMatch(f_in, q_in, pre, _node_key(fnode, 0), fnode.op_type, chain_from(q_in))
    # Quantized in place: the quantized model computes a float tensor's own name with inserted nodes.
    # onnxptq does this for graph outputs (the producer writes a renamed tensor, a quantizer writes
    # the output); onnxruntime also for biases (``B_quantized`` -> DequantizeLinear -> ``B``).
    # The name must stand for the float tensor there: a graph output, or read under it by a paired node
    # where its float node reads it (a delivered file's short names reuse names the quantized model no
    # longer holds: a removed Cast pair's ``k`` on a weight's decode Cast).
    f_consumer: dict[str, tuple[str, str]] = {}
    for index, fnode in enumerate(float_model.graph.node):
        for name in fnode.input:
            f_consumer.setdefault(name, (_node_key(fnode, index), fnode.op_type))
    standing = {o.name for o in quant_model.graph.output}
    standing.update(f_in for fnode, qnode in pairs for f_in, q_in in zip(fnode.input, qnode.input) if f_in and f_in == q_in)
    for name in sorted(float_names, key=lambda n: (n not in renamed, n)):
        qnode = q_producer.get(name)
        if name in matches or qnode is None or id(qnode) in paired_q or name not in standing:
            continue
        consumer, op = f_consumer.get(name, (None, None))
        matches[name] = TensorMatch(name, name, renamed.get(name), consumer, op, chain_from(name))
    return matches


def _same_values(a: onnx.TensorProto, b: onnx.TensorProto) -> bool:
    """Whether two initializers hold the same type, shape and values (bit for bit)."""
    if a.data_type != b.data_type or list(a.dims) != list(b.dims):
        return False
    x, y = numpy_helper.to_array(a), numpy_helper.to_array(b)
    return x.tobytes() == y.tobytes()


def _initializer_names(model: onnx.ModelProto) -> set[str]:
    return {t.name for t in model.graph.initializer}


def _defined_names(model: onnx.ModelProto) -> set[str]:
    names = _initializer_names(model) | {i.name for i in model.graph.input}
    names.update(o for n in model.graph.node for o in n.output if o)
    return names


# ---------------------------------------------------------------------------------------------
# formats read from the inserted nodes (no plan)


def _dtype_name(elem_type: int) -> str:
    try:
        return str(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    except Exception:  # bfloat16/float8 have no plain NumPy dtype in every onnx version
        return onnx.TensorProto.DataType.Name(elem_type).lower()


def describe_chain(match: TensorMatch, quant_model: onnx.ModelProto) -> str:
    """A format description from the quantizer nodes alone (used when no plan is given)."""
    inits = {t.name: t for t in quant_model.graph.initializer}
    producers = {o: n for n in quant_model.graph.node for o in n.output if o}
    for node in match.chain:
        if node.op_type == "DequantizeLinear" and (is_onnx_domain(node.domain) or node.domain == "com.microsoft"):
            source = node.input[0]
            dtype = None
            if source in inits:
                dtype = _dtype_name(inits[source].data_type)
            elif source in producers and producers[source].op_type == "QuantizeLinear":
                q = producers[source]
                attrs = {a.name: onnx.helper.get_attribute_value(a) for a in q.attribute}
                if len(q.input) > 2 and q.input[2] in inits:
                    dtype = _dtype_name(inits[q.input[2]].data_type)
                elif "output_dtype" in attrs:
                    dtype = _dtype_name(int(attrs["output_dtype"]))
                else:
                    dtype = "uint8"
            scale = inits.get(node.input[1]) if len(node.input) > 1 else None
            size = int(np.prod(scale.dims)) if scale is not None and scale.dims else 1
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            grain = "blocked" if attrs.get("block_size") else ("per-channel" if size > 1 else "per-tensor")
            return f"{dtype or '?'} {grain}"
    for node in match.chain:
        if not is_onnx_domain(node.domain):
            attrs = call_attributes(quant_model, node)  # a delivered file keeps shared ones on the function
            keep = ("bfp_method", "bit_width", "element_dtype", "block_size")
            detail = ", ".join(f"{k}={_plain(attrs[k])}" for k in keep if k in attrs)
            return f"{node.op_type}({detail})" if detail else node.op_type
    casts = [n for n in match.chain if n.op_type == "Cast"]
    if casts:
        to = next(a.i for a in casts[0].attribute if a.name == "to")
        return f"cast {_dtype_name(to)}"
    if not match.chain and match.quantized in inits:
        suffix = match.quantized[len(match.name) + 1:] if match.quantized.startswith(match.name + "_") else ""
        return f"{suffix} (folded)" if suffix else "folded"
    return "+".join(n.op_type for n in match.chain) or "?"


def _plain(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


# ---------------------------------------------------------------------------------------------
# streaming accumulation


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    """Σ a·b in float64 without BLAS: OpenBLAS's thread pool spinning against onnxruntime's on a
    busy machine made ``np.dot`` 7× slower here than this single-threaded loop."""
    return float(np.einsum("i,i->", a, b))


class _Accumulator:
    """Running sums for one tensor: enough for SQNR, cosine, MSE and maxima, O(1) memory."""

    __slots__ = ("n", "ref2", "q2", "dot", "err2", "max_err", "max_ref", "pre2", "lerr2", "lmax", "nonfinite")

    def __init__(self) -> None:
        self.n = 0
        self.ref2 = self.q2 = self.dot = self.err2 = self.max_err = self.max_ref = 0.0
        self.pre2 = self.lerr2 = self.lmax = 0.0
        self.nonfinite = 0

    def add(self, name: str, ref: np.ndarray, quant: np.ndarray, pre: np.ndarray | None) -> None:
        ref = np.asarray(ref, dtype=np.float64).ravel()
        quant = np.asarray(quant, dtype=np.float64).ravel()
        if ref.shape != quant.shape:
            raise ValueError(f"tensor {name!r}: float value has {ref.size} elements, quantized value {quant.size}")
        pre_arr = None if pre is None else np.asarray(pre, dtype=np.float64).ravel()
        if pre_arr is not None and pre_arr.shape != quant.shape:
            raise ValueError(f"tensor {name!r}: quantizer input has {pre_arr.size} elements, its output {quant.size}")
        ref2, q2 = _dot(ref, ref), _dot(quant, quant)
        if not (math.isfinite(ref2) and math.isfinite(q2)):
            # Rare path: mask NaN/Inf out of the sums and count them (the checks above cost nothing).
            finite = np.isfinite(ref) & np.isfinite(quant)
            self.nonfinite += int(finite.size - np.count_nonzero(finite))
            ref, quant = ref[finite], quant[finite]
            pre_arr = None if pre_arr is None else pre_arr[finite]
            ref2, q2 = _dot(ref, ref), _dot(quant, quant)
        err = ref - quant
        self.n += ref.size
        self.ref2 += ref2
        self.q2 += q2
        self.dot += _dot(ref, quant)
        self.err2 += _dot(err, err)
        if ref.size:
            self.max_err = max(self.max_err, float(err.max()), -float(err.min()))
            self.max_ref = max(self.max_ref, float(ref.max()), -float(ref.min()))
        if pre_arr is None:
            self.pre2, self.lerr2, self.lmax = self.ref2, self.err2, self.max_err
            return
        np.subtract(pre_arr, quant, out=err)
        self.pre2 += _dot(pre_arr, pre_arr)
        self.lerr2 += _dot(err, err)
        if err.size:
            self.lmax = max(self.lmax, float(err.max()), -float(err.min()))

    @staticmethod
    def _sqnr(signal: float, noise: float) -> float:
        if noise <= 0.0:
            return EXACT_DB
        if signal <= 0.0:
            return -EXACT_DB
        return min(EXACT_DB, 10.0 * math.log10(signal / noise))

    def figures(self) -> dict[str, float]:
        denom = math.sqrt(self.ref2 * self.q2)
        cos = 1.0 if (self.ref2 == 0 and self.q2 == 0) else (self.dot / denom if denom > 0 else 0.0)
        sqnr, local = self._sqnr(self.ref2, self.err2), self._sqnr(self.pre2, self.lerr2)
        if self.nonfinite:
            sqnr = local = -EXACT_DB  # a NaN or Inf the float model does not have: the worst there is
        return {
            "elements": self.n,
            "sqnr_db": sqnr,
            "cosine": cos,
            "max_abs_err": self.max_err,
            "mse": self.err2 / self.n if self.n else 0.0,
            "local_sqnr_db": local,
            "local_max_abs_err": self.lmax,
            "max_abs_ref": self.max_ref,
            "nonfinite": self.nonfinite,
        }


# ---------------------------------------------------------------------------------------------
# running both models


def _session(model: onnx.ModelProto, wanted: Iterable[str]):
    """A CPU session on a copy of ``model`` whose outputs include ``wanted`` (optimizations off)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    present = {o.name for o in copy.graph.output}
    for name in wanted:
        if name not in present:
            copy.graph.output.append(onnx.ValueInfoProto(name=name))
            present.add(name)
    return open_session(copy, optimization="none")


class _Values:
    """Where a model's tensor values come from: constants once, graph inputs from the feed, the
    rest from session outputs."""

    def __init__(self, model: onnx.ModelProto, label: str) -> None:
        self.label = label
        self.model = model
        self.inits = {t.name: t for t in model.graph.initializer}
        self.inputs = {i.name for i in model.graph.input} - set(self.inits)
        self.defined = _defined_names(model)
        self.consts: dict[str, np.ndarray] = {}

    def check(self, name: str) -> None:
        if name not in self.defined:
            raise ValueError(f"{self.label}: tensor {name!r} is not defined in the model")

    def const(self, name: str) -> np.ndarray:
        if name not in self.consts:
            self.consts[name] = numpy_helper.to_array(self.inits[name])
        return self.consts[name]

    def needs_run(self, name: str) -> bool:
        return name not in self.inits and name not in self.inputs


def compute_report(
    float_model: onnx.ModelProto,
    quant_model: onnx.ModelProto,
    data: Iterable[Mapping[str, np.ndarray]],
    *,
    plan: Plan | None = None,
    sort: SortKey = "local",
    max_samples: int | None = None,
    float_label: str = "float",
    quant_label: str = "quantized",
) -> Report:
    """Per-tensor error of ``quant_model`` against ``float_model`` over the feeds in ``data``.

    ``float_model`` must be the model the quantizer rewrote (for onnxptq: the *prepared* model —
    :func:`report_files` prepares a user's float model the same way). ``data`` yields feed dicts
    for the float model's inputs; it is read once, one feed at a time.
    """
    if sort not in ("local", "model"):
        raise ValueError(f"sort must be 'local' or 'model', not {sort!r}")
    matches = match_tensors(float_model, quant_model)
    unmatched: dict[str, str] = {}
    if plan is not None:
        q_defined = _defined_names(quant_model)
        first_reader = {i: (_node_key(n, k), n.op_type) for k, n in reversed(list(enumerate(float_model.graph.node)))
                        for i in n.input}
        for name in plan.tensors:
            if name not in matches and plan.tensors[name].quant.format in ("bf16", "fp16", "bfp", "mx") and name in q_defined:
                # emit dropped its Cast pair (graph/passes/drop_exact_casts.py) or left out its block
                # quantizer (pipeline/on_grid.py): the tensor already holds values of its format's
                # grid, the quantizer was the identity; its error is measured in place.
                consumer, op = first_reader.get(name, (None, None))
                matches[name] = TensorMatch(name, name, None, consumer, op, [])
        for name in plan.tensors:
            if name not in matches:
                reason = "no node of the quantized model reads a quantized form of it"
                unmatched[name] = reason
                log.warning("report: planned tensor %r not found in %s: %s", name, quant_label, reason)
    fvals, qvals = _Values(float_model, float_label), _Values(quant_model, quant_label)
    for m in matches.values():
        fvals.check(m.name)
        qvals.check(m.quantized)
        if m.pre is not None:
            qvals.check(m.pre)

    # Names each session must expose. Constants (weights) are fetched from the first feed only.
    float_outputs = [o.name for o in float_model.graph.output]
    static = {n for n, m in matches.items() if n in fvals.inits}
    f_every = [n for n, m in matches.items() if n not in static and fvals.needs_run(n)]
    q_every = sorted({x for n, m in matches.items() if n not in static
                      for x in (m.quantized, m.pre) if x is not None and qvals.needs_run(x)})
    q_once = sorted({m.quantized for n, m in matches.items() if n in static and qvals.needs_run(m.quantized)})
    q_graph_outputs = [o.name for o in quant_model.graph.output if o.name in set(float_outputs)]
    fsess = _session(float_model, f_every)
    qsess = _session(quant_model, q_every + q_once)
    f_names = list(dict.fromkeys(float_outputs + f_every))
    q_names_every = list(dict.fromkeys(q_graph_outputs + q_every))
    q_names_first = list(dict.fromkeys(q_names_every + q_once))

    accs = {n: _Accumulator() for n in matches}
    out_accs = {n: _Accumulator() for n in q_graph_outputs}
    out_peak = {n: 0.0 for n in q_graph_outputs}
    samples = 0
    for feed in data:
        if max_samples is not None and samples >= max_samples:
            break
        feed = dict(feed)
        fres = dict(zip(f_names, fsess.run(f_names, feed)))
        q_names = q_names_first if samples == 0 else q_names_every
        qres = dict(zip(q_names, qsess.run(q_names, feed)))

        def fval(name: str) -> np.ndarray:
            return feed[name] if name in fvals.inputs else (fvals.const(name) if name in fvals.inits else fres[name])

        def qval(name: str) -> np.ndarray:
            return feed[name] if name in qvals.inputs else (qvals.const(name) if name in qvals.inits else qres[name])

        for name, m in matches.items():
            if name in static and samples > 0:
                continue
            ref, pre = fval(name), None if m.pre is None else qval(m.pre)
            tplan = plan.tensors.get(name) if plan is not None else None
            if tplan is not None and tplan.limits is not None:
                # Values beyond the readers' saturation points are clipped on purpose and change
                # nothing downstream (TensorPlan.limits): not counted as error.
                ref = np.clip(ref, *tplan.limits)
                pre = None if pre is None else np.clip(pre, *tplan.limits)
            accs[name].add(name, ref, qval(m.quantized), pre)
        for name in q_graph_outputs:
            out_accs[name].add(name, fres[name], qres[name], None)
            out_peak[name] = max(out_peak[name], float(np.max(np.abs(fres[name]))) if np.size(fres[name]) else 0.0)
        samples += 1
        del fres, qres
    if samples == 0:
        raise ValueError(f"report of {quant_label}: the data yielded no sample")

    float_index = _graph_order(float_model)
    notes = guard_notes(plan)
    rows = []
    for name, m in matches.items():
        tplan = plan.tensors.get(name) if plan is not None else None
        role = tplan.role if tplan is not None else _role(name, m, fvals)
        op_type, node = _op_of(name, m, float_model, role)
        fmt = tplan.quant.describe() if tplan is not None else describe_chain(m, quant_model)
        if tplan is not None and tplan.axis is not None and tplan.quant.is_integer and tplan.quant.per_channel:
            fmt += f" axis {tplan.axis}"
        figures = accs[name].figures()
        note = notes.get(name, "")
        if note:
            fmt += f" [{note}]"
        rows.append(TensorError(name=name, role=role, op_type=op_type, node=node, format=fmt,
                                quantized_name=m.quantized, graph_index=float_index.get(name, 0), guard=note, **figures))
    key = (lambda t: (t.local_sqnr_db, t.sqnr_db)) if sort == "local" else (lambda t: (t.sqnr_db, t.local_sqnr_db))
    rows.sort(key=lambda t: (*key(t), t.graph_index))
    outputs = {}
    for name, acc in out_accs.items():
        fig = acc.figures()
        mse = fig["mse"]
        peak = out_peak[name]
        psnr = EXACT_DB if mse == 0 else (10.0 * math.log10(peak * peak / mse) if peak > 0 else -EXACT_DB)
        outputs[name] = {"cosine": fig["cosine"], "sqnr_db": fig["sqnr_db"], "psnr_db": min(psnr, EXACT_DB),
                         "max_abs_err": fig["max_abs_err"]}
    try:
        kernels = runtime_kernels(quant_model)
    except Exception as exc:  # the listing is informative; a model the runtime view cannot open still gets its report
        log.warning("report of %s: onnxruntime's optimised graph could not be read (%s)", quant_label, exc)
        kernels = []
    return Report(float_label, quant_label, samples, sort, rows, outputs, unmatched, kernels,
                  dict(plan.guard) if plan is not None else {})


def guard_notes(plan: Plan | None) -> dict[str, str]:
    """One line per tensor the range guard touched: its own decision, or for the inputs of a split
    Concat, that they got their own quantizer and why."""
    notes: dict[str, str] = {}
    for name, decision in (plan.guard if plan is not None else {}).items():
        notes[name] = f"guard {decision['action']}: {decision['reason']}"
        for source in decision.get("inputs", []):
            notes.setdefault(source, f"guard split at {name}: own quantizer, not the Concat's shared scale ({decision['reason']})")
    return notes


def _graph_order(model: onnx.ModelProto) -> dict[str, int]:
    """Position of every tensor in the float graph (inputs and constants first): the chart's x axis."""
    order: dict[str, int] = {}
    for name in [i.name for i in model.graph.input] + [t.name for t in model.graph.initializer]:
        order.setdefault(name, len(order))
    for node in model.graph.node:
        for name in list(node.input) + list(node.output):
            if name:
                order.setdefault(name, len(order))
    return order


def _role(name: str, m: TensorMatch, fvals: _Values) -> str:
    if name not in fvals.inits:
        return "activation"
    for node in fvals.model.graph.node:
        for index, inp in enumerate(node.input):
            if inp == name and (node.op_type, index) in BIAS_INPUTS:
                return "bias"
    return "weight"


def _op_of(name: str, m: TensorMatch, model: onnx.ModelProto, role: str) -> tuple[str, str | None]:
    """Activations: the producer's op type (``input`` for graph inputs); constants: the consumer's."""
    if role == "activation":
        for index, node in enumerate(model.graph.node):
            if name in node.output:
                return node.op_type, _node_key(node, index)
        return "input", None
    return (m.consumer_op or "?"), m.consumer


__all__ = ["EXACT_DB", "Report", "TensorError", "TensorMatch", "compute_report", "describe_chain", "match_tensors"]
