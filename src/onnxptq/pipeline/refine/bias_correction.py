"""Empirical bias correction (Nagel et al., ICCV 2019, §4.2; the reference tool's ``BiasCorrection``).

Why: rounding a weight tensor to a coarse grid gives ``W̃ = W + ΔW``, and a layer's output then
carries the error ``ΔW x``. Its mean per output channel, ``ΔW E[x]``, is not zero in general (a
per-tensor grid rounds whole small channels the same way), so it shifts every activation after it
and the errors of later layers add to it. Subtracting ``E[ΔW x]`` from the bias removes that shift
at no cost. Per-tensor weights gain most; per-channel ones are already fine-grained.

The layer's own input quantizer adds a mean shift too, and the correction removes it with the
weights': where the layer reads its data input through a symmetric integer quantizer
(:func:`input_quantizer` says why only those), the probe measures
``E[op(Q(x), W̃)] − E[op(x, W)]`` (``Q``: that quantizer as emitted, ``x``: the float input), which
is ``E[ΔW x]`` plus ``E[W̃ (Q(x) − x)]`` (NNCF's fast bias correction measures the same). Why: round
to nearest is unbiased only where values spread evenly over a step; a coarse grid (a symmetric
8-bit grid sized by a few large activations, as the reference tool's A8W8 puts on SiLU outputs)
rounds the many values within half a step of zero to zero and the dip of SiLU to one code, a mean
error per channel that every later layer adds to. On YOLOv8n under that preset (MinMax, symmetric
activations, per-tensor weights, repair off) box F1 against float went 0.857 → 0.894 on 96
held-out images, where the weights' term alone scored below no correction at all (0.872;
bench/RESULTS.md "A8W8 and its peers on issue 27 item 6"). The term is first order, one layer at
a time on float inputs (no upstream error), so one probe run still serves every layer.

How: the paper's analytic form needs ``E[x]`` from BatchNorm statistics, which are gone once
BatchNorm is folded, so ``E[ΔW x]`` is measured on the calibration samples kept by
:func:`onnxptq.pipeline.calibrate.calibrate_once` (:data:`~onnxptq.config.schema.BIAS_CORRECTION_SAMPLES`
of them, bounded): one probe
model computes, for every corrected layer, the layer's own op applied to its float input with
``ΔW`` as the weight and no bias, reduced to a per-channel mean in the graph (padding, strides and
groups are then exactly those of the layer). Only the means leave onnxruntime, so memory is one
vector per layer, whatever the sample count. Where a layer's input has no integer quantizer (the
block and float formats: the weights' term alone, linear in ``x``), the calibration pass's own runs
of the kept samples take the statistic instead (:class:`InputMeans`: each input's mean kernel taps,
contracted with ``ΔW`` here), and the probe is built only for the layers left (If branches, integer
inputs): no second float run of the kept samples (PP-OCRv4 rec MXFP8_E4M3: ~0.8 CPU s).

Scope: Conv and Gemm (1-D bias, ``transA`` 0) with quantized weights of any format, a constant
bias that only this node reads (a shared bias would move under another layer), in the main graph
or inside If branches (nested too): the probe's ΔW op and mean sit beside the layer in its branch,
and :func:`onnxptq.calibration.bodies.expose` passes the mean out to the main graph; a sample that
takes the other branch returns an empty mean and is not counted for that layer. Why bodies:
silero VAD holds every layer inside an If on the sample rate, and with per-tensor weights its
speech decisions agreed with float on 0.926 of frames without the correction and 0.979 with it
(bench/RESULTS.md "Per-tensor integer presets, second round"). Layers inside Loop/Scan bodies are
left alone (a mean per iteration would weight samples by their iteration count), as are layers
whose weight or bias name is an initializer of more than one graph (the new bias goes by name).
The automatic rule (``QuantConfig.bias_correction_active``) turns it on for per-tensor integer
weights, and for MX weights with a floating-point element (MXFP8/6/4: the bias stays float in the
FP32 accumulator, so the correction is exact) where the accuracy floor judges held-out feeds rather
than the calibration feeds the correction is fitted on (bench/RESULTS.md "MXFP8 and MXINT8 on
readers and the ViT, second round"); asked for (``bias_correction=True``) it corrects the other
float-format weights too (BF16, BFP, MXINT8, FP8): ddddocr's first Conv reads raw pixels of a bright background with cancelling weights
(up to 22 in magnitude, a channel's |Σw| down to 0.0003 of Σ|w|), and bf16 rounding of those
weights alone shifts its output by a per-channel constant (93 % of the error's power) that changed
5 of 192 held-out strings; corrected, BF16 changed 1 (bench/RESULTS.md, "ddddocr_ocr reads").
"""

from __future__ import annotations

import logging
from typing import Any, Collection, Mapping, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ...calibration.runner import SideFetch
from ...graph.call_attributes import call_attributes
from ...graph.external import tensor_values
from ...graph.opsets import is_onnx_domain, model_opset
from ...graph.walk import ScopeIndex, all_graphs
from ...calibration.bodies import expose
from ..emit import Rounded, fake_quantize_in_slices, quantizer_attrs
from ...onnx_ops.qdq import build_qdq
from ..plan import Plan
from ..solve import QParams
from ...sessions import open_session

log = logging.getLogger(__name__)



def _initializers(model: onnx.ModelProto) -> tuple[dict[str, onnx.TensorProto], set[str]]:
    """Every initializer of every graph by name, and the names more than one graph defines."""
    inits: dict[str, onnx.TensorProto] = {}
    repeated: set[str] = set()
    for graph in all_graphs(model.graph):
        for t in graph.initializer:
            if t.name in inits:
                repeated.add(t.name)
            inits[t.name] = t
    return inits, repeated


def corrected_layers(model: onnx.ModelProto, plan: Plan) -> list[tuple[onnx.NodeProto, str, str]]:
    """(node, weight name, bias name) of every layer this correction applies to, main graph and
    If branches (see the module doc)."""
    index = ScopeIndex(model)
    inits, repeated = _initializers(model)
    readers: dict[str, int] = {}
    for node in index.nodes():
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1
    out = []
    for scope in index.scopes:
        if scope.inside_loop():
            continue
        for node in scope.nodes:
            if node.op_type not in ("Conv", "Gemm") or not is_onnx_domain(node.domain) or len(node.input) < 3:
                continue
            w_name, b_name = node.input[1], node.input[2]
            tplan = plan.tensors.get(w_name)
            if tplan is None or tplan.role != "weight":
                continue
            if w_name not in inits or b_name not in inits or readers.get(b_name, 0) != 1 or {w_name, b_name} & repeated:
                continue
            attrs = call_attributes((), node)
            if node.op_type == "Gemm" and (attrs.get("transA", 0) or attrs.get("beta", 1.0) == 0.0
                                           or tensor_values(inits[b_name]).ndim != 1):
                continue  # beta 0: the bias does not reach the output, there is nothing to correct
            out.append((node, w_name, b_name))
    return out


class InputMeans(SideFetch):
    """The statistic the correction needs of a layer's float input, taken by the calibration pass's own
    runs of the kept samples (:func:`onnxptq.calibration.runner.collect`'s ``side``) instead of a probe
    session that runs the float model over them a second time.

    Why it can: where a layer's input has no integer quantizer of its own (:func:`input_quantizer`;
    every layer of the block and float formats, whose weights' rounding is known before calibration),
    the correction is ``E[op(x, ΔW)]`` alone, and Conv and Gemm are linear in ``x`` (zero padding is a
    constant 0): the channel mean of ``op(x, ΔW)`` over samples and output positions is
    ``Σ ΔW[c, j, k] · M[j, k]``, with ``M[j, k]`` the mean over the same samples and positions of the
    input value the kernel's tap ``k`` reads on input channel ``j`` (the layer's padding, strides and
    dilations). ``M`` is one small array per layer (input channels × kernel taps), reduced in the graph
    by a Conv with one-hot weights (one output per channel and tap, ``group`` = input channels: it
    copies each tap's input exactly) and a ``ReduceMean``; a 1×1 Conv without stride or padding and a
    Gemm read the channel means of ``x`` itself. Where those taps would cost more than ``op(x, ΔW)``
    (a depthwise Conv: :func:`_taps_cheaper`), the mean of ``op(x, ΔW)`` itself is taken, as the probe
    takes it, with the weight rounded as the plan calibration made rounds it (block formats need no
    solved parameter), and it serves a build that rounds the weight the same (:func:`_captured_shift`).
    So memory is one vector per layer, whatever the sample count, and the pass adds ~2 nodes a layer
    instead of the probe's second float run of every kept sample (PP-OCRv4 rec MXFP8_E4M3: ~0.8 of
    ~3.9 CPU s; bench/RESULTS.md, blockq18).

    What changes: the sums. The probe reduced ``op(x, ΔW)`` in float32; here ``M`` is reduced in
    float32 and contracted with ``ΔW`` in float64, so the corrected biases agree with the probe's to
    float32 rounding, not bit for bit (bench/RESULTS.md, blockq18, measures the outputs). Each feed's
    means are weighted by its batch (the model's first input's first axis), as the probe weighted them.

    Scope: the main graph's layers of :func:`corrected_layers` with float32 weights in a non-integer
    format (an integer weight's grid depends on the solved activation scale: ``bias_fit``). A layer
    whose input has an integer quantizer after solve, one in an If branch, or any layer where fewer than
    the kept samples were run (:meth:`means`) is probed as before."""

    def __init__(self, model: onnx.ModelProto, plan: Plan, samples: int) -> None:
        opset = model_opset(model)
        inits, _ = _initializers(model)
        produced = {o for n in model.graph.node for o in n.output}
        main = {i.name for i in model.graph.input} | produced
        first = next((i for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}), None)
        nodes: dict[str, list[onnx.NodeProto]] = {}
        self.initializers: list[onnx.TensorProto] = []
        #: per layer (its node's first output): the output holding its input's mean, and the mean's shape
        self.layers: dict[str, tuple[str, tuple[int, ...]]] = {}
        #: the rounded weight of each layer whose shift itself is taken (:func:`_taps_cheaper`)
        self.rounded: dict[str, np.ndarray] = {}
        for i, (node, w_name, _) in enumerate(corrected_layers(model, plan)):
            w = inits[w_name]
            if (node.output[0] not in produced or node.input[0] not in main  # an If branch's layer: probed
                    or w.data_type != onnx.TensorProto.FLOAT or plan.tensors[w_name].quant.is_integer):
                continue
            tplan = plan.tensors[w_name]
            if _taps_cheaper(node, list(w.dims)):
                made = _mean_nodes(node, list(w.dims), f"__bc_in_{i}", opset)
            elif tplan.quant.format in ("bfp", "mx"):  # rounded without solved parameters: known now
                values = tensor_values(w)
                wq = fake_quantize_in_slices(values, tplan.quant.format, quantizer_attrs(tplan, None))
                delta = (wq.astype(np.float64) - values.astype(np.float64)).astype(np.float32)
                made = _shift_nodes(node, delta, f"__bc_in_{i}", opset)
                self.rounded[node.output[0]] = wq
            else:
                made = None
            if made is None:
                continue
            steps, consts, out, shape = made
            nodes.setdefault(node.input[0], []).extend(steps)
            self.initializers.extend(consts)
            self.layers[node.output[0]] = (out, shape)
        self.batch_name = "__bc_in_batch"
        if self.layers and first is not None:
            nodes.setdefault(first.name, []).append(helper.make_node("Shape", [first.name], [self.batch_name]))
        self.nodes = nodes
        self.outputs = [out for out, _ in self.layers.values()] + ([self.batch_name] if self.layers and first else [])
        self.feeds = samples if self.layers else 0
        self.sums = {k: np.zeros(shape, np.float64) for k, (_, shape) in self.layers.items()}
        self.counts = dict.fromkeys(self.layers, 0)
        self.taken = 0

    def take(self, values: Mapping[str, np.ndarray]) -> None:
        """One feed's input means, weighted by its batch, added to the layers' sums (nothing else kept)."""
        if self.taken >= self.feeds:
            return
        shape = np.asarray(values[self.batch_name]) if self.batch_name in values else np.zeros(0, np.int64)
        batch = int(shape[0]) if shape.size else 1
        for key, (out, dims) in self.layers.items():
            value = np.asarray(values[out], np.float64)
            if value.size:
                self.sums[key] += value.reshape(dims) * batch
                self.counts[key] += batch
        self.taken += 1

    def means(self, kept: int) -> dict[str, tuple[np.ndarray, np.ndarray | None]] | None:
        """Per captured layer (by its node's first output): its mean input taps and None, or its mean
        shift and the rounded weight it was measured with; None unless exactly the ``kept`` samples
        the correction is fitted on were run."""
        if not self.layers or self.taken != kept or kept == 0:
            return None
        return {k: (self.sums[k] / self.counts[k], self.rounded.get(k)) for k in self.layers if self.counts[k]}


def _taps_cheaper(node: onnx.NodeProto, w_dims: list[int]) -> bool:
    """Whether a layer's mean input taps cost its calibration runs less than its ``op(x, ΔW)``: a
    Gemm's and a plain 1×1 Conv's always (a mean of ``x``); otherwise the taps' one-hot Conv makes
    ``K`` outputs per input channel (``C·K²`` products a position against ``C_out·C/group·K``), and
    onnxruntime's grouped Conv spends ~3.5× a dense Conv's time per product (3×3 at batch 1, one
    thread: taps ÷ ΔW Conv 0.30 at 128 outputs, 0.52 at 64, 1.05 at 32, 1.62 at 16, where products
    alone say 0.07-0.56; bench/RESULTS.md, blockq18), so only where ``4·K·group < C_out``; a
    depthwise or few-output Conv has its ``ΔW`` Conv's mean taken instead (with the taps everywhere,
    PP-OCRv4 det's MXFP8_E4M3 quantize cost more than the probe it saved)."""
    if node.op_type == "Gemm" or len(w_dims) < 3:
        return True
    attrs = call_attributes((), node)
    if _plain_1x1(attrs, w_dims[2:]):
        return True  # the mean of x itself
    return 4 * int(np.prod(w_dims[2:])) * max(int(attrs.get("group", 1)), 1) < w_dims[0]


def _plain_1x1(attrs: Mapping[str, Any], kernel: Sequence[int]) -> bool:
    """Whether a Conv reads each input position once, as itself: a 1×1 kernel at stride 1 without pads
    (``auto_pad`` changes nothing there: SAME pads a 1×1 kernel at stride 1 by 0)."""
    return (all(k == 1 for k in kernel) and all(v == 1 for v in attrs.get("strides", [1]))
            and not any(attrs.get("pads", [0])))


def _shift_nodes(node: onnx.NodeProto, delta: np.ndarray, prefix: str, opset: int
                 ) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto], str, tuple[int, ...]]:
    """The nodes that reduce ``op(x, ΔW)`` (the layer's own attributes, no bias) to its channel means,
    as the probe does (:func:`_probe`)."""
    attrs = call_attributes((), node)
    out = prefix + "_shift"
    consts = [numpy_helper.from_array(delta, prefix + "_dw")]
    steps = [helper.make_node(node.op_type, [node.input[0], prefix + "_dw"], [prefix + "_y"], **attrs)]
    axes = [0] + list(range(2, delta.ndim))
    _channel_mean(prefix + "_y", out, axes, prefix + "_axes", opset, steps, consts)
    return steps, consts, out, (delta.shape[0],)


def _mean_nodes(node: onnx.NodeProto, w_dims: list[int], prefix: str, opset: int
                ) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto], str, tuple[int, ...]] | None:
    """The nodes that reduce ``node``'s input to the means :class:`InputMeans` keeps: (nodes, their
    constants, the mean's name, its shape: ``[K]`` for a Gemm, ``[C_in, *kernel]`` for a Conv)."""
    attrs = call_attributes((), node)
    x, out = node.input[0], prefix + "_mean"
    steps: list[onnx.NodeProto] = []
    consts: list[onnx.TensorProto] = []
    if node.op_type == "Gemm":
        if len(w_dims) != 2:
            return None
        axes, shape = [0], (w_dims[1] if attrs.get("transB", 0) else w_dims[0],)
    else:
        kernel = list(attrs.get("kernel_shape", w_dims[2:]))
        if len(w_dims) < 3 or kernel != list(w_dims[2:]):
            return None
        channels = w_dims[1] * int(attrs.get("group", 1))
        axes, shape = [0] + list(range(2, 2 + len(kernel))), (channels, *kernel)
        if not _plain_1x1(attrs, kernel):
            # one output per (channel, tap): channel j's tap k lands on output j·K + k, exactly its value
            taps = int(np.prod(kernel))
            onehot = np.zeros((channels * taps, 1, *kernel), np.float32)
            onehot.reshape(channels, taps, taps)[:, np.arange(taps), np.arange(taps)] = 1.0
            consts.append(numpy_helper.from_array(onehot, prefix + "_taps"))
            keep = {k: v for k, v in attrs.items() if k in ("strides", "pads", "dilations", "auto_pad")}
            steps.append(helper.make_node("Conv", [x, prefix + "_taps"], [prefix + "_patches"], group=channels,
                                          kernel_shape=kernel, **keep))
            x = prefix + "_patches"
    _channel_mean(x, out, axes, prefix + "_axes", opset, steps, consts)
    return steps, consts, out, shape


def _channel_mean(y: str, out: str, axes: list[int], axes_name: str, opset: int,
                  nodes: list[onnx.NodeProto], consts: list[onnx.TensorProto]) -> None:
    """Append ``out = ReduceMean(y, axes, keepdims=0)`` in the opset's spelling (axes an input from 18)."""
    if opset >= 18:
        consts.append(numpy_helper.from_array(np.array(axes, np.int64), axes_name))
        nodes.append(helper.make_node("ReduceMean", [y, axes_name], [out], keepdims=0))
    else:
        nodes.append(helper.make_node("ReduceMean", [y], [out], keepdims=0, axes=axes))


def _captured_shift(node: onnx.NodeProto, delta: np.ndarray, rounded: np.ndarray,
                    entry: tuple[np.ndarray, np.ndarray | None] | None) -> np.ndarray | None:
    """A layer's mean shift from what :class:`InputMeans` took: from its input taps, or the shift itself
    where it was measured with the weight rounded as now; None otherwise (the layer is probed)."""
    if entry is None:
        return None
    value, seen = entry
    if seen is None:
        return _shift_from_means(node, delta, value)
    return value if seen.dtype == rounded.dtype and np.array_equal(seen, rounded, equal_nan=True) else None


def _shift_from_means(node: onnx.NodeProto, delta: np.ndarray, mean: np.ndarray) -> np.ndarray | None:
    """``E[op(x, ΔW)]`` per output channel from the layer's mean input taps (:class:`InputMeans`), in
    float64; None where the means do not fit the weight (then the layer is probed)."""
    d = delta.astype(np.float64)
    attrs = call_attributes((), node)
    if node.op_type == "Gemm":
        b = d.T if attrs.get("transB", 0) else d  # [K, N]
        if mean.shape != (b.shape[0],):
            return None
        return float(attrs.get("alpha", 1.0)) * (mean @ b)
    group = int(attrs.get("group", 1))
    cout, cin_g = d.shape[0], d.shape[1]
    if mean.shape != (cin_g * group, *d.shape[2:]) or cout % group:
        return None
    per = cout // group
    taps = mean.reshape(group, cin_g, -1)  # [group, C_in/group, K]
    flat = d.reshape(group, per, cin_g, -1)  # [group, C_out/group, C_in/group, K]
    return np.einsum("gojk,gjk->go", flat, taps).reshape(cout)


def _layers(model: onnx.ModelProto, plan: Plan, only: Collection[str] | None = None) -> list[tuple[onnx.NodeProto, np.ndarray, str]]:
    """(node, float weight, bias name) of every layer this correction applies to (``only``: of
    those whose weight is named there)."""
    inits, _ = _initializers(model)
    return [(node, tensor_values(inits[w_name]), b_name) for node, w_name, b_name in corrected_layers(model, plan)
            if only is None or w_name in only]


def input_quantizer(node: onnx.NodeProto, plan: Plan, params: dict[str, QParams]) -> tuple[str, dict[str, Any]] | None:
    """(format, quantizer attributes) of the integer quantizer ``node`` reads its data input
    through, or None where that input stays float or is on no integer grid (a float or block
    format's quantizer is a function the probe does not build, and the float-weight corrections
    this module also makes are for float activations), or where a producer-side quantizer comes
    first (what the layer reads is then two roundings, not one). Part of a layer's correction
    (:func:`correct_biases`), so also of the key a search keeps the correction under.

    Symmetric grids only: there the term was measured to help, on the reference tool's A8W8
    (YOLOv8n box F1 0.857 → 0.894, PP-OCRv4 det mask agreement 0.811 → 0.848; the captcha reader,
    silero and PP-OCR cls within a read or a frame), while on our asymmetric per-tensor A8W8 it
    lowered PP-OCRv4 det 0.934 → 0.916 and silero (ifless) 0.966 → 0.959 (bench/RESULTS.md "A8W8
    and its peers on issue 27 item 6"). Why, as far as measured: a symmetric grid on one-signed
    data (SiLU, ReLU outputs) spends half its codes on values that never occur, so its step is
    about twice an asymmetric grid's and the bulk near zero rounds with a larger, steadier mean
    error; an asymmetric grid's smaller shift is of the size of what the few calibration samples
    cannot estimate, so correcting it added error on held-out data."""
    name = node.input[0]
    xplan = plan.tensors.get(name)
    if (xplan is None or xplan.role != "activation" or not xplan.quant.is_integer or not xplan.quant.symmetric
            or params.get(name) is None
            or xplan.producer_quant is not None or (xplan.consumers and node.name not in xplan.consumers)):
        return None
    return xplan.quant.format, quantizer_attrs(xplan, params[name])


def _probe(model: onnx.ModelProto, layers: Sequence[tuple[onnx.NodeProto, np.ndarray, str]],
           deltas: Sequence[np.ndarray], inputs: Sequence[tuple[str, dict] | None] | None = None) -> tuple[onnx.ModelProto, list[str]]:
    """``model`` plus, per layer, its op on its float input with weight ΔW, plus (``inputs[i]``
    given) the same op with the rounded weight on ``Q(x) − x``, reduced to channel means: beside
    the layer in its own graph, a body's mean passed out to the main graph."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    index = ScopeIndex(probe)
    means = []
    opset = model_opset(probe)
    for i, ((node, w, _), delta) in enumerate(zip(layers, deltas)):
        scope = index.home[node.output[0]]
        graph = scope.graph
        w_name, y_name, m_name = f"__bc_dw_{i}", f"__bc_y_{i}", f"__bc_mean_{i}"
        graph.initializer.append(numpy_helper.from_array(delta, w_name))
        attrs = call_attributes((), node)
        if node.op_type == "Gemm":
            attrs["beta"] = 0.0
        x_name = node.input[0]
        if w.dtype != np.float32:
            # An fp16 (or double) model: the layer reads a tensor of its weight's type, while ΔW and
            # the probe's means are float32 (a Conv binds one type to both); cast the input up.
            x_name = f"__bc_x_{i}"
            graph.node.append(helper.make_node("Cast", [node.input[0]], [x_name], to=onnx.TensorProto.FLOAT))
        graph.node.append(helper.make_node(node.op_type, [x_name, w_name], [y_name], **attrs))
        act = inputs[i] if inputs is not None else None
        if act is not None and w.dtype == np.float32:
            fmt, qattrs = act
            frag = build_qdq(fmt, node.input[0], f"__bc_xq_{i}", name=f"__bc_q_{i}", opset=opset, **qattrs)
            if frag.min_opset <= opset and not frag.functions:
                graph.node.extend(frag.nodes)
                graph.initializer.extend(frag.initializers)
                graph.initializer.append(numpy_helper.from_array((w.astype(np.float64) + delta).astype(np.float32), f"__bc_wq_{i}"))
                graph.node.append(helper.make_node("Sub", [f"__bc_xq_{i}", node.input[0]], [f"__bc_dx_{i}"]))
                graph.node.append(helper.make_node(node.op_type, [f"__bc_dx_{i}", f"__bc_wq_{i}"], [f"__bc_yx_{i}"], **attrs))
                graph.node.append(helper.make_node("Add", [y_name, f"__bc_yx_{i}"], [f"__bc_yt_{i}"]))
                y_name = f"__bc_yt_{i}"
        # Mean over every axis but the channel one (1 for both Conv and 2-D Gemm output).
        rank = 2 if node.op_type == "Gemm" else delta.ndim
        axes = [0] + list(range(2, rank))
        nodes: list[onnx.NodeProto] = []
        consts: list[onnx.TensorProto] = []
        _channel_mean(y_name, m_name, axes, f"__bc_axes_{i}", opset, nodes, consts)
        graph.node.extend(nodes)
        graph.initializer.extend(consts)
        if scope.is_main:
            graph.output.append(helper.make_tensor_value_info(m_name, onnx.TensorProto.FLOAT, None))
        else:
            # typed, so that the other branch's stand-in is an empty float vector
            graph.value_info.append(helper.make_tensor_value_info(m_name, onnx.TensorProto.FLOAT, [None]))
        means.append(m_name)
    exposed = expose(probe, means)  # main-graph means stay where they are
    return exposed.model, [exposed.outer.get(m, m) for m in means]


def correct_biases(model: onnx.ModelProto, plan: Plan, params: dict[str, QParams],
                   samples: Sequence[dict[str, np.ndarray]], providers: Sequence[str] = ("CPUExecutionProvider",),
                   only: Collection[str] | None = None, rounded: Rounded | None = None,
                   means: Mapping[str, tuple[np.ndarray, np.ndarray | None]] | None = None) -> dict[str, np.ndarray]:
    """New values of the biases of ``model``'s quantized-weight Conv/Gemm layers: each minus the
    mean output shift its rounded weights and its own integer input quantizer cause on ``samples``
    (see the module doc). ``only``: the layers whose weight is named there (the others' corrections
    are already known: a layer's own, on its float input, does not depend on which other layers
    are quantized).

    ``rounded``: filled with each float32 layer weight's rounded values as emit rounds them
    (:class:`~onnxptq.pipeline.emit.Rounded`), so that emit takes them instead of rounding the same
    weights again (:func:`onnxptq.pipeline.build.build_model`).

    ``means``: what the calibration pass took on ``samples`` (:meth:`InputMeans.means`, by each layer's
    first output): a layer found there whose input has no integer quantizer is corrected from its
    mean input taps, or from its mean shift where that was measured with the weight rounded as now,
    and only the others are probed.

    Returns {bias tensor name: corrected bias}; empty when nothing applies or no sample is given.
    """
    if not samples:
        log.warning("bias correction skipped: no calibration samples were kept")
        return {}
    layers = _layers(model, plan, only)
    if not layers:
        return {}
    deltas, weights = [], []
    for node, w, _ in layers:
        tplan = plan.tensors[node.input[1]]
        attrs = quantizer_attrs(tplan, params.get(node.input[1]))
        # emit's rounding (the reference's bits; MXINT8/MXFP in float32, formats/mx_float32.py), so
        # that what it hands emit below is what emit would compute
        wq = fake_quantize_in_slices(w.astype(np.float32), tplan.quant.format, attrs)
        deltas.append((wq.astype(np.float64) - w.astype(np.float64)).astype(np.float32))
        weights.append(wq)
        if rounded is not None and w.dtype == np.float32 and not tplan.quant.is_integer:  # emit folds these
            rounded.put(node.input[1], tplan.quant.format, attrs, wq)
    inputs = [input_quantizer(node, plan, params) for node, _, _ in layers]
    shifts: list[np.ndarray | None] = [
        _captured_shift(node, delta, wq, means.get(node.output[0])) if means is not None and act is None else None
        for (node, _, _), delta, wq, act in zip(layers, deltas, weights, inputs)]
    probed = [k for k, shift in enumerate(shifts) if shift is None]
    if probed:
        measured = _probed_shifts(model, [layers[k] for k in probed], [deltas[k] for k in probed],
                                  [inputs[k] for k in probed], samples, providers)
        for k, shift in zip(probed, measured):
            shifts[k] = shift
    inits, _ = _initializers(model)
    out: dict[str, np.ndarray] = {}
    for (node, _, b_name), shift in zip(layers, shifts):
        if shift is None:
            continue  # no sample ran this layer's branch: no evidence, the bias stays
        if not np.all(np.isfinite(shift)):
            log.warning("bias correction: %r left as it was (its input's mean is not finite on the kept samples)", b_name)
            continue
        bias = tensor_values(inits[b_name])
        if node.op_type == "Gemm":
            shift = shift / next((a.f for a in node.attribute if a.name == "beta"), 1.0)
        out[b_name] = (bias.astype(np.float64) - shift).astype(bias.dtype)
    log.info("bias correction: %d layer(s) on %d sample(s), %d from calibration's input means, %d probed",
             len(out), len(samples), len(layers) - len(probed), len(probed))
    return out


def _probed_shifts(model: onnx.ModelProto, layers: Sequence[tuple[onnx.NodeProto, np.ndarray, str]],
                   deltas: Sequence[np.ndarray], inputs: Sequence[tuple[str, dict] | None],
                   samples: Sequence[dict[str, np.ndarray]], providers: Sequence[str]) -> list[np.ndarray | None]:
    """The mean shift of each of ``layers`` measured by the probe model on ``samples`` (None where no
    sample ran the layer's branch)."""
    probe, names = _probe(model, layers, deltas, inputs)
    # Without spinning: between runs the sums are taken in NumPy, while spinning pool threads held
    # the cores (the same kernels and thread pool, so the same means bit for bit).
    session = open_session(probe, providers=providers, spinning=False)
    sums = [np.zeros(w.shape[0] if n.op_type == "Conv" else d.shape[0] if _trans_b(n) else d.shape[1], np.float64)
            for (n, w, _), d in zip(layers, deltas)]
    counts = [0] * len(layers)
    for feed in samples:
        batch = int(next(iter(feed.values())).shape[0]) if feed else 1
        for k, value in enumerate(session.run(names, feed)):
            value = np.asarray(value, np.float64)
            if value.size == 0:
                continue  # the sample took the other branch of an If holding this layer
            sums[k] += value * batch
            counts[k] += batch
    return [total / count if count else None for total, count in zip(sums, counts)]


def _trans_b(node: onnx.NodeProto) -> bool:
    return any(a.name == "transB" and a.i for a in node.attribute)
