"""How good a quantized model is, and what a runtime makes of it: measuring, never changing.

``metrics`` (cosine, L2, PSNR and the folder comparison of the evaluate tool), ``compare`` (float
vs quantized model outputs on samples), ``report`` (per-tensor error, measured) and
``report_html`` (its HTML and JSON files), ``infer`` (run a model over a folder of inputs).
"""
