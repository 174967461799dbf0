"""Integer activations: no requantization between a MatMul and the constant bias ``Add`` behind it.

Why: a Conv or Gemm carries its bias inside the node, and the integer plan adds it in the int32
accumulator (``assign``: an int32 bias at input scale × weight scale), so the product is rounded
once, after the bias. An exporter that writes a linear layer over a rank-3 input (``[batch, time,
features]``: PyTorch ``nn.Linear`` on a sequence, a GRU/LSTM model's input and output layers)
writes ``MatMul`` then ``Add(bias)`` instead, and the plan quantized the bare product too: one more
rounding, on a grid set by the product's own range, which the bias then shifts. That range is
often much wider than the layer's output: the bias moves it, and a ReLU behind the ``Add``
(fused into it, ``QuantConfig.fuse_activations``) throws the whole negative side away, yet the
pre-bias grid spends its codes on it. NSNet2 48 kHz (bench/RESULTS.md, "nsnet"): the input
layer's product spans −69…21 (uint8 step 0.35), its ReLU output 0…20.6 (step 0.081), so the
extra rounding is 4.3 times the layer's own; it alone moved 8 % of the speech frames' enhanced
spectra past 1 % of their energy (A8W8 0.922; that one tensor at 16 bits 0.963).

The rule, by dataflow (no names): an integer, per-tensor activation produced by a ``MatMul`` whose
second input is a constant matrix, read by exactly one node, an ``Add`` of a constant bias that
broadcasts along the product's last axis (``[N]``/``[1, N]``, ``N`` the matrix's columns), and not
a graph output, stays float when the ``Add``'s result is rounded again in the same integer format
(its own output planned, or the ReLU/Clip fused behind it planned). Integer hardware adds that
bias in the accumulator (as it does a Gemm's), and onnxruntime runs the dequantized product's
MatMul → Add in float (``MatMulIntegerToFloat`` with the bias) before the one ``QuantizeLinear``.

CPU placement only (``assign`` applies it where ``runtime.is_cpu``): the NPU placement models
integer-only hardware where every tensor between two nodes is integer, and a MatMul and an Add
that stay two nodes cannot hand a float product over; measured there, PP-OCRv4 rec's per-tensor
NPU A8W8 read its 200 test lines at CER 0.0438 with the rule against 0.0387 without
(tests/test_per_tensor_ppocr.py).
"""

from __future__ import annotations

import onnx

from .corners import drop_float
from .select import _Graph
from .types import TensorPlan

__all__ = ["bias_epilogue_float"]


def _bias_of(add: onnx.NodeProto, product: str, columns: int, g: _Graph) -> str | None:
    """The constant bias ``add`` adds to ``product`` (``[columns]`` or ``[1, columns]``), else None."""
    if add.op_type != "Add" or len(add.input) != 2 or product not in add.input:
        return None
    other = add.input[1] if add.input[0] == product else add.input[0]
    bias = g.initializers.get(other)
    return other if bias is not None and list(bias.dims) in ([columns], [1, columns]) else None


def _rounded_again(add: onnx.NodeProto, fmt: str, tensors: dict[str, TensorPlan], g: _Graph) -> bool:
    """The ``Add``'s result is quantized in ``fmt``: its output planned, or its one ReLU/Clip reader's."""
    out = add.output[0]
    if out in tensors:
        return tensors[out].quant.format == fmt
    readers = g.consumers.get(out, []) if out not in g.outputs else []
    return (len(readers) == 1 and readers[0].op_type in ("Relu", "Clip") and readers[0].output[0] in tensors
            and tensors[readers[0].output[0]].quant.format == fmt)


def bias_epilogue_float(tensors: dict[str, TensorPlan], g: _Graph) -> dict[str, str]:
    """Drop from ``tensors`` the integer MatMul products read only by their constant bias ``Add``
    (module docstring); return ``{name: reason}`` for ``Plan.float_tensors``."""
    why: dict[str, str] = {}
    for name, t in list(tensors.items()):
        if t.role != "activation" or not t.quant.is_integer or t.quant.block_size or name in g.outputs:
            continue
        matmul = g.producer.get(name)
        if matmul is None or matmul.op_type != "MatMul" or len(matmul.input) != 2:
            continue
        weight = g.initializers.get(matmul.input[1])
        readers = g.consumers.get(name, [])
        if weight is None or len(weight.dims) != 2 or len(readers) != 1:
            continue
        bias = _bias_of(readers[0], name, int(weight.dims[1]), g)
        if bias is None or not _rounded_again(readers[0], t.quant.format, tensors, g):
            continue
        why[name] = (f"MatMul product read only by its constant bias Add ({bias}): the bias is added in the integer "
                     "accumulator and the sum rounded once after it, as a Gemm's (plan/bias_epilogues.py)")
    return drop_float(tensors, why, "MatMul product(s) stay float up to their bias Add (one rounding, after the bias)")
