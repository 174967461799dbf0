"""Numerics by structure: the linear-domain tensors a ``Log`` reads stay float.

A ``Log`` is in a graph because the model cares about *relative* precision over many decades: a
log-mel spectrogram (``10·log10(max(mel, 1e-10))``), a log-probability, a log-energy. The values
before it — an STFT's real and imaginary parts, their powers, the mel filterbank's sums — span
the whole range the Log resolves: on the openWakeWord front end (audio at int16 scale, STFT as
two Conv1d, ``Pow``/``Add``/``MatMul``/``Clip``/``Log``) the power runs from ~1e12 down to
~1e-2, about 140 dB, and the model reads every bin in dB. Any grid that is linear over that range
loses the quiet end: int8 (2 decades between step and peak) and int16 (4.5 decades) turn the
quiet bins into the Clip floor (−100 dB instead of their value, 1 % of frames within 1 dB);
a block format's shared exponent does the same within each block; fp16 saturates the loud end
at 65504 (the power is ~1e12). Only a float format with a wide exponent (BF16) keeps it.

The rule (one for every format, by dataflow, not names): starting at each ``Log``'s input, walk
back through the ops that carry a magnitude to the Log unchanged in kind — elementwise
``Pow``/``Mul``/``Add``/``Sqrt``/``Abs``/``Clip``/``Max``/``Relu``/``Neg``, reductions, reshapes,
data movement (``Concat``/``Slice``/``Split``/``Pad``), and ``MatMul``/``Gemm``/``Conv`` by
constant weights (a filterbank, a DFT written as Conv) — as long as every reader of the tensor
is on that walk. basic-pitch's constant-Q front end (nnAudio's CQT2010v2 through tf2onnx) needs
the data movement: each octave is a reflect ``Pad`` → a real and an imaginary Conv1d (the
imaginary one through ``Neg``), the octaves ``Concat``'ed before the magnitude; and each lower
octave reads the signal decimated by a low-pass Conv1d of stride 2, so the signal walk below
follows constant-weight linear layers too (a filtered signal is still the signal). Stopping at
the ``Concat`` left every CQT convolution quantized: BF16 kept 65 % and A16W8 49 % of the dB bins
within 1 dB (tests/test_log_domain.py), and basic-pitch's notes lost 7 % (BF16) to 11 % (A16W8). Every tensor reached stays float, with the
reason in the plan. The walk stops at a linear layer's *data input*: what a linear layer reads
(audio samples, features) has the resolution of the data itself, not of a power spectrum, and
quantizing it is what the format is for; its *output* (the spectrum) is what spans the decades.

The waveform upstream of the spectrum (kaldi/wespeaker front ends in onnx-asr): before the DFT the
signal is often pre-emphasised (``x[t] − 0.97·x[t−1]`` as a Pad/Slice and a Sub), its DC removed
(``x − ReduceMean(x)``), reflect-padded (Gather/ScatterElements), framed (a Scan whose body only
concatenates and slices) and windowed (``·w``). Stopping the walk at the first elementwise op left
that chain quantized: a BF16 sample carries an 8-bit mantissa, a noise floor ~54 dB under each
sample that the DFT spreads over every bin, and the bins 50-80 dB down drown (BF16 kept 0.959 of
kaldi's and 0.961 of wespeaker's log-mel bins within 1 dB). So :func:`_waveform_chain` follows the
signal on through affine elementwise ops (``±``, ``·`` or ``/`` by a value computed from constants,
a ``ReduceMean`` subtracted), data movement and framing — *provided* the chain is the model's input
transformed by such ops alone (what makes a tensor "a signal feeding a spectrum": an affine,
data-movement image of a graph input). A chain that meets any other producer (a Relu, a network's
layer) is the output of a computation, not a recorded signal, and the walk keeps its old stop.

What stays quantized: the Log's output (dB values, a few units apart: every format resolves
them), the linear layers' inputs and weights.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx

from .external import constant_tensors, tensor_values
from .opsets import is_onnx_domain
from .walk import dataflow, subgraphs

log = logging.getLogger(__name__)

__all__ = ["log_domain_float_tensors"]

#: Ops a magnitude passes through on its way to a Log (elementwise, reductions, reshapes).
MAGNITUDE_OPS = frozenset(
    """Pow Mul Add Sqrt Abs Clip Max Relu Identity Cast ReduceSum ReduceMean ReduceSumSquare ReduceL2 ReduceL1
    ReduceMax Reshape Unsqueeze Squeeze Flatten Transpose Neg Concat Slice Split Pad""".split()
)
#: Linear layers by constant weights: their output is on the walk, their data input is not.
LINEAR_LAYERS = frozenset("MatMul Gemm Conv".split())
#: Data movement a signal may pass through before the first linear layer.
_RESHAPES = frozenset("Reshape Unsqueeze Squeeze Flatten Transpose Identity Slice Pad".split())
#: Scalings/offsets by a constant (the ln → dB chain after a Log).
_AFFINE = frozenset("Add Sub Mul Div".split())
#: Transforms whose first input is a signal and whose output is its spectrum (the DFT op, ONNX STFT).
SPECTRAL_OPS = frozenset("DFT STFT".split())
#: Data movement a waveform passes through on its way to a spectrum (framing, padding, reflection by indices).
_SIGNAL_MOVES = frozenset("""Reshape Unsqueeze Squeeze Flatten Transpose Identity Cast Slice Pad Concat Split Gather
    GatherElements ScatterElements ScatterND Expand Tile Where""".split())
#: Of those, the inputs that carry the signal (the others are indices, shapes, pads, a length mask); absent: the first.
_SIGNAL_INPUTS = {"ScatterElements": (0, 2), "ScatterND": (0, 2), "Where": (1, 2), "Concat": None}
#: Ops whose bodies frame a signal when every node in them is data movement (a sliding buffer).
_FRAMING_LOOPS = frozenset("Scan Loop".split())
#: Ops that read their input in the log domain (the walk starts at their input).
LOG_READERS = frozenset({"Log"})


#: Ops whose output is non-negative whatever their input.
_NON_NEGATIVE = frozenset("Relu Abs Sqrt Exp Sigmoid Softmax Softplus ReduceSumSquare ReduceL2 ReduceL1".split())
#: Ops that keep non-negative inputs non-negative.
_KEEPS_SIGN = frozenset("""Add Mul Max Min ReduceSum ReduceMean ReduceMax Reshape Unsqueeze Squeeze Flatten Transpose Identity Cast
    Concat Slice Split Gather""".split())
#: Of those, the ops whose later inputs are indices or shapes, not values: only their first input carries the sign.
_SIGN_IN_FIRST = frozenset("Reshape Unsqueeze Squeeze Slice Split Gather".split())


def _constant_value(name: str, constants: dict[str, onnx.TensorProto]) -> np.ndarray | None:
    tensor = constants.get(name)
    return None if tensor is None else tensor_values(tensor)


def _non_negative(name: str, producer: dict[str, onnx.NodeProto], constants: dict[str, onnx.TensorProto],
                  depth: int = 0) -> bool:
    """Whether ``name`` is non-negative by construction (a power, an amplitude): x², |x|, Relu, ...
    sums and products of such, non-negative constants."""
    if depth > 16:
        return False
    if name in constants:
        value = _constant_value(name, constants)
        return value is not None and bool((value >= 0).all())
    node = producer.get(name)
    if node is None or not is_onnx_domain(node.domain):
        return False
    op = node.op_type
    if op in _NON_NEGATIVE:
        return True
    if op == "Pow" and len(node.input) > 1:
        exponent = _constant_value(node.input[1], constants)
        return exponent is not None and exponent.size == 1 and float(exponent) % 2 == 0
    if op == "Mul" and len(node.input) == 2 and node.input[0] == node.input[1]:
        return True
    if op == "Clip" and len(node.input) > 1 and node.input[1]:
        low = _constant_value(node.input[1], constants)
        if low is not None and low.size == 1 and float(low) >= 0:
            return True
    if op in _KEEPS_SIGN:
        # A Slice between the power and the filterbank (onnx-asr's whisper front end drops the last frame) once read
        # as "not a power": the walk took the spectrum for the signal, and int8 left 68 % of its dB within 1 dB.
        data = node.input[:1] if op in _SIGN_IN_FIRST else [i for i in node.input if i]
        return all(_non_negative(i, producer, constants, depth + 1) for i in data)
    return False


def _constant_weights(node: onnx.NodeProto, constants: dict[str, onnx.TensorProto]) -> bool:
    weights = [i for i in node.input[1:] if i]
    return bool(node.input) and bool(weights) and all(i in constants for i in weights)


def _affine_tail(start: str, consumers: dict[str, list[onnx.NodeProto]], constants: dict[str, onnx.TensorProto],
                 outputs: set[str]) -> list[str]:
    """The tensors of the chain ``start → ·c → /c → ±c …`` (one reader each, scalar constants) but
    its last: ``Log(x)·10/ln 10 − offset`` is one step in float, and a quantizer between two of
    them only adds a rounding (a block format's or fp8's relative step is several dB at |x| ~ 100)."""
    chain: list[str] = []
    current = start
    while current not in outputs:
        readers = [c for c in consumers.get(current, []) if c.op_type not in ("Shape", "Size")]
        if len(readers) != 1 or readers[0].op_type not in _AFFINE or not is_onnx_domain(readers[0].domain):
            break
        node = readers[0]
        others = [i for i in node.input if i != current]
        if len(others) != 1 or others[0] not in constants or list(node.input).count(current) != 1:
            break
        value = _constant_value(others[0], constants)
        if value is None or value.size != 1:
            break
        chain.append(current)
        current = node.output[0]
    return chain


def _static_tensors(graph: onnx.GraphProto, constants: dict[str, onnx.TensorProto]) -> set[str]:
    """Tensors computed from constants alone (a coefficient ``Cast`` from an initializer, a window built in the graph)."""
    static = set(constants)
    for node in graph.node:  # topological order
        data = [i for i in node.input if i]
        if data and all(i in static for i in data) and not any(True for _ in subgraphs(node)):
            static.update(o for o in node.output if o)
    return static


def _framing(node: onnx.NodeProto) -> bool:
    """A Scan/Loop whose bodies only move data (a sliding buffer cutting frames out of a signal)."""
    bodies = list(subgraphs(node))
    return bool(bodies) and all(n.op_type in _SIGNAL_MOVES for b in bodies for n in b.node)


def _signal_inputs(node: onnx.NodeProto, static: set[str], constants: dict[str, onnx.TensorProto]) -> list[str] | None:
    """The inputs of ``node`` that carry a waveform through it, or None when ``node`` is no affine/data-movement
    step of a signal (then a chain reaching it is not the model's input, :func:`_waveform_chain`)."""
    if not is_onnx_domain(node.domain) or not node.input:
        return None
    op, inputs = node.op_type, list(node.input)
    dynamic = [i for i in inputs if i and i not in static]
    if op in _SIGNAL_MOVES:
        keep = _SIGNAL_INPUTS.get(op, (0,))
        picked = dynamic if keep is None else [inputs[k] for k in keep if k < len(inputs) and inputs[k] and inputs[k] not in static]
        return picked
    if op in ("Add", "Sub"):
        return dynamic
    if op == "Neg" or op == "ReduceMean":  # ReduceMean: the DC a Sub removes, a value of the signal
        return dynamic[:1]
    if op in ("Mul", "Div") and len(dynamic) == 1 and (op == "Mul" or inputs[0] == dynamic[0]):
        return dynamic  # a scaling/window by a value computed from constants
    if op in LINEAR_LAYERS and _constant_weights(node, constants):
        return [inputs[0]]  # a filter by constant weights (a decimation low-pass): still the signal
    if op in _FRAMING_LOOPS and _framing(node):
        return dynamic
    return None


def _waveform_chain(signals: list[str], walk_nodes: set[int], producer: dict[str, onnx.NodeProto],
                    consumers: dict[str, list[onnx.NodeProto]], constants: dict[str, onnx.TensorProto],
                    outputs: set[str], graph: onnx.GraphProto) -> list[str]:
    """The waveform tensors upstream of a spectrum's signal inputs ``signals``: back through
    :func:`_signal_inputs` steps while every reader of a tensor is on the walk (a tensor read elsewhere
    too ends the chain there, quantized for its other readers), retried as the walk grows (a
    pre-emphasis reads its input twice). Empty when the chain meets a producer that is no such step:
    then the signal is a computation's output, not the model's input (module docstring)."""
    if not signals:
        return []
    static = _static_tensors(graph, constants)
    nodes = set(walk_nodes)
    chain: list[str] = []
    pending = [s for s in signals if s not in static]
    progress = True
    while progress and pending:
        progress = False
        for name in list(pending):
            readers = [c for c in consumers.get(name, []) if c.op_type not in ("Shape", "Size")]
            if name in outputs or any(id(c) not in nodes for c in readers):
                continue
            pending.remove(name)
            progress = True
            if name in chain:
                continue
            chain.append(name)
            node = producer.get(name)
            if node is None:
                continue  # a graph input: the recorded signal itself
            inputs = _signal_inputs(node, static, constants)
            if inputs is None:
                return []
            nodes.add(id(node))
            if node.op_type in LINEAR_LAYERS:
                chain.extend(w for w in node.input[1:] if w and w not in chain)
            elif node.op_type in _FRAMING_LOOPS:
                # The frames are cut inside the body: its tensors are the signal too (wespeaker's sliding buffer; its
                # inputs rounded to BF16 kept 0.984 of the fbank bins within 1 dB, not 1.000).
                for body in subgraphs(node):
                    chain.extend(t for t in [*(i.name for i in body.input), *(o for n in body.node for o in n.output)]
                                 if t and t not in chain)
            elif node.op_type in _AFFINE:
                # A window or gain multiplied into every sample: a rounded one is a per-sample error like the
                # signal's own (wespeaker's Povey window in BF16 cost 2 % of the fbank bins their 1 dB).
                chain.extend(i for i in node.input if i and i in static and i not in chain)
            pending.extend(i for i in inputs if i not in chain and i not in pending)
    return chain


def log_domain_float_tensors(model: onnx.ModelProto) -> dict[str, str]:
    """``{tensor: reason}`` for every tensor on a Log's linear-domain input walk (module docstring)."""
    graph = model.graph
    producer, consumers = dataflow(graph.node)
    constants = constant_tensors(graph)
    outputs = {o.name for o in graph.output}

    why: dict[str, str] = {}
    for log_node in graph.node:
        if log_node.op_type not in LOG_READERS or not is_onnx_domain(log_node.domain) or not log_node.input:
            continue
        start = log_node.input[0]
        walk_nodes = {id(log_node)}
        reached: list[str] = []
        signals: list[str] = []
        stack = [start]
        while stack:
            name = stack.pop()
            if name in why or name in reached or name in constants or name in outputs:
                continue
            readers = [c for c in consumers.get(name, []) if c.op_type not in ("Shape", "Size")]
            if name != start and any(id(c) not in walk_nodes for c in readers):
                continue  # the tensor is read elsewhere too: not only a magnitude on its way to the Log
            reached.append(name)
            node = producer.get(name)
            if node is None or not is_onnx_domain(node.domain):
                continue
            if node.op_type in LINEAR_LAYERS:
                # By constant weights only (a DFT written as Conv, a mel filterbank). An error in any
                # of its inputs — a rounded weight, the step of a rounded input — lands in every
                # output bin at the level of the whole input's energy, not of the bin: the quiet
                # bins the Log reads drown in it (openWakeWord, A16W8: the int8 DFT weights alone
                # cost 9 % of the frames their 1 dB). So weights and data input join the walk.
                weights = [i for i in node.input[1:] if i]
                if node.input and weights and all(i in constants for i in weights):
                    walk_nodes.add(id(node))
                    reached.extend(w for w in weights if w not in reached)
                    if _non_negative(node.input[0], producer, constants):
                        stack.append(node.input[0])  # a power/amplitude: still the magnitude domain
                    else:
                        signals.append(node.input[0])  # the signal itself: it and its reshapes only
                continue
            if node.op_type in SPECTRAL_OPS:
                # The DFT op (wespeaker's front end): a linear layer by construction; its other inputs are lengths/windows.
                walk_nodes.add(id(node))
                reached.extend(i for i in node.input[1:] if i and i in constants and i not in reached)
                signals.append(node.input[0])
                continue
            if node.op_type not in MAGNITUDE_OPS:
                continue
            walk_nodes.add(id(node))
            data = [i for i in node.input if i and i not in constants]
            # Pow's and Clip's second inputs (exponent, bounds) are constants here; a data exponent ends the walk.
            if node.op_type in ("Pow", "Clip") and any(i != node.input[0] for i in data):
                continue
            stack.extend(data)
        chain = _waveform_chain(signals, walk_nodes, producer, consumers, constants, outputs, graph)
        if chain:
            signal_reason = (f"linear-domain input of Log '{log_node.name or log_node.output[0]}', the waveform feeding its "
                             "spectrum (the model's input through affine ops, framing and data movement): a rounded sample is a noise floor "
                             "spread over every bin (BF16: ~54 dB down), which drowns the quiet bins the Log reads, so "
                             "the chain stays float (graph/logdomain.py)")
            for name in chain:
                why.setdefault(name, signal_reason)
            signals = []
        # The signal a spectrum is computed from, back through pure reshapes (Unsqueeze of the audio).
        # The walk ends there: what produced the signal (a previous layer) is not in the Log's domain.
        while signals:
            name = signals.pop()
            if name in reached or name in constants or name in outputs:
                continue
            readers = [c for c in consumers.get(name, []) if c.op_type not in ("Shape", "Size")]
            if any(id(c) not in walk_nodes for c in readers):
                continue
            reached.append(name)
            node = producer.get(name)
            if node is None or not is_onnx_domain(node.domain):
                continue
            if node.op_type in _RESHAPES:
                walk_nodes.add(id(node))
                signals.append(node.input[0])
            elif node.op_type in LINEAR_LAYERS and _constant_weights(node, constants):
                # A signal filtered by constant weights (a decimation low-pass between the octaves
                # of a CQT) is still the signal: its input joins the walk with the weights.
                walk_nodes.add(id(node))
                reached.extend(w for w in node.input[1:] if w and w not in reached)
                signals.append(node.input[0])
        reason = (f"linear-domain input of Log '{log_node.name or log_node.output[0]}' (a spectrum/power/probability "
                  "spanning many decades): a linear grid or a saturating fp16 loses its quiet or loud end, so it stays "
                  "float; the Log's output is quantized (graph/logdomain.py)")
        for name in reached:
            why.setdefault(name, reason)
        for name in _affine_tail(log_node.output[0], consumers, constants, outputs):
            why.setdefault(name, (f"log-domain value of Log '{log_node.name or log_node.output[0]}' on its way through "
                                  "a chain of constant scalings/offsets (ln → dB): each rounding there is an absolute "
                                  "error in dB, so only the chain's end is quantized (graph/logdomain.py)"))
    if why:
        log.debug("log domain: %d tensor(s) before a Log stay float: %s", len(why), ", ".join(sorted(why)[:6]))
    return why
