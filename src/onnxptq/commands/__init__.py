"""Subcommands of the ``onnxptq`` CLI, one module each (see onnxptq.cli)."""
