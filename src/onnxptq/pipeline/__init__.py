"""The quantization pipeline's stages, in data-flow order, one module each.

prepare (the pass list) → plan (:mod:`.plan`, which tensor gets which format) → calibrate (the
driver of one streaming pass; the statistics themselves come from :mod:`onnxptq.calibration`) →
final plan (:mod:`.final_plan`: coverage and the range guard on the calibrated plan) → solve
(statistics → scales) → refine (:mod:`.refine`: SmoothQuant, bias correction, finetuning) →
build (plan, solve, refine, emit on calibrated statistics) → emit (Q/DQ,
Cast and function nodes) → finish (checker + a real onnxruntime session) → complete (evaluate,
report, save; :class:`~.complete.QuantizationResult`). Each stage reads what the one before it
produced and nothing later: :func:`onnxptq.quantize` and the search above it (mixed precision,
:mod:`onnxptq.algorithms`) compose these functions and are never imported by them.
"""
