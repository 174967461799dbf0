"""Which operator-set version a model imports: read in one place, for protos and onnx-ir models.

ONNX spells the default domain ``""`` or ``"ai.onnx"``; every reader had its own copy of that rule
and its own answer for a model without the import (an error, 21, the target opset). Now the caller
says what a missing import means (``default``), and the rule is written once.
"""

from __future__ import annotations

from typing import Any

import onnx

#: The names of the default ONNX domain (``"onnx.ai"`` is a spelling some exporters write).
ONNX_DOMAINS = frozenset({"", "ai.onnx", "onnx.ai"})


def is_onnx_domain(domain: str) -> bool:
    """Whether ``domain`` names the default ONNX operator set."""
    return domain in ONNX_DOMAINS


def model_opset(model: onnx.ModelProto | onnx.FunctionProto | Any, domain: str = "", *, default: int | None = None) -> int:
    """The version of ``domain`` (default: the ONNX domain) that ``model`` imports.

    Takes a ``ModelProto``, a ``FunctionProto`` or an onnx-ir ``Model``. Without that import,
    returns ``default``, or raises ``ValueError`` naming the domain when no default is given.
    """
    wanted = ONNX_DOMAINS if is_onnx_domain(domain) else {domain}
    if hasattr(model, "opset_import"):
        versions = {entry.domain: int(entry.version) for entry in model.opset_import}
    else:  # an onnx-ir model or function
        versions = {d: int(v) for d, v in model.opset_imports.items()}
    for name in sorted(wanted):
        if name in versions:
            return versions[name]
    if default is not None:
        return default
    raise ValueError(f"the model imports no {domain or 'default ONNX'} ('{domain}') opset")
