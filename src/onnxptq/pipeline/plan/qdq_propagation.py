"""onnxruntime's QDQ propagation, met with a quantizer after the data move it would push a DequantizeLinear past.

Why a module of its own: the rule answers one runtime's graph optimizer (two failures of the same transformer,
:func:`_requantize_after_float_transposes`), not a numerical choice; it runs after the plan's other rules
(assign.make_plan) and only adds quantizers that share their source's parameters (exact: these ops move values).
"""

from __future__ import annotations

from .select import _Graph
from .types import TensorPlan


#: Ops onnxruntime's optimizer moves a DequantizeLinear past (QDQ propagation): each moves or picks values.
_ORT_QDQ_PROPAGATION = frozenset("Transpose Reshape Squeeze Unsqueeze Flatten MaxPool Slice".split())


def _requantize_after_float_transposes(tensors: dict[str, TensorPlan], g: _Graph) -> None:
    """A signed 8-bit activation read through its DequantizeLinear by a float ``Transpose`` (or another
    op of :data:`_ORT_QDQ_PROPAGATION`, and on along a chain of them) gets the same quantizer on
    that op's output (``share_with``: exact, these ops move or pick values).

    Why: onnxruntime 1.32's graph optimizer (opset 21) pushes such a DequantizeLinear past the
    Transpose and writes a QuantizeLinear with ``output_dtype`` INT8 but a UINT8 zero point, then
    refuses the model it built ("output_dtype INT8 does not match y_zero_point type UINT8"). Seen
    on MiniLM with the NPU placement, ``op_types=MatMul`` and the attention-output MatMuls excluded:
    the attention context is quantized as the P·V MatMul's output and read by a float Transpose.
    With a QuantizeLinear/DequantizeLinear already after the Transpose it fuses them instead (the
    Reshape after it is the next place the optimizer would go, so the chain is followed).
    uint8 and int16 activations do not trigger it (tests/test_transformer_placement.py).

    Any integer format, when the chain's output is read by a Loop/If/Scan body from the outer scope
    (:attr:`_Graph.outer_read`): onnxruntime 1.32's ``QDQPropagationTransformer`` moves the
    DequantizeLinear past the Transpose/Reshape, looks for the tensor among the body-holding node's
    explicit inputs and reads past their end: the process aborts (``Assertion '__n < this->size()'``)
    when the session opens. A TorchScript-scripted recurrence reading a Conv's transposed output
    (bench/fuzz.py seed 16: Transpose → Conv → Transpose → Loop, A8W8/A16W8/U16S8; tests/test_fuzz14_findings.py).
    """
    for t in [t for t in tensors.values() if t.role == "activation" and t.quant.is_integer and t.quant.format != "int8"
              and t.axis is None and not t.exclusive]:
        for chain in _propagation_chains(t.name, tensors, g):
            if chain[-1] in g.outer_read:
                for out, src in zip(chain, [t.name, *chain[:-1]]):
                    tensors.setdefault(out, TensorPlan(out, "activation", t.quant, share_with=src, producer=g.producer[out].name))
    work = [t for t in tensors.values()
            if t.role == "activation" and t.quant.format == "int8" and t.axis is None and not t.exclusive]
    while work:
        t = work.pop()
        for reader in g.consumers.get(t.name, []):
            out = reader.output[0] if reader.output else ""
            if (reader.op_type not in _ORT_QDQ_PROPAGATION or reader.input[0] != t.name or not out or out in tensors
                    or not g.is_float(out)):
                continue
            tensors[out] = TensorPlan(out, "activation", t.quant, share_with=t.name, producer=reader.name)
            work.append(tensors[out])  # the optimizer goes on through a chain (Transpose -> Reshape)


def _propagation_chains(name: str, tensors: dict[str, TensorPlan], g: _Graph) -> list[list[str]]:
    """The float outputs reached from ``name`` through readers of :data:`_ORT_QDQ_PROPAGATION` (each
    reading it as its first input) that carry no plan of their own: every path, as its list of outputs."""
    chains, work = [], [[name]]
    while work:
        path = work.pop()
        for reader in g.consumers.get(path[-1], []):
            out = reader.output[0] if reader.output else ""
            if (reader.op_type in _ORT_QDQ_PROPAGATION and reader.input[0] == path[-1] and out and out not in tensors
                    and g.is_float(out) and out not in path):
                chains.append(path[1:] + [out])
                work.append(path + [out])
    return chains
