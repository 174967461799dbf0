"""Stand-alone tools run as ``python -m onnxptq.tools.X`` with the reference tool's flags:
``convert_fp32_to_bf16``, ``convert_fp16_to_bf16`` and ``evaluate`` (folders of outputs compared).
"""
