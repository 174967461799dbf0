"""Tensors whose statistics are another tensor's: a relayout (Reshape, Transpose, …) of a calibrated tensor.

A ``Reshape``/``Transpose``/``Squeeze``/``Unsqueeze``/``Flatten``/``Identity`` output holds exactly its data
input's values, in another order or shape: per feed the same multiset of values, so the same extremes,
count, tails and histogram counts. Every statistic a collector keeps is a function of that multiset (the
tail collector's retained values are read as bin counts, never by position), so a relayout whose source is
calibrated with the same collector spec needs no reduction of its own: its collector is a copy of the
source's. On DAT-light x2 (a windowed-attention transformer) 585 of the 1471 tensors A16W8 calibrates are
relayouts of another (bench/RESULTS.md, calib18); each in-graph tail reduction was ~10-40 nodes of the
calibration graph, whose session creation was that model's largest calibration cost.

Exact, but for one corner no real calibration meets: the float32 row sums that tell a reduction's NaN
(reductions.py) add the values in another order, so a sum that overflows to ±inf on finite values near
3.4e38 could read as NaN for one tensor and not its relayout.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from typing import Any

import onnx

from ..graph.ops import RELAYOUTS
from ..graph.walk import dataflow

log = logging.getLogger(__name__)

__all__ = ["relayout_sources", "with_relayouts"]


def relayout_sources(graph: onnx.GraphProto, specs: Mapping[str, Any]) -> dict[str, str]:
    """``{tensor: source}`` for each tensor of ``specs`` (main-graph name -> collector spec) that a chain of
    :data:`~onnxptq.graph.ops.RELAYOUTS` ops computes from ``source``, the first tensor of ``specs`` up
    that chain, where both specs are equal; the source is itself never a relayout so shared (the chain's
    root). Tensors up the chain that ``specs`` does not hold are walked through (their values are the
    same); a spec that differs stops the walk (its statistics are another kind)."""
    producer, _ = dataflow(graph.node)
    found: dict[str, str] = {}
    for name, spec in specs.items():
        current, seen = name, {name}
        while True:
            node = producer.get(current)
            if node is None or node.op_type not in RELAYOUTS or not node.input or not node.input[0]:
                break
            current = node.input[0]
            if current in seen:  # a malformed cycle: nothing to share
                break
            seen.add(current)
            if current in specs:
                if specs[current] == spec:
                    found[name] = current
                break
    # every source is a root: a chain a -> b -> c of three calibrated tensors shares a's collector
    for name, src in found.items():
        while src in found:
            src = found[src]
        found[name] = src
    return found


def with_relayouts(collected: Mapping[str, Any], sources: Mapping[str, str], order: list[str]) -> dict[str, Any]:
    """``collected`` with a copy of its source's collector for each relayout of ``sources`` (named for
    it), in ``order``."""
    out: dict[str, Any] = {}
    for name in order:
        if name in sources:
            made = copy.deepcopy(collected[sources[name]])
            if hasattr(made, "name"):
                made.name = name
            out[name] = made
        elif name in collected:
            out[name] = collected[name]
    for name, c in collected.items():  # anything the runner added beyond the order (none today)
        out.setdefault(name, c)
    if sources:
        log.debug("calibration: %d relayout tensors take their source's statistics", len(sources))
    return out
