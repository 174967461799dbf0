"""Weight-only quantization for LLMs: int2/3/4/8 blocks along K, RTN/HQQ/GPTQ/AWQ, two ONNX forms.

A second, lighter pipeline beside :mod:`onnxptq.pipeline`: ``plan`` (which weights, lm_head by
structure) → ``calibrate`` (streamed Hessians, only for GPTQ/AWQ/mixed) → one module per method
(``rtn``, ``hqq``, ``gptq``, ``awq``) driven by ``solve`` → ``emit`` (blocked DequantizeLinear or
MatMulNBits) → save. The format's NumPy truth is :mod:`onnxptq.formats.int_blocks`, its ONNX form
:mod:`onnxptq.onnx_ops.weight_blocks`. Entry point: :func:`onnxptq.quantize_weights`.
"""

from __future__ import annotations
