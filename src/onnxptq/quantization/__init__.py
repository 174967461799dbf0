"""Mirror of ``quark.onnx.quantization``: the import paths ported scripts use.

``onnxptq.quantization.config`` holds ``get_default_config``, ``Config`` and
``QuantizationConfig``; ``onnxptq.quantization.api`` holds ``ModelQuantizer``. The objects live in
:mod:`onnxptq.compat`; these modules only re-export them.
"""
