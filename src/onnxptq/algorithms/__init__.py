"""Algorithms built on the pipeline: automatic mixed precision (``mixed_precision``, with the
incremental candidate runs of ``suffix_runs``) and fast finetuning (``finetune``: AdaRound,
AdaQuant). They compose the stages of :mod:`onnxptq.pipeline`; nothing in the pipeline imports
them except the refine step, which calls finetuning when a config asks for it.
"""
