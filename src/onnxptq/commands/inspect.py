"""``onnxptq inspect MODEL [--preset NAME]``: ops, inputs, and what a preset would quantize."""

from __future__ import annotations

import argparse
from collections import Counter


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("inspect", help="show a model's ops and inputs, and what a preset would quantize", description=__doc__)
    p.add_argument("model", nargs="?", help="ONNX model")
    p.add_argument("--preset", default="A8W8", help="preset whose plan to show (default A8W8)")
    p.add_argument("--presets", action="store_true", help="list the preset names and exit")
    p.add_argument("--tensors", action="store_true", help="list every planned tensor, not just the counts")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..config.presets import get_preset, preset_names

    if args.presets:
        for name in preset_names():
            print(name)
        return 0
    if not args.model:
        raise ValueError("inspect needs a MODEL (or --presets)")
    from ..graph import check, io
    from ..pipeline.prepare import prepare_for_quantization
    from ..pipeline.plan import make_plan

    model = io.load_model(args.model)
    check.check_model(model, str(args.model))
    print(f"model {args.model}: ir {model.ir_version}, opsets " + ", ".join(f"{i.domain or 'ai.onnx'}:{i.version}" for i in model.opset_import))
    inits = {t.name for t in model.graph.initializer}
    for inp in model.graph.input:
        if inp.name in inits:
            continue
        t = inp.type.tensor_type
        dims = [d.dim_param or d.dim_value for d in t.shape.dim]
        print(f"  input {inp.name}: {t.elem_type and __import__('onnx').helper.tensor_dtype_to_np_dtype(t.elem_type)} {dims}")
    ops = Counter(n.op_type for n in model.graph.node)
    print("  ops: " + ", ".join(f"{op} ×{n}" for op, n in ops.most_common()))
    config = get_preset(args.preset)
    prepared = prepare_for_quantization(model, config)
    plan = make_plan(prepared, config)
    print(f"preset {args.preset}: {config.describe()}")
    print(f"  {len(plan.nodes)} nodes quantized, {len(plan.skipped_nodes)} left in float")
    for reason, count in Counter(plan.float_tensors.values()).most_common():
        print(f"  {count:5d}  tensors kept float: {reason}")
    for key, count in plan.summary().items():
        print(f"  {count:5d}  {key}")
    if args.tensors:
        for t in plan.tensors.values():
            print(f"  {t.role:10s} {t.quant.describe():28s} {t.name}")
    return 0
