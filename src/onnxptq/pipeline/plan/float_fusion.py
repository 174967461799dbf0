"""BF16/FP16: round once per fused group, at its output, as bf16/fp16 hardware does.

A bf16/fp16 quantizer is an elementwise rounding, ``Cast(to=BFLOAT16|FLOAT16) → Cast(to=FLOAT)``.
Where should a model simulating bf16 hardware round? Where the hardware writes a bf16 tensor to
memory, and nowhere else. Every engine that computes in these formats accumulates a matrix
product in fp32 and applies what follows it elementwise to the fp32 accumulator before it writes
the result once in the narrow type:

* oneDNN (Intel/AMD CPUs, AMX/AVX512-BF16): a convolution, deconvolution, inner product or matmul
  takes *post-ops* — eltwise (relu, clip, gelu, swish, hardswish, tanh, logistic, exp, log, ...),
  sum (the residual: ``dst = conv(src) + dst``, ResNet's Conv + Add + Relu), binary (add, mul,
  max, min, div, sub with a broadcast operand) — "the post-ops are applied to the accumulator in
  f32 before the conversion to the destination data type"; its bf16 RNN primitives compute the
  two gate GEMMs in f32 and the cell's gate arithmetic ("postgemm") in f32, writing only the
  hidden state (``dst_iter``/``dst_layer``) in bf16.
* cuBLASLt/cuDNN and TensorRT (NVIDIA): GEMM epilogues (bias, ReLU, GELU, bias+GELU) on the fp32
  accumulator; TensorRT fuses conv/gemm with bias, activation and elementwise sums into one
  kernel, and PyTorch's fused GRU/LSTM cells compute in the accumulate type (fp32 for half/bf16).

So the plan's unit is a *fused group*: an accumulator — the output of a ``Conv``,
``ConvTranspose``, ``Gemm`` or ``MatMul`` — and the elementwise ops computed from it
(activations, a bias or scale, a residual or a second accumulator added, a gate multiplied;
:data:`EPILOGUE`), read through ``Slice``/``Split`` where the accumulator holds several gates
(a written-out GRU/LSTM cell: ``Gemm → Slice ×3 → Add → Sigmoid/Tanh → Mul → Add``). A tensor is
inside the group when every reader of it is such an op; the group ends at a tensor that something
else reads (a matrix product, a pool, a reduction, a Softmax, a graph output, a body) or that an
elementwise op broadcasts to more elements (an SE gate ``[N, C, 1, 1]`` scaling ``[N, C, H, W]``
is a separate kernel on every engine). The tensors inside lose their rounding; the group's
outputs keep theirs (:func:`epilogue_boundaries`). A group is left as planned where one of its
outputs is not rounded in the same format (its one rounding would go: an unquantized logit, a
node kept float or in another format), where one of its computing nodes is not rounded in that
format, or where it grows past :data:`MAX_GROUP` nodes.

This is also what runs fast on onnxruntime's CPU provider: a Cast pair between a Conv and its
HardSwish, its residual Add or its bias stops onnxruntime's own fusions (NCHWc Conv with a fused
activation and Sum input, FusedGemm, QuickGelu) and costs two memory passes; inside a written-out
GRU cell every rounding is a Cast pair on 2–6 k values (bench/RESULTS.md, bf16lat17–19). Numerics
move toward float: one rounding of the group's result instead of roundings inside it carried
through the activation (on 2000 PP-OCR cls lines the Conv→activation case alone took top-1
agreement with float from 0.9955 to 0.9970, bench/RESULTS.md "BF16 latency").
"""

from __future__ import annotations

import logging

import onnx

from ...config.schema import QuantConfig
from .select import _Graph, _node_formats
from .types import TensorPlan

log = logging.getLogger(__name__)

__all__ = ["ACCUMULATORS", "EPILOGUE", "epilogue_boundaries"]

#: Formats whose quantizer is an elementwise rounding (a Cast pair): the rule's scope.
_ROUNDING_FORMATS = frozenset({"bf16", "fp16"})
#: Ops that accumulate a dot product in fp32 on every bf16/fp16 engine: a group's sources.
ACCUMULATORS = frozenset("Conv ConvTranspose Gemm MatMul".split())
#: Elementwise ops a fused kernel applies to its fp32 accumulator (oneDNN eltwise/binary/sum post-ops,
#: cuBLASLt epilogues, an RNN cell's gate arithmetic): one output element from the same element of
#: each input (constants and other tensors broadcast onto the group's shape, never the reverse).
EPILOGUE = frozenset(
    """Relu LeakyRelu PRelu Clip Sigmoid HardSigmoid HardSwish Tanh Elu Selu Celu Softplus Softsign Erf Gelu Mish
    ThresholdedRelu Add Sub Mul Div Max Min Neg Abs Exp Log Sqrt Reciprocal Pow BatchNormalization""".split()
)
#: Parts of an accumulator read by different gates (a written-out GRU/LSTM cell's ``Gemm → Slice``):
#: inside a group only when every part read from them is computed on further (never a group's output
#: by themselves: a rounding would only move, and split in several).
_PARTS = frozenset({"Slice", "Split"})
#: Bound on a group's nodes (a GRU cell written out has ~20 computing nodes and 6 Slices).
MAX_GROUP = 64


def _rounds(node: onnx.NodeProto, config: QuantConfig) -> str | None:
    """The rounding format of ``node``'s activations (``bf16``/``fp16``), else None."""
    act = _node_formats(node, config)[0]
    return act.format if act is not None and act.format in _ROUNDING_FORMATS else None


def _widens(t: str, out: str, g: _Graph) -> bool:
    """Whether an elementwise op reading ``t`` and writing ``out`` broadcasts ``t`` to more elements
    (then ``t`` is a group's output): ``t`` has fewer axes, or a length of 1 where ``out`` has
    another. Lengths only known at run time (a symbolic batch, a Slice's computed bounds) are taken
    as equal: what the rule keeps apart is a per-channel gate ``[N, C, 1, 1]`` scaling a map."""
    dt, do = g.dims.get(t), g.dims.get(out)
    if dt is None or do is None:
        return False
    if len(do) > len(dt):
        return True
    return any(a == 1 and b != 1 for a, b in zip(dt[len(dt) - len(do):], do))


def _readers(t: str, g: _Graph) -> list[onnx.NodeProto]:
    """The nodes that read ``t``'s values (Shape/Size read only its shape)."""
    return [r for r in g.consumers.get(t, []) if r.op_type not in ("Shape", "Size")]


class _Group:
    """One fused group grown from an accumulator's output: ``inside`` (tensors every reader of which is
    in the group), ``outputs`` (tensors the group writes for others), ``computing`` (its elementwise
    nodes), or ``failed`` with why."""

    def __init__(self, seed: str, g: _Graph) -> None:
        self.g = g
        self.inside: list[str] = []
        self.outputs: list[str] = []
        self.computing: dict[str, onnx.NodeProto] = {}
        self._open: dict[str, bool] = {}
        self.failed = False
        self._grow(seed)

    def _is_open(self, t: str) -> bool:
        """Whether every reader of ``t`` joins the group (memoized; Slice/Split join only when each
        part they read out is open itself)."""
        if t in self._open:
            return self._open[t]
        self._open[t] = False  # a cycle (none in a DAG) or a re-entry reads closed
        g = self.g
        readers = _readers(t, g)
        ok = bool(readers) and t not in g.outputs and t not in g.outer_read
        for r in readers if ok else ():
            outs = [o for o in r.output if o]
            if r.op_type in EPILOGUE:
                ok = len(outs) == 1 and not _widens(t, outs[0], g)
            elif r.op_type in _PARTS:
                ok = all(r.input and r.input[0] == t and self._is_open(o) for o in outs) and bool(outs)
            else:
                ok = False
            if not ok:
                break
        self._open[t] = ok
        return ok

    def _grow(self, seed: str) -> None:
        stack, seen = [seed], {seed}
        while stack:
            t = stack.pop()
            if not self._is_open(t):
                self.outputs.append(t)
                continue
            self.inside.append(t)
            for r in _readers(t, self.g):
                if r.op_type in EPILOGUE:
                    self.computing[r.name] = r
                for o in r.output:
                    if o and o not in seen:
                        seen.add(o)
                        stack.append(o)
            if len(self.computing) + len(self.inside) > MAX_GROUP:
                self.failed = True
                return


def epilogue_boundaries(tensors: dict[str, TensorPlan], g: _Graph, selected: list[onnx.NodeProto],
                        config: QuantConfig, *sides: dict) -> dict[str, str]:
    """Drop from ``tensors`` the bf16/fp16 activations inside a fused group (module docstring), and
    from each dict of ``sides`` (the planner's producer/consumer-side bookkeeping); return
    ``{tensor: reason}`` for ``Plan.float_tensors``."""
    if not config.fuse_activations:
        return {}
    names = {n.name for n in selected}
    why: dict[str, str] = {}
    for producer in selected:
        if producer.op_type not in ACCUMULATORS or not producer.output or not producer.output[0]:
            continue
        fmt = _rounds(producer, config)
        if fmt is None:
            continue
        group = _Group(producer.output[0], g)
        if group.failed or not group.inside:
            continue
        if any(n.name not in names or _rounds(n, config) != fmt for n in group.computing.values()):
            continue
        if not all(t in tensors and tensors[t].quant.format == fmt and not tensors[t].exclusive for t in group.outputs):
            continue
        inside = [t for t in group.inside if t in tensors]
        if any(tensors[t].role != "activation" or tensors[t].quant.format != fmt for t in inside):
            continue
        shown = ", ".join(group.outputs[:3]) + (" ..." if len(group.outputs) > 3 else "")
        for t in inside:
            del tensors[t]
            for side in sides:
                side.pop(t, None)
            why[t] = (f"inside the fused {producer.op_type} group of {producer.output[0]} (fp32 accumulator and "
                      f"epilogue, as bf16/fp16 hardware computes it): rounded once, at its output ({shown})")
    if why:
        log.info("plan: %d bf16/fp16 tensors left unrounded inside fused groups (rounded at the groups' outputs)", len(why))
    return why
