"""The pipeline's steps that change weights given the plan and the data, each on its own floor here.

``smooth_quant`` (SmoothQuant: its own statistics pass, then folds or inserts the 1/s; run by
:mod:`..calibrate` before the plan, since it changes the activations the plan calibrates),
``bias_correction`` (biases absorb the rounded weights' mean shift; run by :mod:`..build` after
solve) and ``finetune`` (AdaRound/AdaQuant, torch an optional extra; run by :mod:`..build` after
solve). They are pipeline steps, not searches over it: they import the stages before them (plan,
solve, emit) and nothing above the pipeline.
"""
