"""Per-layer training data for fast finetuning: quantized-model inputs, float-model targets.

A layer (spec §7.2) is a Conv / ConvTranspose / Gemm / MatMul node whose weight is a planned,
unshared initializer, plus its single following activation (Relu, Clip, HardSwish, ...) when there
is one — no quantizer sits between the two on fused backends, so they are one module.

Inputs come from the *quantized* model as it stands when the layer's turn comes: the emitted
model is turned into a "probe" whose layer weights (and biases) are graph inputs, so the layers
already refined are fed their new values without re-emitting anything, and whose outputs are
the layers' quantized inputs. Targets come from the float (prepared) model. onnxruntime runs a
whole graph whatever is fetched, so every fetch costs one forward pass; samples are batched
along axis 0 when the model allows it, which is several times cheaper per sample.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import onnx

from ....graph.external import tensor_values
from ...plan import Plan
from ....sessions import open_session

log = logging.getLogger(__name__)

#: Activations folded into a layer's module (their torch form is in :mod:`.layer`).
FUSED_ACTIVATIONS = ("Relu", "LeakyRelu", "Clip", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish")
#: Probe graph-input names of a layer's weight and bias.
WEIGHT_INPUT = "onnxptq_finetune::{}::weight"
BIAS_INPUT = "onnxptq_finetune::{}::bias"
#: Samples per onnxruntime run when the model takes batches.
CHUNK = 16


@dataclass
class Layer:
    """One optimisable layer of the prepared model."""

    name: str  # node name (the same in the prepared and the emitted model)
    op_type: str
    input: str  # float tensor read by the node (input 0)
    weight: str  # initializer name
    bias: str | None  # initializer name, or None
    output: str  # the module's end: the node's output or its fused activation's output
    attrs: dict[str, Any]
    activation: str | None = None  # op type of the fused activation
    activation_attrs: dict[str, Any] = field(default_factory=dict)


def _attrs(node: onnx.NodeProto) -> dict[str, Any]:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _skip(node: onnx.NodeProto, inits: dict[str, onnx.TensorProto], why: str) -> None:
    log.debug("finetune: layer %s (%s) skipped: %s", node.name, node.op_type, why)


def find_layers(model: onnx.ModelProto, plan: Plan, op_types: Sequence[str]) -> list[Layer]:
    """The layers to optimise, in graph order (see the module doc for what qualifies)."""
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    outputs = {o.name for o in graph.output}
    layers: list[Layer] = []
    for node in graph.node:
        if node.op_type not in op_types or node.name not in plan.nodes:
            continue
        if len(node.input) < 2 or node.input[1] not in inits:
            _skip(node, inits, "no constant weight")
            continue
        weight, attrs = node.input[1], _attrs(node)
        wplan = plan.tensors.get(weight)
        if wplan is None or wplan.role != "weight":
            _skip(node, inits, "weight not quantized")
            continue
        if len(consumers.get(weight, [])) != 1:
            _skip(node, inits, "weight shared with other nodes")
            continue
        if inits[weight].data_type != onnx.TensorProto.FLOAT or node.input[0] in inits:
            _skip(node, inits, "needs a float32 weight and a variable input")
            continue
        if node.op_type in ("Conv", "ConvTranspose") and attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET", b"VALID", "VALID"):
            _skip(node, inits, "auto_pad SAME_* is not supported")
            continue
        if node.op_type == "ConvTranspose" and ("output_shape" in attrs or _asymmetric(attrs.get("pads"))):
            _skip(node, inits, "ConvTranspose with output_shape or asymmetric pads")
            continue
        if node.op_type == "Gemm" and attrs.get("transA", 0):
            _skip(node, inits, "Gemm with transA")
            continue
        if node.op_type == "MatMul" and len(inits[weight].dims) != 2:
            _skip(node, inits, "MatMul with a batched weight")
            continue
        bias = node.input[2] if len(node.input) > 2 and node.input[2] else None
        if bias is not None and (bias not in inits or len(consumers.get(bias, [])) != 1):
            _skip(node, inits, "bias not a constant of its own")
            continue
        out = node.output[0]
        layer = Layer(node.name, node.op_type, node.input[0], weight, bias, out, attrs)
        nexts = consumers.get(out, [])
        if out not in outputs and len(nexts) == 1 and nexts[0].op_type in FUSED_ACTIVATIONS:
            act = nexts[0]
            act_attrs = _attrs(act)
            if act.op_type == "Clip":
                bounds = [act.input[i] if len(act.input) > i else "" for i in (1, 2)]
                if any(b and b not in inits for b in bounds):
                    act = None
                else:
                    act_attrs["min"] = float(tensor_values(inits[bounds[0]])) if bounds[0] else act_attrs.get("min", -np.inf)
                    act_attrs["max"] = float(tensor_values(inits[bounds[1]])) if bounds[1] else act_attrs.get("max", np.inf)
            if act is not None:
                layer.activation, layer.activation_attrs, layer.output = act.op_type, act_attrs, act.output[0]
        layers.append(layer)
    return layers


def _asymmetric(pads: Sequence[int] | None) -> bool:
    if not pads:
        return False
    half = len(pads) // 2
    return list(pads[:half]) != list(pads[half:])


def build_probe(quantized: onnx.ModelProto, layers: Sequence[Layer], keep_outputs: Sequence[str] = ()) -> tuple[onnx.ModelProto, dict[str, str]]:
    """The emitted model with each layer's weight/bias as graph inputs and its input as an output.

    Returns the probe and, per layer, the name of the tensor that layer reads as its (quantized)
    input. ``keep_outputs`` are graph outputs kept as outputs. Nodes no output depends on (the weights' own DequantizeLinear, the tail after the
    last layer) are pruned.
    """
    probe = onnx.ModelProto()
    probe.CopyFrom(quantized)
    graph = probe.graph
    by_name = {n.name: n for n in graph.node}
    graph_inputs = {i.name for i in graph.input}
    reads: dict[str, str] = {}
    new_inputs, new_outputs = [], []
    for layer in layers:
        node = by_name[layer.name]
        node.input[1] = WEIGHT_INPUT.format(layer.name)
        new_inputs.append(onnx.helper.make_tensor_value_info(node.input[1], onnx.TensorProto.FLOAT, None))
        if layer.bias is not None:
            node.input[2] = BIAS_INPUT.format(layer.name)
            new_inputs.append(onnx.helper.make_tensor_value_info(node.input[2], onnx.TensorProto.FLOAT, None))
        reads[layer.name] = node.input[0]
        if node.input[0] not in graph_inputs:
            new_outputs.append(node.input[0])
    graph.input.extend(new_inputs)
    # Only the layers' inputs (and the graph outputs asked for) are outputs, so the nodes after
    # the last layer are pruned away.
    kept = [o for o in graph.output if o.name in keep_outputs]
    del graph.output[:]
    graph.output.extend(kept)
    graph.output.extend(onnx.helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None)
                        for n in dict.fromkeys(new_outputs) if n not in set(keep_outputs))
    _prune(graph)
    return probe, reads


def float_probe(model: onnx.ModelProto, names: Sequence[str]) -> onnx.ModelProto:
    """The float model with ``names`` exposed as extra outputs."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    existing = {o.name for o in probe.graph.output} | {i.name for i in probe.graph.input}
    probe.graph.output.extend(onnx.helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None)
                              for n in dict.fromkeys(names) if n not in existing)
    return probe


def _prune(graph: onnx.GraphProto) -> None:
    """Drop nodes and initializers no graph output depends on."""
    needed = {o.name for o in graph.output}
    keep: list[onnx.NodeProto] = []
    for node in reversed(list(graph.node)):
        sub = set()
        for attr in node.attribute:
            for g in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
                sub |= {i for n in g.node for i in n.input}
        if any(o in needed for o in node.output):
            keep.append(node)
            needed.update(i for i in node.input if i)
            needed |= sub
    keep.reverse()
    del graph.node[:]
    graph.node.extend(keep)
    inits = [t for t in graph.initializer if t.name in needed]
    del graph.initializer[:]
    graph.initializer.extend(inits)


class Runner:
    """An onnxruntime session that fetches one tensor for every kept sample, batched when it can.

    Its threads do not spin between runs (``spin``): the refine step alternates onnxruntime passes
    with torch work, and spinning threads would take the cores torch needs (on the 2-core machine,
    spinning doubled the CPU time of a pass and its wall time under load).
    """

    def __init__(self, model: onnx.ModelProto, providers: list[Any], threads: int | None = None, spin: bool = False) -> None:
        self.session = open_session(model, providers=providers, threads=threads, spinning=spin)
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.batched: bool | None = None  # decided on the first fetch

    def fetch(self, name: str, feeds: Sequence[dict[str, np.ndarray]], extra: dict[str, np.ndarray] | None = None) -> np.ndarray:
        """``name`` for every sample of ``feeds``, concatenated along axis 0."""
        return self.fetch_many([name], feeds, extra)[name]

    def fetch_many(self, names: Sequence[str], feeds: Sequence[dict[str, np.ndarray]],
                   extra: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """Every tensor of ``names`` for every sample of ``feeds`` (one pass), concatenated along axis 0."""
        extra = extra or {}
        names = list(dict.fromkeys(names))
        if self.batched is not False:
            try:
                out = self._fetch_batched(names, feeds, extra)
                self.batched = True
                return out
            except _NotBatchable as exc:
                log.debug("finetune: samples run one by one (%s)", exc)
                self.batched = False
        runs = [self._run(names, {**f, **extra}) for f in feeds]
        return {n: np.concatenate([r[i] for r in runs], axis=0) for i, n in enumerate(names)}

    def _run(self, names: list[str], feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        feed = {k: v for k, v in feed.items() if k in self.input_names}
        return [np.asarray(a) for a in self.session.run(names, feed)]

    def _fetch_batched(self, names: list[str], feeds: Sequence[dict[str, np.ndarray]], extra: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        data_names = [k for k in feeds[0] if k in self.input_names]
        if any(set(f) != set(feeds[0]) or any(f[k].shape[1:] != feeds[0][k].shape[1:] or f[k].ndim == 0 for k in data_names) for f in feeds):
            raise _NotBatchable("samples differ in shape")
        parts: list[list[np.ndarray]] = []
        for start in range(0, len(feeds), CHUNK):
            chunk = feeds[start : start + CHUNK]
            rows = sum(f[data_names[0]].shape[0] for f in chunk)
            feed = {k: np.concatenate([f[k] for f in chunk], axis=0) for k in data_names}
            try:
                outs = self._run(names, {**feed, **extra})
            except Exception as exc:  # a fixed batch dimension: onnxruntime refuses the shape
                if self.batched:
                    raise
                raise _NotBatchable(str(exc).splitlines()[0]) from exc
            for n, out in zip(names, outs):
                if out.ndim == 0 or out.shape[0] != rows:
                    raise _NotBatchable(f"{n} has no batch axis")
            parts.append(outs)
        return {n: np.concatenate([p[i] for p in parts], axis=0) for i, n in enumerate(names)}


class Prefetch:
    """Tensors of one :class:`Runner` for every sample, fetched ahead: one pass fills many layers.

    onnxruntime computes the whole graph whatever is fetched, so asking for one layer's tensor
    costs as much as asking for all of them. ``get(name, at)`` therefore fetches, in the same
    pass, the tensors of ``order[at:]`` not yet cached, as many as fit in ``budget`` bytes (sizes
    taken from a one-sample pass). :meth:`refeed` changes the extra feeds (the refined weights) and
    drops what was computed with the old ones; :meth:`release` frees what no later layer reads.
    """

    def __init__(self, runner: Runner, order: Sequence[str], samples: Sequence[dict[str, np.ndarray]],
                 budget: int, extra: dict[str, np.ndarray] | None = None) -> None:
        self.runner = runner
        self.order = list(order)
        self.samples = samples
        self.budget = int(budget)
        self.extra = dict(extra or {})
        self.cache: dict[str, np.ndarray] = {}
        self.passes = 0
        self._bytes: dict[str, int] | None = None

    def _sizes(self) -> dict[str, int]:
        if self._bytes is None:
            names = list(dict.fromkeys(self.order))
            one = self.runner.fetch_many(names, self.samples[:1], self.extra) if names else {}
            self._bytes = {n: int(a.nbytes) * len(self.samples) for n, a in one.items()}
        return self._bytes

    def get(self, name: str, at: int = 0) -> np.ndarray:
        """``name`` for every sample; on a miss, also the tensors of ``order[at:]`` that fit the budget."""
        if name in self.cache:
            return self.cache[name]
        sizes = self._sizes()
        group, total = [name], sizes.get(name, 0)
        for other in dict.fromkeys(self.order[at:]):
            if other in self.cache or other == name:
                continue
            if total + sizes.get(other, 0) > self.budget:
                break
            group.append(other)
            total += sizes.get(other, 0)
        self.cache.update(self.runner.fetch_many(group, self.samples, self.extra))
        self.passes += 1
        return self.cache[name]

    def refeed(self, extra: dict[str, np.ndarray]) -> None:
        """New extra feeds: everything cached was computed with the old ones and is dropped."""
        self.extra = dict(extra)
        self.cache.clear()

    def release(self, keep: Sequence[str]) -> None:
        """Free the cached tensors not in ``keep``."""
        wanted = set(keep)
        for n in [n for n in self.cache if n not in wanted]:
            del self.cache[n]


class _NotBatchable(Exception):
    pass


def providers_for(device: str) -> list[Any]:
    """onnxruntime execution providers for InferDevice ``device`` ('cpu', 'cuda:N', 'hip:N').

    A GPU device whose provider is not installed is an error, never a silent CPU run.
    """
    import onnxruntime as ort

    if device == "cpu":
        return ["CPUExecutionProvider"]
    kind, _, ids = device.partition(":")
    index = int(ids.split(",")[0]) if ids else 0
    wanted = "CUDAExecutionProvider" if kind == "cuda" else "ROCMExecutionProvider"
    available = ort.get_available_providers()
    if wanted not in available:
        extra = "onnxruntime-gpu" if kind == "cuda" else "onnxruntime-rocm"
        raise RuntimeError(f"finetune InferDevice {device!r} needs onnxruntime's {wanted} (install {extra}); "
                           f"this onnxruntime has {', '.join(available)}")
    return [(wanted, {"device_id": index}), "CPUExecutionProvider"]
