"""Bias correction through the quantized upstream (Nagel et al., ICCV 2019, §4.2, applied in order).

Why: :mod:`.bias_correction` removes the mean shift each layer makes on its *float* input (its
rounded weights, its own input grid). What it cannot see is the shift that reaches a layer from
the quantized layers before it: a nonlinearity passes the *noise* of its input on as a mean shift
(``E[f(x + e)] ≠ f(x)`` where ``f`` curves: SiLU, HardSwish, Sigmoid), and a coarse grid after it
rounds that shifted distribution with a bias of its own. Under the reference tool's A8W8
(symmetric 8-bit activations, per-tensor weights, repair off; bench/RESULTS.md "The reference
preset on issue 27 item 6: bias correction through the quantized upstream"), matching each
layer's output to float's level by level took PP-OCRv4 det's mask agreement with float from 0.848
to 0.944 (output cosine 0.926 → 0.979) and YOLOv8n's output cosine from 0.9988 to 0.9997 (box
error 3.0 → 2.0 px; its box F1, 0.894 → 0.883, moves within the ±0.02 that equally good variants
scattered over on 96 images); the captcha reader 0.984 → 0.986.

Each element is weighted by the squared slope of the activation that reads the layer's output
(SiLU, Sigmoid, Relu, HardSwish), so that the match is made where an error reaches the next layer:
unweighted, the mean over YOLOv8n's many background positions (deep in SiLU's flat tail) set the
class branches' biases, and the scores of real detections came out 0.047 low on average; weighted,
0.002. And each channel's shift is shrunk by how much the calibration samples agree on it
(:func:`_agreed_shift`): deep layers' small maps differ from image to image.

Correcting every layer at once from one run of the quantized model does not work: a layer's
measured shift includes what its upstream layers pass on, which their own corrections remove, so
each level is corrected twice over and the error grows with depth (YOLOv8n F1 0.0). Hence levels:
a layer's level is the number of corrected layers on the longest path into it, and a level is
measured only after every level before it is corrected.

How, in about one forward pass: the quantized model's main graph is cut into segments by level;
step ``k`` runs the nodes after level ``k - 1``'s layers and then level ``k``'s layers, once per
sample on the cached tensors they read (one session a level); after it the level's new shifts are added to its layers' outputs in NumPy (a bias adds a per-channel constant
to a Conv/Gemm output, so this is exactly the corrected layer's output), and only tensors read
later are kept. The float model runs beside it the same way (the slope weights need its values
element by element). Both caches hold, per sample, the tensors that cross a level: at most
:data:`SAMPLES` samples are used, so that a large input does not hold dozens of feature maps.

Scope: the layers :mod:`.bias_correction` corrects that sit in the main graph and read their
data input through a symmetric integer grid of at most 8 bits (:func:`.bias_correction.input_quantizer`:
where the first-order input term was measured to help); a graph whose main graph holds a node with a
subgraph (If/Loop/Scan: bodies read outer tensors the cut would have to follow), or whose
weights are streamed to external data, is left to the first-order correction. The shifts are measured on the kept calibration samples.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Callable, Mapping, Sequence

import numpy as np
import onnx
from onnx import helper

from ...formats.integer import int_type
from ...graph.external import has_external, tensor_values
from ...graph.walk import subgraphs
from ...sessions import open_session
from ..plan import Plan
from ..solve import QParams
from .bias_correction import corrected_layers, input_quantizer

log = logging.getLogger(__name__)

#: the most calibration samples the pass runs (the first of those kept)
SAMPLES = 16


def _levels(graph: onnx.GraphProto, layers: set[str]) -> list[int]:
    """Per node (in graph order): the number of ``layers`` (by first output) on the longest path into
    it, itself included; nodes fed by constants only get -1 (they go with whichever segment reads
    them)."""
    constant = {t.name for t in graph.initializer}
    producer_level: dict[str, int] = {i.name: 0 for i in graph.input if i.name not in constant}
    level: list[int] = []
    for node in graph.node:  # the graph is topologically sorted (onnx requires it)
        ins = [producer_level[i] for i in node.input if i and i in producer_level]
        here = -1 if not ins else max(ins)
        if node.output and node.output[0] in layers:
            here = max(here, 0) + 1
        level.append(here)
        for out in node.output:
            if here >= 0:
                producer_level[out] = here
    return level


def _part(model: onnx.ModelProto, nodes: list[onnx.NodeProto], feeds: Mapping[str, np.ndarray],
          outputs: Sequence[str], inits: Mapping[str, onnx.TensorProto]) -> onnx.ModelProto:
    """A model of ``nodes`` (and the constant-only nodes they read) reading ``feeds``' names as
    inputs and returning ``outputs``."""
    made = {o for n in nodes for o in n.output}
    needed = {i for n in nodes for i in n.input if i and i not in made}
    graph = helper.make_graph(list(nodes), "segment", [], [], [])
    for name in sorted(needed):
        if name in feeds:
            value = feeds[name]
            graph.input.append(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(value.dtype), None))
        elif name in inits:
            graph.initializer.append(inits[name])
    graph.output.extend(onnx.ValueInfoProto(name=o) for o in outputs)
    part = helper.make_model(graph, opset_imports=list(model.opset_import), ir_version=model.ir_version)
    part.functions.extend(model.functions)
    return part


def _constant_closure(nodes: Sequence[onnx.NodeProto], level: Sequence[int]) -> dict[str, tuple[int, onnx.NodeProto]]:
    """Constant-only nodes (level -1), with their position, by each output they make."""
    return {o: (k, n) for k, n in enumerate(nodes) if level[k] < 0 for o in n.output}


def _with_constants(nodes: list[onnx.NodeProto], constants: Mapping[str, tuple[int, onnx.NodeProto]]) -> list[onnx.NodeProto]:
    """``nodes`` preceded by the constant-only nodes they read (transitively), in graph order."""
    seen: dict[int, onnx.NodeProto] = {}
    stack = [i for n in nodes for i in n.input]
    while stack:
        found = constants.get(stack.pop())
        if found is not None and found[0] not in seen:
            seen[found[0]] = found[1]
            stack.extend(found[1].input)
    return [seen[k] for k in sorted(seen)] + list(nodes)


def _channel_mean(value: np.ndarray) -> np.ndarray:
    return value.astype(np.float64).mean(axis=tuple(i for i in range(value.ndim) if i != 1))


def _agreed_shift(diffs: np.ndarray) -> np.ndarray:
    """The per-channel mean of ``diffs`` (samples × channels: float's channel mean minus the
    quantized model's, per sample) shrunk by how much the samples disagree on it: times
    ``max(0, 1 − se² / mean²)`` (``se`` the standard error of the mean, James–Stein's factor).

    Why: deep layers see few, small maps whose channel means differ from image to image; their
    shift on a handful of calibration samples is partly those images'. On YOLOv8n (reference A8W8)
    the shifts measured on 8 images were twice those on 12 in the deepest levels, and applied
    unshrunk they raised F1 by 0.002 where 12 images' raised it by 0.02."""
    mean = diffs.mean(axis=0)
    if diffs.shape[0] < 2:
        return np.zeros_like(mean)
    se2 = diffs.var(axis=0, ddof=1) / diffs.shape[0]
    with np.errstate(divide="ignore", invalid="ignore"):
        factor = np.where(mean != 0, np.clip(1.0 - se2 / np.square(mean), 0.0, 1.0), 0.0)
    return mean * factor


class _Stepper:
    """One model's main graph run level by level over cached samples (see the module doc)."""

    def __init__(self, model: onnx.ModelProto, layers: set[str], samples: Sequence[dict[str, np.ndarray]],
                 providers: Sequence[str]) -> None:
        graph = model.graph
        self.model, self.providers = model, providers
        level = _levels(graph, layers)
        nodes = list(graph.node)
        self.constants = _constant_closure(nodes, level)
        self.inits = {t.name: t for t in graph.initializer}
        self.last_read: dict[str, int] = {}
        for node, k in zip(nodes, level):
            if k >= 0:
                for i in node.input:
                    self.last_read[i] = max(self.last_read.get(i, 0), k)
        self.segments: dict[int, tuple[list[onnx.NodeProto], list[onnx.NodeProto]]] = defaultdict(lambda: ([], []))
        for node, k in zip(nodes, level):
            if k >= 0:
                self.segments[k][0 if node.output and node.output[0] in layers else 1].append(node)
        self.top = max((k for k, (a, _) in self.segments.items() if a), default=-1)
        self.inputs = {i.name for i in graph.input}
        self.cache = [dict(feed) for feed in samples]

    def run(self, k: int) -> None:
        """Runs, on every cached sample, what follows level ``k - 1``'s layers and then level ``k``'s
        layers (one session: nothing between them is corrected)."""
        nodes = self.segments[k - 1][1] + self.segments[k][0]
        if not nodes:
            return
        made = [o for n in nodes for o in n.output if o]
        outs = list(dict.fromkeys([o for o in made if self.last_read.get(o, -1) >= k]
                                  + [n.output[0] for n in self.segments[k][0]]))
        if not outs:
            return
        part = _part(self.model, _with_constants(nodes, self.constants), self.cache[0], outs, self.inits)
        session = open_session(part, providers=self.providers, spinning=False, optimization="none")
        feed_names = [i.name for i in session.get_inputs()]
        for c in self.cache:
            c.update(zip(outs, session.run(outs, {n: c[n] for n in feed_names})))

    def drop(self, k: int) -> None:
        """Forgets what no segment after level ``k`` reads."""
        for c in self.cache:
            for name in [n for n in c if self.last_read.get(n, -1) <= k and n not in self.inputs]:
                del c[name]


def _slope(model: onnx.ModelProto) -> Callable[[str, np.ndarray], np.ndarray | None]:
    """``slope(y, values)``: the derivative of the activation that alone reads ``y`` in ``model``,
    at ``values`` (SiLU written as Sigmoid and Mul, Sigmoid, Relu, HardSwish), or None (weight 1)."""
    readers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
    for node in model.graph.node:
        for i in node.input:
            readers[i].append(node)

    def slope(y: str, v: np.ndarray) -> np.ndarray | None:
        nodes = readers.get(y, [])
        kinds = sorted(n.op_type for n in nodes)
        if kinds == ["Mul", "Sigmoid"]:
            sig = next(n for n in nodes if n.op_type == "Sigmoid").output[0]
            mul = next(n for n in nodes if n.op_type == "Mul")
            if sorted(mul.input) == sorted([y, sig]):
                s = 1.0 / (1.0 + np.exp(-v.astype(np.float64)))
                return s * (1.0 + v * (1.0 - s))
        if kinds == ["Sigmoid"]:
            s = 1.0 / (1.0 + np.exp(-v.astype(np.float64)))
            return s * (1.0 - s)
        if kinds == ["Relu"]:
            return (v > 0).astype(np.float64)
        if kinds == ["HardSwish"]:
            return np.where(v < -3, 0.0, np.where(v > 3, 1.0, (2.0 * v + 3.0) / 6.0))
        return None

    return slope


def _weighted_diffs(yf: list[np.ndarray], yq: list[np.ndarray], slope: np.ndarray | None) -> np.ndarray:
    """Per sample × channel: the mean of ``yf − yq`` weighted by the squared activation slope."""
    rows = []
    for f, q, w in zip(yf, yq, slope if slope is not None else [None] * len(yf)):
        d = f.astype(np.float64) - q.astype(np.float64)
        if w is None:
            rows.append(_channel_mean(d))
            continue
        w = np.square(w)
        axes = tuple(i for i in range(d.ndim) if i != 1)
        den = w.sum(axis=axes)
        rows.append(np.where(den > 0, (w * d).sum(axis=axes) / np.maximum(den, 1e-30), 0.0))
    return np.stack(rows)


def sequential_shifts(float_model: onnx.ModelProto, quantized: onnx.ModelProto, layers: Sequence[str],
                      samples: Sequence[dict[str, np.ndarray]], providers: Sequence[str] = ("CPUExecutionProvider",)
                      ) -> dict[str, np.ndarray]:
    """Per layer (``layers``: the first outputs of Conv/Gemm nodes of both models' main graphs,
    the same names in both): the per-channel amount to add to its bias so that, level by level,
    its output in ``quantized`` on ``samples`` matches its output in ``float_model`` on average,
    each element weighted by the squared slope of the activation after the layer. Empty where
    either main graph holds a subgraph node or nothing applies (see the module doc)."""
    if (not samples or not layers or any(next(subgraphs(n), None) is not None for m in (float_model, quantized) for n in m.graph.node)
            or has_external(float_model) or has_external(quantized)):
        return {}  # a streamed model's weights sit in a file the cut-out segments would not find
    made_q = {n.output[0] for n in quantized.graph.node if n.output}
    made_f = {n.output[0] for n in float_model.graph.node if n.output}
    wanted = {name for name in layers if name in made_q and name in made_f}
    if not wanted:
        return {}
    fl, qu = _Stepper(float_model, wanted, samples, providers), _Stepper(quantized, wanted, samples, providers)
    slope = _slope(float_model)
    shifts: dict[str, np.ndarray] = {}
    top = min(fl.top, qu.top)
    for k in range(1, top + 1):
        fl.run(k)
        qu.run(k)
        for node in qu.segments[k][0]:
            y = node.output[0]
            if y not in fl.cache[0]:
                continue
            yf = [c[y] for c in fl.cache]
            w = [slope(y, v) for v in yf]
            if w[0] is None:
                w = None
            shift = _agreed_shift(_weighted_diffs(yf, [c[y] for c in qu.cache], w))
            shifts[y] = shift
            view = shift.reshape((1, -1) + (1,) * (qu.cache[0][y].ndim - 2))
            for c in qu.cache:
                c[y] = (c[y] + view).astype(c[y].dtype)
        fl.drop(k - 1)
        qu.drop(k - 1)
    log.info("sequential bias correction: %d layer(s) over %d level(s) on %d sample(s)", len(shifts), top, len(samples))
    return shifts


#: the key under which a search's :class:`~onnxptq.pipeline.emit.ConstantReuse` records that the
#: shifts were measured (on its first build)
_MEASURED = ("sequential bias correction", "measured")


def _coarse(quantizer: tuple[str, dict] | None) -> bool:
    """Whether a layer's input quantizer (:func:`.bias_correction.input_quantizer`) is a symmetric
    integer grid of at most 8 bits: where the upstream noise, and so the shift it passes on, was
    measured (16-bit grids' noise is 256 times smaller, their shift below what a few samples can
    tell from zero, and the pass would cost its forward run for nothing)."""
    return quantizer is not None and int_type(quantizer[0]).bits <= 8


def sequential_corrections(calibrated, plan: Plan, params: dict[str, QParams], prepared: onnx.ModelProto,
                           quantized: onnx.ModelProto, reuse=None,
                           providers: Sequence[str] = ("CPUExecutionProvider",)) -> dict[str, np.ndarray]:
    """New biases for ``prepared`` (the first-order corrected model ``quantized`` was emitted from):
    each plus its layer's :func:`sequential_shifts` (layers that read a symmetric integer grid, see
    the module doc). ``calibrated``: its float ``prepared`` model is the reference, its ``kept``
    samples the data.

    ``reuse`` (a search's :class:`~onnxptq.pipeline.emit.ConstantReuse`): only the search's first
    build (the plain one) is corrected so; the candidates of repair's search that follow keep the
    first-order correction. Why: the shifts of the all-8-bit build, kept for candidates that raise
    a tenth to a third of the nodes to 16 bits, over-correct them (their upstream noise, and so
    the shift, is smaller); on YOLOv8n under the reference A8W8 repair then delivered F1 0.915
    instead of 0.946; and measuring per candidate costs a forward pass and a session per level
    each, for tens of candidates.
    """
    layers = [(node, w_name, b_name) for node, w_name, b_name in corrected_layers(calibrated.prepared, plan)
              if node.output and _coarse(input_quantizer(node, plan, params))]
    if not layers:
        return {}
    if reuse is not None and _MEASURED in reuse.corrections:
        return {}
    by_output = sequential_shifts(calibrated.prepared, quantized, [node.output[0] for node, _, _ in layers],
                                  calibrated.kept[:SAMPLES], providers)
    shifts = {b_name: by_output[node.output[0]] for node, _, b_name in layers if node.output[0] in by_output}
    if reuse is not None:
        reuse.corrections[_MEASURED] = np.zeros(0)
    if not shifts:
        return {}
    inits = {t.name: t for t in prepared.graph.initializer}
    out = {}
    for b_name, shift in shifts.items():
        if b_name in inits:
            bias = tensor_values(inits[b_name])
            out[b_name] = (bias.astype(np.float64) + shift).astype(bias.dtype)
    return out
