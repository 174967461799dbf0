"""``onnxptq inspect MODEL [--preset NAME] [--runtime] [--(no-)widen-fp16]``: ops, inputs, and what a preset would quantize.

The plan shown is the one ``onnxptq quantize`` makes: a float16 model is entered as quantize enters it
(computed in float32 inside under every preset but FP16 alone, its float16 interface kept;
``pipeline.prepare.fp16_entry``), with quantize's ``--widen-fp16`` / ``--no-widen-fp16``.

With ``--runtime`` MODEL is a quantized model, and the listing says per node whether onnxruntime's
CPU execution provider runs it as an integer kernel, in float, or folded it away (read from the
graph onnxruntime itself builds; :mod:`onnxptq.analysis.runtime_view`).
"""

from __future__ import annotations

import argparse
from collections import Counter


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("inspect", help="show a model's ops and inputs, and what a preset would quantize", description=__doc__)
    p.add_argument("model", nargs="?", help="ONNX model")
    p.add_argument("--preset", default="A8W8", help="preset whose plan to show (default A8W8)")
    p.add_argument("--presets", action="store_true", help="list the preset names and exit")
    p.add_argument("--tensors", action="store_true", help="list every planned tensor, not just the counts")
    p.add_argument("--runtime", action="store_true",
                   help="MODEL is quantized: list per node whether onnxruntime's CPU provider runs it as an integer kernel or in float")
    wf = p.add_mutually_exclusive_group()  # quantize's flags: the plan shown is the one quantize makes under them
    wf.add_argument("--widen-fp16", dest="widen_fp16", action="store_const", const=True, default=None,
                    help="the plan of a float16 model widened inside under FP16 formats too (as quantize --widen-fp16)")
    wf.add_argument("--no-widen-fp16", dest="widen_fp16", action="store_const", const=False,
                    help="the plan of a float16 model quantized in float16 as it is (as quantize --no-widen-fp16)")
    p.set_defaults(func=run)


def _dim(dim) -> str:
    """A dimension as users wrote it: its size, its symbolic name (``N``, ``seq``), or ``?`` when unset."""
    if dim.HasField("dim_value"):
        return str(dim.dim_value)
    if dim.HasField("dim_param") and dim.dim_param:
        return dim.dim_param
    return "?"


def describe_value(value) -> str:
    """``float32 [N, 3, 224, 224]`` for a tensor ValueInfo (``?`` for what is unknown)."""
    import onnx

    if not value.type.HasField("tensor_type"):
        return f"non-tensor ({value.type.WhichOneof('value')})"
    t = value.type.tensor_type
    try:
        dtype = str(onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)) if t.elem_type else "?"
    except (KeyError, TypeError, ValueError):
        dtype = onnx.TensorProto.DataType.Name(t.elem_type).lower()
    shape = "[" + ", ".join(_dim(d) for d in t.shape.dim) + "]" if t.HasField("shape") else "(rank unknown)"
    return f"{dtype} {shape}"


def run(args: argparse.Namespace) -> int:
    from ..config.presets import get_preset, preset_names

    if args.presets:
        for name in preset_names():
            print(name)
        return 0
    if not args.model:
        raise ValueError("inspect needs a MODEL (or --presets)")
    if args.runtime:
        from ..analysis.runtime_view import format_listing, runtime_kernels

        print(f"model {args.model}: what onnxruntime's CPU execution provider runs")
        print(format_listing(runtime_kernels(args.model)))
        return 0
    from ..graph import check, io
    from ..pipeline.prepare import fp16_entry, prepare_for_quantization
    from ..pipeline.plan import make_plan

    model = io.load_model(args.model)
    check.check_model(model, str(args.model), runs=False)
    print(f"model {args.model}: ir {model.ir_version}, opsets " + ", ".join(f"{i.domain or 'ai.onnx'}:{i.version}" for i in model.opset_import))
    inits = {t.name for t in model.graph.initializer}
    for kind, values in (("input", model.graph.input), ("output", model.graph.output)):
        for value in values:
            if value.name not in inits:
                print(f"  {kind} {value.name}: {describe_value(value)}")
    ops = Counter(n.op_type for n in model.graph.node)
    print("  ops: " + ", ".join(f"{op} ×{n}" for op, n in ops.most_common()))
    config = get_preset(args.preset)
    if getattr(args, "widen_fp16", None) is not None:
        config = config.replace(widen_fp16=args.widen_fp16)
    # the model quantize() plans: a float16 source entered as it enters it (widened inside or not)
    entered, widened = fp16_entry(model, config, str(args.model))
    prepared = prepare_for_quantization(entered, config, entered=True)
    plan = make_plan(prepared, config)
    print(f"preset {args.preset}: {config.describe()}")
    if widened:
        print("  float16 source: computed in float32 inside, its float16 inputs/outputs kept (widen_fp16; "
              "--no-widen-fp16 keeps the fp16 form)")
    print(f"  {len(plan.nodes)} nodes quantized, {len(plan.skipped_nodes)} left in float")
    for reason, count in Counter(plan.float_tensors.values()).most_common():
        print(f"  {count:5d}  tensors kept float: {reason}")
    for key, count in plan.summary().items():
        print(f"  {count:5d}  {key}")
    if args.tensors:
        for t in plan.tensors.values():
            print(f"  {t.role:10s} {t.quant.describe():28s} {t.name}")
    return 0
