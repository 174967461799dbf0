"""Graph plumbing: load/save (``io``), input checks (``check``), the subgraph walker (``walk``) and
rewrite passes (``passes``, one a file; the pipeline's prepare stage chooses which run).
"""
