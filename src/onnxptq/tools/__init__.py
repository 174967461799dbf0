"""Stand-alone scripts run as ``python -m onnxptq.tools.X`` with the reference tool's flags:
``convert_fp32_to_bf16``, ``convert_fp16_to_bf16`` and ``evaluate`` (folders of outputs compared).
Each is a thin shim: the parsing and the work live in :mod:`onnxptq.commands` (the one CLI home).
"""
