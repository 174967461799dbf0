"""How many elements each activation held on the calibration feeds: a hint for the block bodies.

A block quantizer's body has two exact forms on some formats (onnx_ops.bfp ``f`` views, onnx_ops.mx
INT8 bodies without ``i``): branch-free, whose extra full passes cost more as the tensor grows, and
one with ``If`` nodes, whose subgraphs cost session creation and a frame per call whatever the size.
The body builders pick by the tensor's declared shape, and a model that declares its activations
``[N, C, ?, ?]`` (PP-OCR cls: every one) never tells them a tensor is small. Calibration ran the
model on real feeds, so the sizes it saw are known: ONNX shape inference with the graph inputs set
to each feed's shape gives them without running anything. Only the choice between two correct
bodies reads them (a later feed of any size runs either body exactly); nothing here is trusted for
values.
"""

from __future__ import annotations

import logging
import weakref
from typing import Any, Iterable, Mapping

import numpy as np
import onnx

from ..calibration.runner import infer_at_shapes, shape_probe

log = logging.getLogger(__name__)

#: At most this many distinct input-shape signatures of the feeds are inferred (each is one shape
#: inference of the graph without its weights; a feed set of many image sizes needs no more to say
#: which tensors stay small).
MAX_SIGNATURES = 4


def _signature(feed: Mapping[str, Any], inputs: set[str]) -> tuple[tuple[str, tuple[int, ...]], ...]:
    return tuple(sorted((k, tuple(int(d) for d in np.shape(v))) for k, v in feed.items() if k in inputs))


def observed_sizes(model: onnx.ModelProto, feeds: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """``{tensor: elements}`` of the main graph's tensors, its inputs included: the most elements
    each held over the distinct input shapes of ``feeds`` (the first :data:`MAX_SIGNATURES`), the
    inputs' read off the feeds, the others' by shape inference with the inputs set to those
    shapes. A tensor is left out where some inferred shape is not wholly concrete (a
    data-dependent dim: a NonZero's count, a Loop's trip) or inference fails (then only the inputs
    are sized): its body is chosen by its declared shape alone, as without a hint."""
    inputs = {vi.name for vi in model.graph.input}
    signatures: list[tuple[tuple[str, tuple[int, ...]], ...]] = []
    for feed in feeds:
        sig = _signature(feed, inputs)
        if sig and sig not in signatures:
            signatures.append(sig)
        if len(signatures) >= MAX_SIGNATURES:
            break
    if not signatures:
        return {}
    try:
        base = shape_probe(model)
    except Exception as exc:  # noqa: BLE001 - a hint only
        log.debug("observed sizes: no shape probe (%s)", exc)
        return {}
    # A graph input's size is its feed's: no inference needed. Inference returns value infos and
    # outputs only, so without this a block quantizer on a model input (cls's image: 27 648
    # elements, under MX9's and MXINT8's lines) kept its declared-shape body.
    sizes: dict[str, int] = {}
    for sig in signatures:
        for name, dims in sig:
            sizes[name] = max(sizes.get(name, 0), int(np.prod(dims, dtype=np.int64)))
    unsized: set[str] = set()
    for sig in signatures:
        try:
            inferred = infer_at_shapes(base, dict(sig))
        except Exception as exc:  # noqa: BLE001 - a hint only
            log.debug("observed sizes: shape inference failed on %s (%s)", sig, exc)
            return {k: v for k, v in sizes.items() if k in inputs}
        for vi in inferred:
            t = vi.type.tensor_type
            dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim] if t.HasField("shape") else None
            if dims is None or any(d is None for d in dims):
                unsized.add(vi.name)
                continue
            n = int(np.prod(dims, dtype=np.int64))
            sizes[vi.name] = max(sizes.get(vi.name, 0), n)
    return {k: v for k, v in sizes.items() if k not in unsized}


#: :func:`of_calibration`'s answers, by the ``id`` of the calibration they were read from (dropped
#: with it): a search builds many candidates from one calibration, each asking again.
_CACHE: dict[int, dict[str, int]] = {}


def of_calibration(calibrated: Any) -> dict[str, int]:
    """:func:`observed_sizes` of a :class:`.calibrate.Calibrated`'s prepared model on the feeds it
    kept and held out (the calibration's first feeds and the floor's), once per calibration (~5-15
    ms of shape inference on PP-OCR-sized graphs; repair asks for every candidate it builds)."""
    key = id(calibrated)
    if key not in _CACHE:
        feeds = list(calibrated.kept) + list(calibrated.holdout)
        _CACHE[key] = observed_sizes(calibrated.prepared, feeds)
        weakref.finalize(calibrated, _CACHE.pop, key, None)
    return _CACHE[key]
