"""Graph plumbing: load/save (``io``), input checks (``check``) and rewrite passes (``passes``)."""
