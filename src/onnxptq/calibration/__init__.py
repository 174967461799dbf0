"""Statistics for quantization ranges, gathered in one streaming pass.

``readers`` turns any data source into feeds; ``collectors`` keep running statistics (min/max,
histograms, exact tails) and know nothing of calibration methods; ``methods`` maps a method name
to the collector it needs and turns statistics into a range; ``reductions`` builds the in-graph
reductions that shrink each tensor before it leaves onnxruntime; ``runner`` builds the augmented
model and runs it over the feeds.
"""
