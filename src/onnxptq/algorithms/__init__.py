"""The searches above the pipeline: automatic mixed precision (``mixed_precision``, with the
incremental candidate runs of ``suffix_runs``) and the accuracy floor's repair (``repair``, with
its 16-bit precision ladder ``step_up``). They compose the stages of :mod:`onnxptq.pipeline`
(calibrate once, then build many candidate configs) and nothing in the pipeline imports them. The
steps that change weights inside one quantize (SmoothQuant, bias correction, finetuning) are
pipeline steps and live in :mod:`onnxptq.pipeline.refine`.
"""
