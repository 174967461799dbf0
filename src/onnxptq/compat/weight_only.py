"""The reference tool's weight-only keys routed to :func:`onnxptq.quantize_weights`.

* ``UseMatMulNBits=True`` + ``MatMulNBitsParams`` {``GroupSize`` 128, ``Symmetric`` True, ``Bits`` 4,
  ``AccuracyLevel`` 0, ``Algorithm`` "DEFAULT" | "GPTQ" | "HQQ"}: MatMul weights become
  ``com.microsoft::MatMulNBits`` (``form="matmulnbits"``, the node's ``accuracy_level`` set as
  given), with RTN / GPTQ / HQQ. The reference skips calibration here; so do we, except for GPTQ.
* ``UseGPTQ=True`` + ``GPTQParams`` {``Bits`` 8, ``BlockSize`` 128, ``PercDamp`` 0.01, ``GroupSize``
  −1, ``ActOrder`` True, ``PerChannel`` False, ``WeightSymmetric`` True, ``MSE`` False}: GPTQ
  weights in the default ``form="dq"`` (body MatMuls as standard blocked DequantizeLinear; an embedding table as MatMulNBits + GatherBlockQuantized on one stored copy). Differences, on purpose: ``GroupSize −1``
  (one scale per output channel over all of K) has no blocked form; it becomes our block size 128
  with a warning. ``BlockSize`` is GPTQ's lazy-update batch, which changes speed, not results;
  ours is fixed. ``ActOrder`` defaults to True (the reference tool's default is False): with static
  block parameters it costs nothing at run time and measured far better (docs/weight_only.md); give
  ``ActOrder: False`` for the reference's order. ``MSE=True`` (a grid search of each scale) is not built and raises.

Keys inside the two dicts are checked: an unknown one is an error naming it.
"""

from __future__ import annotations

import logging
from typing import Any

from ..config.schema import ConfigError

log = logging.getLogger(__name__)

NBITS_KEYS = {"GroupSize": 128, "Symmetric": True, "Bits": 4, "AccuracyLevel": 0, "Algorithm": "DEFAULT"}
GPTQ_KEYS = {"Bits": 8, "BlockSize": 128, "PercDamp": 0.01, "GroupSize": -1, "ActOrder": True, "PerChannel": False,
             "WeightSymmetric": True, "MSE": False}
ALGORITHMS = {"DEFAULT": "rtn", "RTN": "rtn", "GPTQ": "gptq", "HQQ": "hqq"}


def _params(extra: dict[str, Any], key: str, known: dict[str, Any]) -> dict[str, Any]:
    given = extra.get(key) or {}
    if not isinstance(given, dict):
        raise ConfigError(f"extra_options[{key!r}] must be a dict, not {type(given).__name__}")
    for name in given:
        if name not in known:
            raise ConfigError(f"extra_options[{key!r}] has an unknown key {name!r}; known: {', '.join(known)}")
    return {**known, **given}


def requested(extra: dict[str, Any]) -> bool:
    """Whether ``extra_options`` asks for weight-only quantization."""
    return bool(extra.get("UseMatMulNBits")) or bool(extra.get("UseGPTQ"))


def weight_only_kwargs(extra: dict[str, Any]) -> dict[str, Any]:
    """:func:`onnxptq.quantize_weights` keyword arguments for the weight-only keys of ``extra``."""
    gptq = _params(extra, "GPTQParams", GPTQ_KEYS)
    if extra.get("UseMatMulNBits"):
        p = _params(extra, "MatMulNBitsParams", NBITS_KEYS)
        algorithm = str(p["Algorithm"]).upper()
        if algorithm not in ALGORITHMS:
            raise ConfigError(f"extra_options['MatMulNBitsParams']['Algorithm']={p['Algorithm']!r} is not one of DEFAULT, GPTQ, HQQ")
        kwargs = {"bits": int(p["Bits"]), "block_size": int(p["GroupSize"]), "symmetric": bool(p["Symmetric"]),
                  "method": ALGORITHMS[algorithm], "form": "matmulnbits", "accuracy_level": int(p["AccuracyLevel"])}
        if algorithm == "GPTQ" or extra.get("UseGPTQ"):
            kwargs.update(method="gptq", damp=float(gptq["PercDamp"]), act_order=bool(gptq["ActOrder"]))
        return kwargs
    if gptq["MSE"]:
        raise NotImplementedError("extra_options['GPTQParams']['MSE']=True (a grid search of each scale) is not implemented yet")
    group = int(gptq["GroupSize"])
    if group == -1:
        log.warning("GPTQParams GroupSize -1 (per channel over all of K) has no blocked form; using blocks of 128")
        group = 128
    return {"bits": int(gptq["Bits"]), "block_size": group, "symmetric": bool(gptq["WeightSymmetric"]), "method": "gptq",
            "damp": float(gptq["PercDamp"]), "act_order": bool(gptq["ActOrder"]), "form": "dq"}
