"""Corner cases the per-node planner cannot see, settled on the whole tensor table (issue 27 item 3).

Each rule here either keeps a tensor float with the reason in ``Plan.float_tensors`` or changes
nothing; none raises. They run after the rules that drop tensors, because whether a corner case
exists depends on what those rules left:

* :func:`scalar_block_tensors` — a block format (``bfp``, ``mx``) needs a block axis. A rank-0
  tensor (``ReduceMax(keepdims=0)``, a scalar ``Sub``/``Cast`` after it) has none: the block body's
  axis lookup fails in onnxruntime (``Gather … idx=1 must be within the inclusive range [0,-1]``).
  A block of one element would only round one scalar, which costs a whole function call and buys
  nothing, so such tensors stay float; so do tensors whose rank shape inference could not tell
  (the block axis the plan chose may not exist). The same reasoning the planner already applies to
  one-element initializers (``assign.make_plan``).
* :func:`orphan_int32_biases` — an ``int32`` bias has scale ``scale(input) × scale(weight)``; when
  a later rule (transformer placement, coverage, the range guard) left the input or the weight
  float, that scale does not exist. The bias then stays float: onnxruntime runs such a node as a
  float Conv/Gemm over the dequantized weight, where a float bias is exactly what it adds (an
  int32 bias would only be dequantized again). Called by ``make_plan`` and again by
  ``final_plan`` after the calibration-time rules.
* :func:`row_int32_biases` — ``Gemm``'s C need only broadcast to (M, N): Keras/tf2onnx write it as a
  row (1, N), some exporters as one value (1,) or a rank-0 scalar, others a full (M, N). A per-channel
  int32 bias has one scale per output channel along one axis; the planner took axis 0 (a Conv's bias is
  always 1-D), so a (1, N) row met N scales on an axis of length 1 and emit raised a raw ``ValueError``
  (fuzz20, ``gemm_trans_alpha_beta``, every integer preset). A row takes its channels on its last axis;
  any other shape stays float (onnxruntime adds a float C to the Gemm's float result as it would).
* :func:`passthrough_outputs` — a graph input that is also a graph output (a model that hands its
  input back beside its results) has no producer: emit keeps a quantized graph output's name by
  renaming its producer's output, and with none the quantizer read a name nothing wrote (every
  integer and 16-bit preset failed the ONNX checker, a raw ``RuntimeError``; bench/RESULTS.md,
  fuzz16). The output must be the input bit for bit anyway, so the quantized value goes to the
  tensor's quantized readers only (``exclusive``); with none, the tensor stays float.
"""

from __future__ import annotations

import logging

from .types import Plan, TensorPlan

log = logging.getLogger(__name__)

__all__ = ["BLOCK_FORMATS", "orphan_int32_biases", "passthrough_outputs", "row_int32_biases", "scalar_block_tensors"]

#: Formats whose quantizer works on blocks along an axis.
BLOCK_FORMATS = frozenset({"bfp", "mx"})


def _is_block(t: TensorPlan) -> bool:
    return t.quant.format in BLOCK_FORMATS or (t.producer_quant is not None and t.producer_quant.format in BLOCK_FORMATS)


def scalar_block_tensors(tensors: dict[str, TensorPlan], rank: dict[str, int]) -> dict[str, str]:
    """Drop from ``tensors`` the block-format activations of rank 0 or unknown rank; return
    ``{name: reason}`` for ``Plan.float_tensors``. ``rank``: shape inference's ranks by tensor name."""
    why: dict[str, str] = {}
    for name, t in list(tensors.items()):
        if t.role != "activation" or not _is_block(t):
            continue
        r = rank.get(name)
        if r == 0:
            why[name] = (f"rank-0 (scalar) tensor: the block format {t.quant.describe()} has no block axis on it; "
                         "a block of one would only round one scalar, so it stays float")
        elif r is None:
            why[name] = (f"rank unknown to shape inference: the block axis of {t.quant.describe()} may not exist "
                         "on it, so it stays float")
    return drop_float(tensors, why, "scalar/unknown-rank tensors stay float under a block format")


def passthrough_outputs(tensors: dict[str, TensorPlan], inputs: list[str], outputs: set[str]) -> dict[str, str]:
    """Make the planned graph inputs that are graph outputs too exclusive to their quantized readers;
    drop those no reader takes quantized; return ``{name: reason}`` for the dropped ones."""
    why: dict[str, str] = {}
    for name in set(inputs) & outputs:
        t = tensors.get(name)
        if t is None or t.role != "activation":
            continue
        if t.consumers:
            t.exclusive = True
        else:
            why[name] = "a graph input that is also a graph output, read quantized by no node: it passes through float"
    return drop_float(tensors, why, "graph inputs passed through as outputs stay float")


def row_int32_biases(tensors: dict[str, TensorPlan], dims: dict[str, tuple[int, ...]]) -> dict[str, str]:
    """Put each per-channel int32 bias's axis where its channels are (the last axis of a (1, …, 1, N) row);
    drop those that are not one value per output channel; return ``{name: reason}``. ``dims``: the
    initializers' shapes by name (a weight or bias reached through other nodes is left as planned)."""
    why: dict[str, str] = {}
    for name, t in list(tensors.items()):
        if t.role != "bias" or t.bias_of is None or t.axis is None or name not in dims:
            continue
        weight = tensors.get(t.bias_of[1])
        if weight is None or weight.axis is None or weight.name not in dims:
            continue
        channels, shape = dims[weight.name][weight.axis], dims[name]
        if len(shape) >= 1 and all(d == 1 for d in shape[:-1]) and shape[-1] == channels:
            t.axis = len(shape) - 1
        else:
            why[name] = (f"bias of shape {list(shape)} broadcast over {channels} output channels: a per-channel int32 "
                         "bias needs one value per channel, so it stays float and is added in float")
    return drop_float(tensors, why, "int32 biases not one value per output channel stay float")


def orphan_int32_biases(tensors: dict[str, TensorPlan]) -> dict[str, str]:
    """Drop the int32 biases whose input or weight is not planned; return ``{name: reason}``."""
    why: dict[str, str] = {}
    for name, t in list(tensors.items()):
        if t.role != "bias" or t.bias_of is None:
            continue
        act, weight = t.bias_of
        missing = [n for n in (act, weight) if n not in tensors]
        if missing:
            del tensors[name]
            which = " and ".join(repr(m) for m in missing)
            why[name] = (f"int32 bias: {which} stays float, so the bias scale (input scale × weight scale) "
                         "does not exist; the bias stays float and onnxruntime runs the node in float")
    if why:
        log.info("plan: %d int32 biases stay float (their input or weight is float): %s", len(why), ", ".join(sorted(why)[:6]))
    return why


def settle(plan: Plan) -> Plan:
    """Apply :func:`orphan_int32_biases` to a finished plan (after calibration-time rules), in place."""
    why = orphan_int32_biases(plan.tensors)
    plan.float_tensors.update(why)
    return plan


def drop_float(tensors: dict[str, TensorPlan], why: dict[str, str], what: str) -> dict[str, str]:
    """Take ``why``'s tensors out of ``tensors`` (they stay float), let the tensors that shared a
    scale with one keep their own, log ``what`` once; return ``why``. The one ending of the plan
    rules that drop tensors, so that none forgets the unsharing."""
    for name in why:
        del tensors[name]
    if why:
        _unshare(tensors, why)
        log.info("plan: %d %s: %s", len(why), what, ", ".join(sorted(why)[:6]))
    return why


def _unshare(tensors: dict[str, TensorPlan], gone: dict[str, str]) -> None:
    """A tensor that shared its scale with a dropped one keeps its own."""
    for t in tensors.values():
        if t.share_with in gone:
            t.share_with = None
