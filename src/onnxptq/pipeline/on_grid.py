"""Activation quantizers that are exact no-ops: the tensor is already on its format's grid.

A block-format quantizer costs a model ~25–40 executed nodes per inference (onnxruntime spends
~1 µs on each on small tensors) and ~45 nodes of session creation, whatever the tensor's size.
When a planned tensor ``t = op(x)`` is produced by an op that only moves, copies or clamps the
values of a tensor ``x`` the emitted model already reads quantized, and the two quantizers are
of the same format, ``Q(t) = t`` bit for bit: the quantizer of ``t`` is left out, and every
reader of ``t`` reads the same bits it read before. This module decides where; emit skips those
quantizers (``pipeline/emit.py``).

**Formats.** The rule holds for MX with int8 elements (MXINT8, no scale search) and for BFP
``to_bfp`` (BFP16) and ``to_bfp_prime`` (MX9, MX6) in their default variants (no bfloat16
pre-rounding, no compiler kernel), with the same attributes apart from the axis. Proof, for a
block B of ``Q(x)`` and a tensor whose every block is B with some elements replaced by 0 or by
``max(v, 0)`` (a Relu), i.e. whose block maximum ``|max|'`` is at most B's:

* MXINT8: B's elements are ``k·2^(X-6)``, ``|k| <= 127``, ``X = max(floor(log2 |max|) , -127)``.
  The new exponent is ``X' <= X``, so every element is an integer multiple ``k·2^(X-X')`` of
  the new unit, and its magnitude is below ``2^(floor(log2 |max|') + 1) = 2^(X'+7)`` (or, with
  ``X' = -127`` clamped, below ``2^-127 = 64·2^-133``): an integer of magnitude <= 127, which
  rounds to itself in every rounding mode. Zeros keep their sign; Inf/NaN pass through and stay
  out of the block maxima.
* BFP ``to_bfp``, ``m = bit_width - 9`` mantissa bits: elements ``q·s``, ``|q| <= 2^m - 1``,
  ``s = 2^(floor(log2 max(|max|, 2^-127)) + 1 - m)``; the same argument with ``s' <= s``
  (``py3_round`` keeps -0; Inf/NaN pass through).
* BFP ``to_bfp_prime``: sub-block scales ``2^(max(e_j, e_s - D) + 1 - m)`` with ``e_j`` the
  sub-block's and ``e_s`` the block's exponent; both can only fall when elements are zeroed or
  replaced by 0, so the new scale of each sub-block is at most its old one, and the magnitude
  bound holds as above. Subnormal inputs are flushed by the reference, but ``Q(x)`` holds none:
  an element ``>= 2^-126`` rounds to at least ``2^-126`` (a point of every grid with
  ``s <= 2^-126``, and rounding is monotone) and smaller ones are flushed to ±0. A block
  holding Inf/NaN is all NaN, and stays so.
* Not MX with float elements: an e4m3 element ``1.875·2^7`` of a block whose maximum is dropped
  by a Relu rescales to ``1.875·2^8 = 480 > 448`` and saturates (tests/test_on_grid.py).

**Ops.** ``Q(t) = t`` follows when every block of ``t`` (along its planned axis, zero-padded
as the reference pads) is a block of ``Q(x)`` (along ``x``'s planned axis), elementwise Relu'd
for a Relu, or all zeros:

* ``Relu``, ``Identity``: the same tensor shape and axis.
* ``Reshape``, ``Flatten``, ``Squeeze``, ``Unsqueeze``: they keep the row-major order of the
  elements, and a block is ``{(l·n + c)·post + t : c in one block range}`` for the axis length
  ``n`` and the number ``post`` of elements after the axis. When both tensors have the same
  known ``n`` and ``post`` at their planned axes, their blocks are the same sets in the same
  order.
* ``Transpose``: the output's planned axis is the input's planned axis moved (``perm[a_t] ==
  a_x``); a block is the run along that axis with the other indices fixed, permuted with them.
* ``Slice`` and ``Concat`` along other axes than the planned one (the same axis on both sides):
  they select or stack whole blocks. Every ``Concat`` input must be on the grid. A ``Concat``
  along the planned axis too when every input but the last has a known length that is a
  multiple of the block size: each input then starts a block of the output, and the last
  one's partial block is zero-padded in both (channel concatenations of 96 or 192 channels).
* ``Gather`` along another axis: whole blocks again (the planned axis renumbered by the
  indices' rank).
* ``Resize`` with ``mode="nearest"`` and the planned axis not resized: each output position
  copies one input position, all channels at once, so each block is one input block (not with
  ``tf_crop_and_resize``, whose positions outside the crop take ``extrapolation_value``).

Not ``MaxPool`` with blocks along channels (the obvious candidate): each channel's maximum may
come from a different position, hence from a block with a finer grid, so its output block mixes
grids; a two-element counterexample is in ``tests/test_on_grid.py``. Nor ``LeakyRelu``,
``HardSwish``, ``Sigmoid`` or pooling averages (they compute new values).

Only float32 tensors (a Cast to float16 after the quantizer would round), quantizers read by
the op's node as the consumers' format (not a producer-side one, spec §4.5), tensors with one
quantizer (no dual quant), and shapes that shape inference knows where a rule needs them.
A tensor this module skips counts as quantized for the tensors after it (``Q(t) = t``).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import numpy as np
import onnx

from ..graph.opsets import is_onnx_domain
from ..graph.ops import RELAYOUTS
from .plan import Plan, TensorPlan

#: Ops whose output elements are copies of input elements (or zeros), whole blocks kept.
_MOVES = RELAYOUTS | {"Slice", "Gather", "Concat", "Resize"}


def grid_key(tplan: TensorPlan) -> tuple | None:
    """What must match between two quantizers for the rule (the format's attributes without the
    axis), or None where the rule is not proved (see the module docstring)."""
    quant = tplan.quant
    if quant.format in ("fp16", "bf16") and not quant.scaled:
        # the effective clamp (pipeline/fp16_range.py leaves it out where the range fits): a
        # clamped reader of an unclamped ±Inf would change it
        return ("float", quant.format, bool(quant.saturate), tplan.clip_guard)
    if quant.format == "mx":
        a = quant.attr_dict
        if a.get("element_dtype", "int8") != "int8" or int(a.get("scale_search", 0)):
            return None
        return ("mx", int(a.get("block_size", 32)))
    if quant.format == "bfp":
        a = quant.attr_dict
        if int(a.get("convert_to_bfloat_before_bfp", 0)):
            return None
        if a["bfp_method"] == "to_bfp":
            if int(a.get("use_compiler_version_cpu_kernel", 0)):
                return None
            return ("bfp", int(a["bit_width"]), int(a["block_size"]))
        if a["bfp_method"] == "to_bfp_prime":
            return ("prime", int(a["bit_width"]), int(a["block_size"]), int(a["sub_block_size"]),
                    int(a["sub_block_shift_bits"]))
    return None


def _axis(tplan: TensorPlan, rank: int) -> int | None:
    """The planned block axis, normalised; None when out of range or rank < 2 (a rank-1 tensor
    blocks its one axis whatever the attribute says: not worth a rule)."""
    axis = tplan.axis if tplan.axis is not None else tplan.quant.attr_dict.get("axis", 1)
    if rank < 2 or not -rank <= int(axis) < rank:
        return None
    return int(axis) % rank


def _dim(shape: tuple, axis: int) -> int | None:
    d = shape[axis]
    return d if isinstance(d, int) and d >= 0 else None


def _post(shape: tuple, axis: int) -> int | None:
    dims = shape[axis + 1:]
    if any(not isinstance(d, int) or d < 0 for d in dims):
        return None
    return int(np.prod(dims, dtype=np.int64))


def _int_list(name: str, constant: Callable[[str], np.ndarray | None]) -> list[int] | None:
    value = constant(name)
    return None if value is None else [int(v) for v in np.asarray(value).reshape(-1)]


def _attr(node: onnx.NodeProto, name: str, default: Any = None) -> Any:
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def blocks_kept(node: onnx.NodeProto, x: str, x_axis: int, x_shape: tuple, t_axis: int, t_shape: tuple,
                constant: Callable[[str], np.ndarray | None]) -> bool:
    """Whether every block of ``node``'s output (planned axis ``t_axis``, shape ``t_shape``) is a
    block of its input ``x`` (axis ``x_axis``, shape ``x_shape``), or a zero block: the op rules
    of the module docstring. Shapes are tuples of ints and None (unknown dims)."""
    op = node.op_type
    xr, tr = len(x_shape), len(t_shape)
    if op in ("Identity", "Relu"):
        return xr == tr and x_axis == t_axis
    if op in ("Reshape", "Flatten", "Squeeze", "Unsqueeze"):
        n = _dim(x_shape, x_axis)
        post = _post(x_shape, x_axis)
        return n is not None and post is not None and n == _dim(t_shape, t_axis) and post == _post(t_shape, t_axis)
    if op == "Transpose":
        perm = _attr(node, "perm")
        perm = list(reversed(range(xr))) if perm is None else [int(p) for p in perm]
        return xr == tr == len(perm) and perm[t_axis] == x_axis
    if op == "Slice":
        if xr != tr or x_axis != t_axis or len(node.input) < 3:
            return False
        starts = _int_list(node.input[1], constant)
        axes = _int_list(node.input[3], constant) if len(node.input) > 3 and node.input[3] else (
            None if starts is None else list(range(len(starts))))
        return axes is not None and all(a % xr != x_axis for a in axes)
    if op == "Concat":  # along the planned axis: see concat_aligned
        return xr == tr and x_axis == t_axis
    if op == "Gather":
        if node.input[0] != x:
            return False
        g = int(_attr(node, "axis", 0)) % xr
        idx_rank = tr - xr + 1
        if g == x_axis or idx_rank < 0:
            return False
        return t_axis == (x_axis if x_axis < g else x_axis - 1 + idx_rank)
    if op == "Resize":
        if _attr(node, "mode", b"nearest") not in (b"nearest", "nearest") or xr != tr or x_axis != t_axis:
            return False
        if _attr(node, "coordinate_transformation_mode") in (b"tf_crop_and_resize", "tf_crop_and_resize"):
            return False  # positions outside the crop take extrapolation_value, not an input's value
        n = _dim(x_shape, x_axis)
        return n is not None and n == _dim(t_shape, t_axis)
    return False


def elementwise(key: tuple) -> bool:
    """A :func:`grid_key` of an element format (unscaled fp16/bf16): no blocks, so no axis."""
    return key[0] == "float"


def values_kept(node: onnx.NodeProto) -> bool:
    """Whether every output element of ``node`` is a copy of an element of its data inputs, or a
    zero (Relu): for an element format that is all :func:`blocks_kept` needs, whatever the axes
    (a ``Resize`` only in ``nearest`` mode without ``tf_crop_and_resize``'s extrapolated values)."""
    if node.op_type == "Resize":
        return (_attr(node, "mode", b"nearest") in (b"nearest", "nearest")
                and _attr(node, "coordinate_transformation_mode") not in (b"tf_crop_and_resize", "tf_crop_and_resize"))
    return node.op_type in _MOVES or node.op_type == "Relu"


def block_size(key: tuple) -> int:
    """The block size in a :func:`grid_key`."""
    return key[1] if key[0] == "mx" else key[2]


def concat_aligned(node: onnx.NodeProto, t_axis: int, rank: int, shapes: dict[str, tuple], bs: int) -> bool:
    """A ``Concat`` keeps whole blocks: along another axis than the planned one always; along it
    when every input but the last has a known length that is a multiple of the block size, so
    each input starts a block of the output (the last one's partial block is padded with zeros
    in both, and a whole axis shorter than a block is that same zero-padded block)."""
    if int(_attr(node, "axis")) % rank != t_axis:
        return True
    inputs = [i for i in node.input if i]
    for x in inputs[:-1]:
        n = _dim(shapes[x], t_axis) if x in shapes and len(shapes[x]) == rank else None
        if n is None or n % bs:
            return False
    return True


def _data_inputs(node: onnx.NodeProto) -> list[str]:
    """The inputs whose values the output copies (Concat: all; the others: the first)."""
    if node.op_type == "Concat":
        return [i for i in node.input if i]
    return [node.input[0]] if node.input and node.input[0] else []


def on_grid_tensors(nodes: Iterable[onnx.NodeProto], plan: Plan, shapes: dict[str, tuple],
                    elem_types: dict[str, int], constant: Callable[[str], np.ndarray | None],
                    reads_quantized: Any) -> dict[str, str]:
    """The planned activations whose quantizer is an exact no-op: ``{tensor: producing op}``.

    ``shapes``/``elem_types``: shape inference's static shapes (None for an unknown dim) and
    element types; ``constant``: a name's initializer or Constant value, None if it has none (Slice axes);
    ``reads_quantized(node_name, tensor)``: whether, in the emitted model, ``node`` reads
    ``tensor``'s (single, consumers') quantizer output rather than the float value.
    """
    producer: dict[str, onnx.NodeProto] = {}
    for node in nodes:
        for o in node.output:
            if o:
                producer[o] = node
    found: dict[str, str] = {}

    def quantized_on_grid(name: str) -> bool:
        """``name`` is planned with one quantizer of a proved format (emitted or skipped)."""
        tplan = plan.tensors.get(name)
        return (tplan is not None and tplan.role not in ("weight", "bias") and tplan.producer_quant is None
                and grid_key(tplan) is not None)

    def skippable(name: str) -> bool:
        # What a reader of a planned x sees is Q(x) whether x's own quantizer is emitted or
        # skipped (then x = Q(x)), so the decisions are independent of each other.
        tplan = plan.tensors[name]
        node = producer.get(name)
        ok = (node is not None and is_onnx_domain(node.domain) and (node.op_type in _MOVES or node.op_type == "Relu")
              and quantized_on_grid(name) and elem_types.get(name) == onnx.TensorProto.FLOAT
              and name in shapes and len(node.output) == 1)
        if ok:
            inputs = _data_inputs(node)
            # an element format (no blocks) needs its values kept, whatever the axes; a block format
            # its blocks, read along each input's axis
            flat = elementwise(grid_key(tplan))
            t_shape = shapes[name]
            t_axis = None if flat else _axis(tplan, len(t_shape))
            ok = (values_kept(node) if flat else t_axis is not None) and bool(inputs)
            if ok and not flat and node.op_type == "Concat":
                ok = concat_aligned(node, t_axis, len(t_shape), shapes, block_size(grid_key(tplan)))
            for x in inputs if ok else []:
                xplan = plan.tensors.get(x)
                if (xplan is None or not quantized_on_grid(x) or grid_key(xplan) != grid_key(tplan)
                        or elem_types.get(x) != onnx.TensorProto.FLOAT or not reads_quantized(node.name, x)):
                    ok = False
                    break
                if flat:
                    continue
                x_shape = shapes.get(x)
                if x_shape is None:
                    ok = False
                    break
                x_axis = _axis(xplan, len(x_shape))
                if x_axis is None or not blocks_kept(node, x, x_axis, x_shape, t_axis, t_shape, constant):
                    ok = False
                    break
        if ok:
            found[name] = node.op_type
        return ok

    for name, tplan in plan.tensors.items():
        if tplan.role not in ("weight", "bias"):
            skippable(name)
    return found


__all__ = ["block_size", "blocks_kept", "concat_aligned", "elementwise", "grid_key", "on_grid_tensors", "values_kept"]
