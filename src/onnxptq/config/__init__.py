"""What a quantization should do: ``schema`` (QuantConfig, TensorQuant and their options, all
validated on construction) and ``presets`` (the named configs, A8W8 … MX9_INT8, and the
resolution of a preset name into a config).
"""
