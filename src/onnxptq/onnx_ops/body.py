"""The builder of our ONNX function bodies (nodes with fresh SSA names, shared constants, branches)
and the block view both block families use.

The BFP and MX functions are built with :class:`Body`, and view a tensor as blocks with
:func:`view_static` when the padding is known at build time, or :func:`view_generic` for any
shape (the ONNX counterparts of :func:`onnxptq.formats.blocks.to_blocks`). Names are unique across the whole body (its ``If``
branches share the top level's counter); constants and shape arithmetic go to the top level once
and every branch reads them from there, because each node costs onnxruntime session-creation time
and a value computed in two branches would be computed and planned twice.
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Callable

import numpy as np
import onnx
from onnx import TensorProto, helper


#: onnx's element types of the arrays bodies hold as constants, with the byte order from_array writes
_RAW_TYPES = {np.dtype("<f4"): TensorProto.FLOAT, np.dtype("<f8"): TensorProto.DOUBLE, np.dtype("<i8"): TensorProto.INT64,
              np.dtype("<i4"): TensorProto.INT32}


def constant_tensor(value: np.ndarray, name: str) -> onnx.TensorProto:
    """``onnx.numpy_helper.from_array(value, name)``, the same message field for field (dims, element
    type, name, little-endian ``raw_data``), built directly for the element types bodies use.

    Why: from_array's dtype checks cost ~15 us a call, and building a model's block bodies makes
    ~450 constants (PP-OCR cls MX9), in every process that quantizes (bodies are built once per
    process, :func:`onnxptq.onnx_ops.bfp._function_once`). Any other type goes through from_array."""
    kind = _RAW_TYPES.get(value.dtype)
    if kind is None:
        return onnx.numpy_helper.from_array(value, name)
    tensor = TensorProto(dims=value.shape, data_type=kind, raw_data=value.tobytes())
    if name:  # as from_array: an empty name is left unset
        tensor.name = name
    return tensor


def make_node(op_type: str, inputs: list[str], outputs: list[str], **attrs: Any) -> onnx.NodeProto:
    """``onnx.helper.make_node(op_type, inputs, outputs, **attrs)``, the same message field for field
    (attributes sorted by name, None ones left out), int and tensor attributes set in place.

    Why: helper.make_node's generic attribute path (``make_attribute``'s type tests, one more copy of
    every attribute into the node) was ~40 % of building a model's block bodies: PP-OCR cls MX9's 24
    bodies, ~1 270 nodes, in every process that quantizes. Any other attribute goes through
    ``helper.make_attribute``."""
    node = onnx.NodeProto(op_type=op_type, input=inputs, output=outputs)
    for key in sorted(attrs):
        value = attrs[key]
        if value is None:
            continue
        if isinstance(value, (int, np.integer)):  # numbers.Integral, as make_attribute (bool included)
            node.attribute.add(name=key, i=int(value), type=onnx.AttributeProto.INT)
        elif isinstance(value, TensorProto):
            node.attribute.add(name=key, type=onnx.AttributeProto.TENSOR).t.CopyFrom(value)
        else:
            node.attribute.append(helper.make_attribute(key, value))
    return node


class Body:
    """A list of nodes (a function body, or one ``If`` branch of it via :meth:`branch`).

    ``known``: the static shape of the body's input ``x`` (ints, None for an unknown dim) when
    the body is built for it (the caller puts it in the function's name: one name, one body).
    Shape arithmetic on ``x`` is then resolved while the body is built (:meth:`shared` folds
    ``Shape``, ``Concat``, ``ReduceProd`` and integer arithmetic on constants): a call executes
    none of it, and onnxruntime neither creates nor plans those nodes in every session. A shape
    with one unknown dim (a dynamic batch) still folds where the value is a ``Reshape`` target:
    the unknown dim becomes its ``-1`` (see :meth:`target`)."""

    def __init__(self, opset: int = 0, parent: "Body | None" = None, known: Any = None) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.root: Body = parent.root if parent is not None else self
        self.opset = parent.opset if parent is not None else opset
        if parent is None:
            self._counter = itertools.count()
            self._consts: dict[tuple, str] = {}
            self._shared: dict[tuple, str] = {}
            self._values: dict[str, np.ndarray] = {}  # int64 constants by name
            self._targets: dict[str, tuple[np.ndarray, tuple]] = {}  # Reshape-target-only values: (-1 form, the Shape key)
            self.known = foldable_shape(known)
            self.rank: int | None = None  # the rank of the body's elementwise tensors (see wide)

    def fresh(self, hint: str) -> str:
        """A name no other value of the body has."""
        return f"{hint}_{next(self.root._counter)}"

    def op(self, op_type: str, *inputs: str, n_out: int = 1, hint: str | None = None, **attrs: Any) -> str:
        """Append ``op_type(*inputs)``; returns its (first) output. A value valid only as a
        ``Reshape`` target (:meth:`target`) read by anything else is computed by its node."""
        inputs = tuple(i if op_type == "Reshape" and k == 1 else self.root._real(i) for k, i in enumerate(inputs))
        outs = [self.fresh(hint or op_type.lower()) for _ in range(n_out)]
        self.nodes.append(make_node(op_type, list(inputs), outs, **attrs))
        return outs[0]

    def shared(self, op_type: str, *inputs: str, **attrs: Any) -> str:
        """An op on shapes and constants only, placed once at the top level for every branch;
        folded to a constant when its inputs are known at build time (see the class)."""
        key = (op_type, inputs, tuple(sorted((k, repr(v)) for k, v in attrs.items())))
        if key not in self.root._shared:
            folded = self.root._fold(op_type, inputs, attrs)
            self.root._shared[key] = folded if folded is not None else self.root.op(op_type, *inputs, **attrs)
        return self.root._shared[key]

    def target(self, name: str) -> bool:
        """Whether ``name`` is a folded value that holds only as a ``Reshape`` target."""
        return name in self.root._targets

    def _real(self, name: str) -> str:
        """``name``, or for a Reshape-target-only value the node that computes it."""
        if name not in self._targets:
            return name
        key = self._targets[name][1]
        real = self._shared.get(("real",) + key)
        if real is None:
            op_type, inputs, attrs = key
            real = self._shared[("real",) + key] = self.op(op_type, *inputs, **dict(attrs))
        return real

    def _fold(self, op_type: str, inputs: tuple[str, ...], attrs: dict[str, Any]) -> str | None:
        """The constant ``op_type(*inputs)`` when it is known at build time, else None."""
        vals = [self._values.get(i) for i in inputs]
        if op_type == "Shape" and inputs == ("x",) and self.known is not None:
            dims = self.known[slice(attrs.get("start"), attrs.get("end"))]
            if all(d is not None for d in dims):
                return self.i64(*dims)
            if known_size(self.known) > 0:  # the one unknown dim: -1 in a Reshape target
                return self._target_const(np.array([-1 if d is None else d for d in dims], np.int64),
                                          (op_type, inputs, tuple(sorted(attrs.items()))))
            return None
        if op_type == "Concat" and attrs.get("axis") == 0 and inputs:
            parts = [self._targets[i][0] if i in self._targets else self._values.get(i) for i in inputs]
            if any(v is None or v.ndim != 1 for v in parts):
                return None
            whole = np.concatenate(parts)
            if not any(i in self._targets for i in inputs):
                return self.i64(*whole.tolist())
            if int((whole == -1).sum()) != 1:  # a Reshape target holds one -1 at most
                return None
            return self._target_const(whole, (op_type, inputs, tuple(sorted(attrs.items()))))
        if any(v is None for v in vals) or not vals:
            return None
        if op_type == "ReduceProd" and len(vals) == 1 and attrs.get("keepdims", 1) == 1:
            return self.i64(int(np.prod(vals[0], dtype=np.int64)))
        if op_type in _INT_OPS and all(v.ndim <= 1 for v in vals):
            out = _INT_OPS[op_type](*vals)
            return self.const(out, np.int64)
        return None

    def live_nodes(self, outputs: tuple[str, ...] = ("y",)) -> list[onnx.NodeProto]:
        """The top level's nodes less the Constants nothing reads (the pieces of folded shape
        values): each would be one more node for onnxruntime to inline and drop per call."""
        read = set(outputs)

        def reads(nodes: list[onnx.NodeProto]) -> None:
            for n in nodes:
                read.update(n.input)
                for at in n.attribute:
                    if at.type == onnx.AttributeProto.GRAPH:
                        reads(list(at.g.node))
                        read.update(o.name for o in at.g.output)

        reads(self.nodes)
        return [n for n in self.nodes if n.op_type != "Constant" or n.output[0] in read]

    def _target_const(self, value: np.ndarray, key: tuple) -> str:
        """A Constant holding ``value`` (one -1: the unknown dim) for use as a Reshape target
        only; ``key`` is the node that computes it for any other reader (:meth:`_real`)."""
        name = self.fresh("t")
        self.nodes.append(make_node("Constant", [], [name], value=constant_tensor(value, name)))
        self._targets[name] = (value, key)
        return name

    def const(self, value: Any, dtype: Any = np.float32) -> str:
        """A Constant node at the top level, one per distinct value."""
        root = self.root
        arr = np.asarray(value, dtype=dtype)
        key = (arr.dtype.str, arr.shape, arr.tobytes())
        if key not in root._consts:
            name = root._consts[key] = self.fresh("c")
            root.nodes.append(make_node("Constant", [], [name], value=constant_tensor(arr, name)))
            if arr.dtype == np.int64:
                root._values[name] = arr
        return root._consts[key]

    def wide(self, value: Any, dtype: Any = np.float32) -> str:
        """A constant for a binary elementwise op on the body's view tensors: shaped ``[1] * rank``
        when the body set :attr:`rank` (the rank every view tensor and block-maxima tensor has),
        a scalar otherwise. Same values, same broadcast result, same bits.

        Why: onnxruntime 1.32's CPU broadcast runs a tensor whose last dim is 1 against a rank-0
        (or ``[1]``) operand element by element: ``Mul`` of a ``[21000, 32, 1]`` view by a scalar
        took 17-19 ms, by a ``[1, 1, 1]`` constant 0.29 ms (a flat tensor by a scalar: 0.27 ms;
        bench/fp_body_profile.py --isolated). Every view with one element after the block axis
        (``post == 1``: blocks along the last-but-trailing-ones axis, and every block-maxima tensor,
        whose dims after the reduction are kept as 1) hit it."""
        rank = self.root.rank
        return self.const(value if rank is None else np.full([1] * rank, value, dtype=dtype), dtype)

    def i64(self, *values: int) -> str:
        """A 1-D int64 constant."""
        return self.const(list(values), np.int64)

    def i64s(self, value: int) -> str:
        """A scalar (rank 0) int64 constant."""
        return self.const(value, np.int64)

    def attr_int(self, attr: str) -> str:
        """A scalar int64 holding the calling node's attribute ``attr`` (a function attribute)."""
        name = self.fresh(attr)
        node = helper.make_node("Constant", [], [name])
        node.attribute.append(onnx.AttributeProto(name="value_int", ref_attr_name=attr, type=onnx.AttributeProto.INT))
        self.nodes.append(node)
        return name

    def reduce(self, op_type: str, x: str, axes: list[int] | None, keepdims: int = 1) -> str:
        """Reduce over ``axes`` (None: all), with axes as input from opset 18 (13 for ReduceSum)."""
        if axes is None:
            return self.op(op_type, x, keepdims=keepdims)
        if op_type == "ReduceSum" or self.opset >= 18:
            return self.op(op_type, x, self.i64(*axes), keepdims=keepdims)
        return self.op(op_type, x, axes=axes, keepdims=keepdims)

    def branch(self) -> "Body":
        """An empty ``If`` branch of this body (built before its ``If`` node is added)."""
        return Body(parent=self)

    def graph(self, output: str, name: str | None = None, elem_type: int = TensorProto.FLOAT) -> onnx.GraphProto:
        """This branch as an ``If`` branch graph returning ``output``."""
        return helper.make_graph(self.nodes, name or self.fresh("branch"), [],
                                 [helper.make_tensor_value_info(output, elem_type, None)])


_I64_MAX = np.iinfo(np.int64).max

#: Integer ops :meth:`Body.shared` folds on constants (shape arithmetic; sizes are non-negative,
#: so numpy's floor division is ONNX's truncating ``Div``).
_INT_OPS: dict[str, Callable[..., np.ndarray]] = {
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.floor_divide,
    "Max": np.maximum, "Min": np.minimum,
}


def foldable_shape(shape: Any) -> tuple[int | None, ...] | None:
    """``shape`` as a tuple when it has a rank and at most one unknown dim (a dynamic batch), else
    None: only then do the body's shape values fold (:class:`Body`)."""
    if shape is None:
        return None
    dims = tuple(known_dim(d) for d in shape)
    return dims if sum(d is None for d in dims) <= 1 else None


def pow2_floor(g: Body, a: str, scale: float = 1.0) -> str:
    """``2^floor(log2 a)·scale`` for a finite float32 ``a > 0`` (subnormals included) and a power
    of two ``scale``, exactly, with arithmetic only (shared by the BFP and MX scales); ``a = 0``
    gives 0, which the callers' lower clamp turns into their minimum scale.

    In float64, ``b = a·(3/4 + 2^-40)`` lies strictly inside ``(0.75·2^e, 1.5·2^e)`` for
    ``a`` in ``[2^e, 2^(e+1))`` (a float32 has 24 bits, so the product's rounding error is far
    below the margins), and rounding ``b`` to one significant bit gives ``2^e`` with no tie. The
    rounding is a Veltkamp split: ``c = b·(2^52+1)``, ``h = c - (c - b)``. float64 keeps every
    step finite and float32 subnormals normal; no Where/compare (slow in onnxruntime) is needed.
    ``scale`` rides along in the first product (a power of two commutes with every rounding in
    float64's range), which saves an op on the block maxima.
    """
    b = g.op("Mul", g.op("Cast", a, to=TensorProto.DOUBLE), g.wide((0.75 + 2.0**-40) * scale, np.float64))
    c = g.op("Mul", b, g.wide(2.0**52 + 1.0, np.float64))
    h = g.op("Sub", c, g.op("Sub", c, b))
    return g.op("Cast", h, to=TensorProto.FLOAT)


def known_dim(d: Any) -> int | None:
    """``d`` as an int when it is a known dim (a non-negative int); None for a name, None or -1."""
    if isinstance(d, (bool, np.bool_)) or not isinstance(d, (int, np.integer)) or d < 0:
        return None
    return int(d)


def axis_length(shape: Any, axis: int) -> int | None:
    """The known length of ``axis`` in ``shape`` (static dims; None/str unknown); None for an
    unknown shape, rank < 2 (rank 1 ignores the axis), an out-of-range axis or an unknown dim:
    the body for any shape is used then."""
    if shape is None:
        return None
    dims = list(shape)
    if len(dims) < 2 or not -len(dims) <= axis < len(dims):
        return None
    return known_dim(dims[axis % len(dims)])


def known_dims(shape: Any) -> str:
    """``shape`` for a function name: its dims joined by ``x``, ``u`` for an unknown one."""
    return "x".join("u" if known_dim(d) is None else str(known_dim(d)) for d in shape)


#: Smallest size (elements) of a tensor with a last block axis, or a block axis followed by known 1s
#: (:func:`ones_after`), that takes the transposed view (:func:`view_last`): below it the view's two
#: Transposes and four Reshapes cost more per call than the short spans they avoid. One line for the
#: MX bodies (``onnx_ops.mx``: the tensor's known size) and the BFP bodies
#: (``onnx_ops.bfp._small_for_transpose``: an SE block's ``[?, C, 1, 1]``, C elements, 19 of PP-OCR
#: cls's 54 activations; bench/RESULTS.md, blocklat12).
LAST_AXIS_MIN_SIZE = 8192


def ones_after(shape: Any, axis: int) -> bool:
    """Whether ``axis`` has later dims and every one is known to be 1 (``[T, C, 1]``, an SE
    block's ``[N, C, 1, 1]``): the blocks then lie along the axis in memory as for a last axis,
    and the ``(rows, bs, 1)`` view would leave every broadcast and reduction with runs of a few
    elements, which onnxruntime loops over one at a time, and every block-maxima tensor with a
    trailing 1 (MX9 on a ``[21000, 32, 1]`` activation: a per-block ``Div`` and ``Mul`` of
    17 ms each on spans of 2); :func:`view_last` transposes the blocks instead, reading the
    block axis's length from the axis itself. Shared by the BFP and MX bodies."""
    dims = list(shape)[axis % len(list(shape)) + 1:]
    return bool(dims) and all(known_dim(d) == 1 for d in dims)


def known_size(shape: Any) -> int:
    """The product of the known dims of ``shape``; 0 if one is 0. A tensor of this shape holds 0
    elements or at least this many, whatever its unknown dims."""
    # a Python product (exact ints): np.prod on a short list cost ~30 us a call, ~150 calls a model's bodies
    return math.prod(d for d in map(known_dim, shape) if d is not None)


def small(shape: Any, observed: int | None, limit: int, seen_limit: int) -> bool:
    """Whether a body for a tensor of ``shape`` takes its branch-free form rather than its form
    with ``If`` nodes: every dim known and fewer than ``limit`` elements, or (``observed``) fewer
    than ``seen_limit`` on every calibration feed (``pipeline/observed_sizes.py``: a model that
    declares its maps ``[N, C, ?, ?]`` never tells the size). The two lines differ because the
    bodies do: where dims are unknown the branched body also computes its views' shapes in every
    call, so its branch-free twin stays cheaper up to larger tensors (bench/RESULTS.md,
    blockhint15). Both forms are exact on any input; only speed reads this, so a later feed larger
    than the hint runs correctly."""
    if shape is not None and all(known_dim(d) is not None for d in shape) and known_size(shape) < limit:
        return True
    return observed is not None and 0 <= observed < seen_limit


def view_generic(g: Body, xf: str, axis: int | str, bs: int | str) -> tuple[str, str, Callable[[str], str]]:
    """The (rows, bs, post) block view of ``xf`` (``x`` flattened) for any shape: the block axis is
    always padded (by 0 when it divides) and sliced back — two copies, no branch.

    ``axis`` and ``bs`` are ints fixed when the function is built (BFP: one function per attribute
    set) or names of scalar int64 values computed in the body's top level, e.g. attribute
    references from :meth:`Body.attr_int` (MX: one function for every axis and block size). The
    arithmetic is the same either way, so both families share this one view. A rank-1 input
    ignores ``axis``; an out-of-range axis makes the ``Gather`` fail loudly at run time. Returns
    the view, ``post`` (elements after the axis) and ``restore``.
    """
    shape = g.shared("Shape", "x")
    rank = g.shared("Size", shape)
    if isinstance(axis, str):
        norm = g.shared("Where", g.shared("Less", axis, g.i64s(0)), g.shared("Add", axis, rank), axis)
    else:
        norm = g.i64s(axis) if axis >= 0 else g.shared("Add", rank, g.i64s(axis))
    ax = g.shared("Where", g.shared("Equal", rank, g.i64s(1)), g.i64s(0), norm)
    ax = g.shared("Where", g.shared("Less", ax, g.i64s(0)), rank, ax)
    chan = g.shared("Gather", shape, ax)
    ax1 = g.shared("Unsqueeze", g.shared("Add", ax, g.i64s(1)), g.i64(0))
    post = g.shared("ReduceProd", g.shared("Slice", shape, ax1, g.i64(_I64_MAX)), keepdims=1)
    if isinstance(bs, str):
        bs1 = g.shared("Unsqueeze", bs, g.i64(0))
        cp = g.shared("Mul", g.shared("Div", g.shared("Sub", g.shared("Add", chan, bs), g.i64s(1)), bs), bs)
    else:
        bs1 = g.i64(bs)
        cp = g.shared("Mul", g.shared("Div", g.shared("Add", chan, g.i64s(bs - 1)), g.i64s(bs)), g.i64s(bs))
    chan1, cp1 = g.shared("Unsqueeze", chan, g.i64(0)), g.shared("Unsqueeze", cp, g.i64(0))
    x3 = g.op("Reshape", xf, g.shared("Concat", g.i64(-1), chan1, post, axis=0))
    pads = g.shared("Concat", g.i64(0, 0, 0, 0), g.shared("Sub", cp1, chan1), g.i64(0), axis=0)
    xr = g.op("Reshape", g.op("Pad", x3, pads), g.shared("Concat", g.i64(-1), bs1, post, axis=0))

    def restore(y: str) -> str:
        y3 = g.op("Reshape", y, g.shared("Concat", g.i64(-1), cp1, post, axis=0))
        return g.op("Slice", y3, g.i64(0), chan1, g.i64(1))

    return xr, post, restore


def trailing_size(shape: Any, axis: int) -> int | None:
    """The number of elements after ``axis`` when every dim after it is known (at least 1, so
    that an empty tensor views as 0 rows), else None."""
    dims = [known_dim(d) for d in list(shape)[axis % len(list(shape)) + 1:]]
    return None if any(d is None for d in dims) else max(int(np.prod(dims, dtype=np.int64)), 1)


def view_ranked(g: Body, xf: str, axis: int, bs: int, post_size: int | None) -> tuple[str, str, Callable[[str], str]]:
    """The (rows, bs, post) block view of ``xf`` (``x`` flattened) when the rank of ``x`` is known
    but the block axis's length is not (a sequence axis, or a dim shape inference lost): the
    axis (``0 <= axis < rank``) and block size are constants, the axis is padded by a computed
    amount and sliced back, as in :func:`view_generic`, without its rank arithmetic.

    A call costs onnxruntime about 1 µs per executed node, and the generic view runs ~25 nodes
    of shape arithmetic (rank, axis normalisation, a Gather of the axis length); this one runs
    about 15, fewer again when the dims after the axis are known (``post_size``). The input must
    hold at least one element (the callers' size ``If`` returns an empty tensor unchanged)."""
    chan = g.shared("Shape", "x", start=axis, end=axis + 1)
    if post_size is None:
        post = g.shared("Max", g.shared("ReduceProd", g.shared("Shape", "x", start=axis + 1), keepdims=1), g.i64(1))
    else:
        post = g.i64(post_size)
    cp = g.shared("Mul", g.shared("Div", g.shared("Add", chan, g.i64(bs - 1)), g.i64(bs)), g.i64(bs))
    x3 = g.op("Reshape", xf, g.shared("Concat", g.i64(-1), chan, post, axis=0))
    pads = g.shared("Concat", g.i64(0, 0, 0, 0), g.shared("Sub", cp, chan), g.i64(0), axis=0)
    target = g.i64(-1, bs, post_size) if post_size is not None else g.shared("Concat", g.i64(-1, bs), post, axis=0)
    xr = g.op("Reshape", g.op("Pad", x3, pads), target)

    def restore(y: str) -> str:
        y3 = g.op("Reshape", y, g.shared("Concat", g.i64(-1), cp, post, axis=0))
        return g.op("Slice", y3, g.i64(0), chan, g.i64(1))

    return xr, post, restore


_FLT_MAX = float(np.finfo(np.float32).max)


def masked_neg_abs(g: Body, x: str) -> str:
    """``-|x|`` where ``x`` is finite, ``+0`` where it is ±Inf or NaN: the block maxima of |x|
    over the finite elements (the references' rule) are ``-ReduceMin`` of it, with no run-time
    branch and no ``Where``.

    ``ThresholdedRelu(t, alpha=-inf)`` is ``t`` where ``t > -inf`` and 0 elsewhere: it drops
    ``-Inf`` and NaN (a comparison with NaN is false) and keeps every finite value, -0 included.
    ``-|x|`` turns +Inf into -Inf, so one of them drops every non-finite value. Three unary
    passes, where the masked formulas they replace took a compare and a ``Where`` (onnxruntime's
    CPU ``Where`` costs ~8 elementwise passes: 0.67 vs 0.08 ms on 800k elements) and sat in an
    ``If`` (~0.5 ms of session creation each, in every call). ``-|x|`` also answers ``|x| >= t``
    exactly as ``-|x| <= -t`` (negation is exact), false where it is 0 and ``t > 0``."""
    return g.op("ThresholdedRelu", g.op("Neg", g.op("Abs", x)), alpha=float("-inf"))


def put_back_nonfinite(g: Body, y: str, x: str) -> str:
    """``y`` (finite) where ``x`` is finite, ``x`` where it is ±Inf or NaN, with -0 kept:
    ``y - (clip(x) - x)``; ``clip(x) - x`` is +0 for a finite x (and ``y - +0`` keeps a -0),
    ∓Inf for ±Inf, NaN for NaN. No ``Where`` (it turns a -0 taken from its then slot into +0,
    and costs ~8 passes)."""
    xc = g.op("Clip", x, g.const(-_FLT_MAX), g.const(_FLT_MAX))
    return g.op("Sub", y, g.op("Sub", xc, x))


#: Smallest known size (elements) of a tensor whose block maxima are taken by halves
#: (:func:`max_by_halves`): its four more nodes cost onnxruntime ~1 µs each per call, which on the
#: small tensors of a wake-word head (PP-OCR-sized or smaller activations) costs more than the
#: slow reduction it avoids (oww_hey_jarvis MXINT8 2.37 -> 2.77x float with halves everywhere).
HALVES_MIN_SIZE = 16384


def max_by_halves(g: Body, t: str, first: str, second: str | None, reduce: Callable[["Body", str], str],
                  axis: int = 1, allowzero: bool = False, merge: str = "Max") -> str:
    """A block maximum in two stages: ``t`` reshaped to ``first`` (each block's axis cut into two
    halves, the factor 2 moved in front of it), ``reduce`` (the maxima over the half-block axis,
    kept), reshaped to ``second`` (None: the result already has the 2 at ``axis``), and the two
    half-maxima merged by ``Split`` + ``Max`` (``allowzero``: ``first`` holds an input's own dims,
    zeros of an empty tensor included). Exact: a maximum rounds nothing (used for the
    plain formulas, finite data: ``Max`` and ``ReduceMax`` need not agree on NaN). ``merge``:
    ``"Min"`` when ``reduce`` takes minima (the block minima of ``-|x|``, see
    :func:`masked_neg_abs`).

    Why: onnxruntime's CPU ``ReduceMax``/``ReduceMin`` over the block axis of a ``(rows, bs,
    post)`` view is fast when ``rows >= 2`` and ~3 elementwise passes' worth slow when
    ``rows == 1`` — every activation with batch 1 whose channels are one block (the reduction
    then is over the leading axis). With the factor 2 in front it is never 1, whatever the
    batch, and the second stage runs on 2/bs of the elements. 1-thread, max and min of x: 1x16x
    384x384 in blocks of 16 4.93 -> 0.96 ms, 1x24x192x192 (blocks of 24) 2.56 -> 0.28 ms,
    1x64x96x96 (2 rows) 0.52 -> 0.25 ms (bench/RESULTS.md, "fourth round")."""
    h = reduce(g, g.op("Reshape", t, first, **({"allowzero": 1} if allowzero else {})))
    if second is not None:
        h = g.op("Reshape", h, second)
    p1, p2 = g.fresh("half"), g.fresh("half")
    attrs = {"num_outputs": 2} if g.opset >= 18 else {}
    g.nodes.append(helper.make_node("Split", [h], [p1, p2], axis=axis, **attrs))
    return g.op(merge, p1, p2)


def halves_shapes(g: Body, bs: int, post: str | None) -> tuple[str, str]:
    """The two Reshape targets :func:`max_by_halves` takes for a ``(rows, bs, post)`` view
    (``post`` a 1-D int64 value, or None for :func:`view_last`'s ``(1, bs, blocks)``)."""
    if post is None:
        return g.i64(2, bs // 2, -1), g.i64(1, 2, -1)
    return g.shared("Concat", g.i64(-1, bs // 2), post, axis=0), g.shared("Concat", g.i64(-1, 2), post, axis=0)


class SplitAxis:
    """Reshape targets for the views that cut one axis of ``x`` (rank ``rank``) into two
    (``(lead..., m1, m2, trail...)``, rank + 1), with the other dims taken from the input itself.

    Where the shape values fold at build time (:class:`Body`'s ``known``), a target is the
    ``Concat`` of ``Shape(x)`` slices around constants, folded to a constant, and ``allowzero``
    keeps an empty tensor's zero dims. Where they do not (two or more unknown dims: PP-OCR cls's
    ``[?, 3, ?, ?]``), that ``Concat`` and its two ``Shape`` nodes would run in every call, and
    be created in every session, for every view: here the target is a constant instead, ``0``
    copying the input's dim at the same index (``allowzero=0``, no ``-1``: a zero dim is copied
    as zero, so empty tensors keep working) and the first view's input is ``x`` unsqueezed
    after the axis, so that its trailing dims sit at the indices they take in the view. One
    ``Unsqueeze`` where three or four shape nodes ran (bench/RESULTS.md, blocklat12)."""

    def __init__(self, g: Body, rank: int, axis: int, shaped: bool = True) -> None:
        """``shaped``: the tensor :meth:`view` reads has ``x``'s shape (not a flattened copy)."""
        self.g, self.rank, self.axis = g, rank, axis
        self.copy = shaped and g.root.known is None
        if not self.copy:
            self.lead = g.shared("Shape", "x", end=axis) if axis else g.i64()
            self.trail = g.shared("Shape", "x", start=axis + 1)

    @property
    def attrs(self) -> dict[str, int]:
        """The Reshape attributes its targets need."""
        return {} if self.copy else {"allowzero": 1}

    def target(self, *middle: int) -> str:
        """The target ``(lead..., *middle, trail...)`` (two middle dims)."""
        g = self.g
        if self.copy:
            return g.i64(*([0] * self.axis + list(middle) + [0] * (self.rank - self.axis - 1)))
        return g.shared("Concat", self.lead, g.i64(*middle), self.trail, axis=0)

    def view(self, x: str, *middle: int) -> str:
        """``x`` (the body's input, rank ``rank``) reshaped to ``(lead..., *middle, trail...)``."""
        g = self.g
        if self.copy:
            x = g.op("Unsqueeze", x, g.i64(self.axis + 1))
        return g.op("Reshape", x, self.target(*middle), **self.attrs)

    def reshape(self, t: str, *middle: int) -> str:
        """``t`` (rank + 1, the view's lead and trail dims) reshaped to ``(lead..., *middle, trail...)``."""
        return self.g.op("Reshape", t, self.target(*middle), **self.attrs)


def view_static(g: Body, xf: str, axis: int, bs: int, pad: int) -> tuple[str, str, Any]:
    """The (rows, bs, post) block view of ``xf`` (the function input ``x`` flattened, rank >= 2)
    for a block axis whose zero padding ``pad`` is known when the function is built; returns the
    view, ``post`` (the elements after the axis) and ``restore``, which undoes it. Shared by the
    BFP and MX functions. The block axis has a known length >= 1, so -1 in a Reshape target is
    safe; the shape arithmetic sits at the top level, shared by the branches. ``post`` is at
    least 1, so that an empty tensor (a zero dim after the axis) views as 0 rows instead of
    failing the Reshape: bodies without a size guard run on empty tensors too."""
    post = g.i64(1) if axis == -1 else g.shared(
        "Max", g.shared("ReduceProd", g.shared("Shape", "x", start=axis + 1), keepdims=1), g.i64(1))
    target = g.shared("Concat", g.i64(-1, bs), post, axis=0)
    if pad == 0:
        return g.op("Reshape", xf, target), post, lambda y: y
    chan = g.shared("Shape", "x", start=axis) if axis == -1 else g.shared("Shape", "x", start=axis, end=axis + 1)
    x3 = g.op("Reshape", xf, g.shared("Concat", g.i64(-1), chan, post, axis=0))
    xr = g.op("Reshape", g.op("Pad", x3, g.i64(0, 0, 0, 0, pad, 0)), target)

    def restore(y: str) -> str:
        y3 = g.op("Reshape", y, g.shared("Concat", g.i64(-1), g.shared("Add", chan, g.i64(pad)), post, axis=0))
        return g.op("Slice", y3, g.i64(0), g.i64(-pad), g.i64(1))

    return xr, post, restore


def view_last(g: Body, xf: str, bs: int, pad: int | None, axis: int = -1) -> tuple[str, str, Any]:
    """(1, bs, blocks) view of ``xf`` for blocks along the last axis, by a Transpose.

    With the block axis last, the (rows, bs, 1) view leaves every broadcast and reduction with
    runs of ``bs`` elements, which onnxruntime loops over one by one (about 10x the cost per
    element of long runs, measured on 40×6625 logits); two transposes cost less. ``pad``: the
    zero-padding of the axis, or None to compute it. Shared by the BFP and MX functions; the
    ``post`` it returns is None (the view is ``(1, bs, blocks)``). ``axis``: the block axis, when
    every dim after it is 1 (the same memory order as a last axis; its length is read from it).
    """
    chan = g.shared("Shape", "x", start=-1) if axis in (-1, None) else g.shared(
        "Shape", "x", start=axis, **({} if axis == -1 else {"end": axis + 1}))
    if pad is None:
        cp = g.shared("Mul", g.shared("Div", g.shared("Add", chan, g.i64(bs - 1)), g.i64(bs)), g.i64(bs))
        pads = g.shared("Concat", g.i64(0, 0, 0), g.shared("Sub", cp, chan), axis=0)
    else:
        cp = g.shared("Add", chan, g.i64(pad)) if pad else chan
        pads = g.i64(0, 0, 0, pad) if pad else None
    x2 = g.op("Reshape", xf, g.shared("Concat", g.i64(-1), chan, axis=0))
    if pads is not None:
        x2 = g.op("Pad", x2, pads)
    xt = g.op("Transpose", g.op("Reshape", x2, g.i64(-1, bs)), perm=[1, 0])
    xr = g.op("Reshape", xt, g.i64(1, bs, -1))

    def restore(y: str) -> str:
        yt = g.op("Transpose", g.op("Reshape", y, g.i64(bs, -1)), perm=[1, 0])
        y2 = g.op("Reshape", yt, g.shared("Concat", g.i64(-1), cp, axis=0))
        return y2 if pads is None else g.op("Slice", y2, g.i64(0), chan, g.i64(1), g.i64(1))

    return xr, None, restore
