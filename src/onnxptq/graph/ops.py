"""Op facts the quantizer reads, in one table each: which op types are quantized by default, which
input positions carry data, weights or biases, which ops only move values, which fuse.

Facts about ONNX operators, not decisions: the plan (:mod:`onnxptq.pipeline.plan`) decides with
them, the report (:mod:`onnxptq.analysis.report`) reads them to label tensors. Kept in ``graph/`` so
that every layer above the graph reads the same table.
"""

from __future__ import annotations

import onnx

__all__ = [
    "BIAS_INPUTS",
    "DATA_INPUTS",
    "DEFAULT_OP_TYPES",
    "ELTWISE_OPS",
    "FLOATING",
    "FLOAT_TYPES",
    "FUSIBLE_ACTIVATIONS",
    "FUSIBLE_PRODUCERS",
    "NO_OUTPUT_QUANT",
    "PASS_THROUGH",
    "RECURRENT",
    "RELAYOUTS",
    "REPEATS",
    "SELECTIONS",
    "WEIGHT_INPUTS",
]

#: Op types quantized by default (the reference tool's extended set, spec §4.6).
DEFAULT_OP_TYPES = frozenset(
    """Add ArgMax AveragePool Clip Concat Conv ConvTranspose Gather Gelu Gemm GlobalAveragePool
    InstanceNormalization LayerNormalization LeakyRelu MatMul MaxPool Mul Pad Relu Reshape Resize Sigmoid
    Softmax Split Squeeze Tanh Transpose Unsqueeze Where DepthToSpace Div Erf HardSigmoid HardSwish
    LpNormalization Max Min PRelu ReduceMean Slice SpaceToDepth Sub LSTM GRU RNN""".split()
)

#: Recurrent layers: their weights W and R are quantized like a MatMul's (per gate row, blocks
#: along the input/hidden axis) and their input X as an activation; the bias B, the initial states
#: and the outputs Y/Y_h/Y_c stay float. The state is fed back every step inside the op, where no
#: quantizer can reach it, so quantizing it outside would only round the state handed between
#: calls (a streaming model's ``stateN``), compounding the error over a stream for no backend gain.
RECURRENT = frozenset("LSTM GRU RNN".split())

#: Ops whose output holds every element of their data input unchanged, only laid out anew. Many
#: rules ask "does this op only move values?" and each lets through a little more (a Cast, a
#: selection, a repeat): they compose their set from these three at the use, so what differs
#: between two rules is visible there instead of hidden in two lists of names.
RELAYOUTS = frozenset("Identity Reshape Flatten Squeeze Unsqueeze Transpose".split())
#: Ops whose output is a subset of their data input's elements.
SELECTIONS = frozenset("Slice Gather Split".split())
#: Ops whose output repeats their data input's elements.
REPEATS = frozenset("Expand Tile".split())

#: Ops whose output only rearranges or selects input values: quantized only when forced or when
#: their input already is (their range is their input's).
PASS_THROUGH = frozenset(
    "MaxPool Reshape Squeeze Unsqueeze Transpose Resize Slice Split Gather Pad DepthToSpace SpaceToDepth Flatten".split()
)

#: For these ops only the listed input positions carry data; the others are shapes, indices, limits.
DATA_INPUTS: dict[str, tuple[int, ...]] = {
    "Clip": (0,), "Pad": (0,), "Resize": (0,), "Reshape": (0,), "Slice": (0,), "Split": (0,), "Squeeze": (0,),
    "Unsqueeze": (0,), "Gather": (0,), "Transpose": (0,), "Expand": (0,), "Tile": (0,), "ReduceMean": (0,),
    "LayerNormalization": (0,), "InstanceNormalization": (0,), "BatchNormalization": (0,), "Where": (1, 2),
    "ArgMax": (0,), "DepthToSpace": (0,), "SpaceToDepth": (0,), "LpNormalization": (0,), "Softmax": (0,),
    **{op: (0, 1, 2) for op in RECURRENT},
}

#: (op type, input index) of weights and biases whose layout we know.
WEIGHT_INPUTS = {("Conv", 1), ("ConvTranspose", 1), ("Gemm", 0), ("Gemm", 1), ("MatMul", 0), ("MatMul", 1), ("PRelu", 1),
                 *((op, i) for op in RECURRENT for i in (1, 2))}

BIAS_INPUTS = {("Conv", 2), ("ConvTranspose", 2), ("Gemm", 2)}

#: Producers whose single following activation is fused on every backend: no Q/DQ between them.
FUSIBLE_PRODUCERS = frozenset("Conv ConvTranspose Gemm MatMul Add MaxPool AveragePool GlobalAveragePool".split())

FUSIBLE_ACTIVATIONS = frozenset("Relu Clip LeakyRelu PRelu HardSwish".split())

#: Ops without an output quantizer of their own: ArgMax gives indices, Shape-like ops give ints.
NO_OUTPUT_QUANT = frozenset("ArgMax".split()) | RECURRENT

FLOAT_TYPES = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16)
#: Every floating-point element type a tensor can carry, not only the two we quantize from
#: (:data:`FLOAT_TYPES`): what a value's "is it a float" test asks (an output a reader judges by
#: value, a float initializer, a tensor with a relative error).
FLOATING = frozenset((onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16, onnx.TensorProto.DOUBLE))

#: Elementwise ops whose constant operands AlignEltwiseQuantType moves to the activation type.
ELTWISE_OPS = frozenset("Mul Add Sub Div Min Max".split())
