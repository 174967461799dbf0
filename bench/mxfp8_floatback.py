"""Which activation quantizers cost a plain MXFP8_E4M3 build its task metric: per-tensor float-back (mxfp820).

One plain build (``repair=False``) of each ``--sources`` row (bench/mxfp8_attention.py's rows). Every activation
quantizer of the delivered model is a one-input call in our domain; each is replaced by an ``Identity`` alone (that
tensor read float, all else as built) and the model is read on the row's fresh feeds: the task metric and the
worst output cosine gained over the plain build rank the tensors. Then the ``--cumulative`` best-ranked tensors
are put back float together (1, 2, 4, … of them) on the same feeds, and the same tensors rebuilt in MXINT8 by
``tensor_overrides`` (an integer element at the same bytes): how concentrated the loss is, and whether an integer
element on the tensors that lose is enough. The weights are not ranked here (they are folded into the file; their
class is bench/mxfp8_attention.py ``w_bf16``/``w_int8``).

    PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 nice -n 5 python bench/mxfp8_floatback.py --sources rec \\
        --calib 16 --fresh 32 --rank-fresh 8 --json out.jsonl
"""

from __future__ import annotations

import copy
import os
import time
from typing import Any

import onnx

import _common  # noqa: F401  (the repository root on sys.path)

from mxfp8_attention import emit, load_row, plain_config, row_arguments
from testkit import zoo

OUR_DOMAIN = "onnxptq"


def activation_calls(model: onnx.ModelProto) -> list[str]:
    """The data inputs of the quantizer calls in our domain (the activation quantizers; the other inputs are the
    block views' sizes), in graph order."""
    return [n.input[0] for n in model.graph.node if n.domain == OUR_DOMAIN and len(n.output) == 1]


def float_back(model: onnx.ModelProto, tensors: set[str]) -> onnx.ModelProto:
    """``model`` with the quantizer calls reading ``tensors`` replaced by Identity."""
    out = copy.deepcopy(model)
    for node in out.graph.node:
        if node.domain == OUR_DOMAIN and len(node.output) == 1 and node.input[0] in tensors:
            node.op_type, node.domain = "Identity", ""
            del node.attribute[:]
            del node.input[1:]
    return out


def read(row: Any, ref: tuple[dict, Any], model: onnx.ModelProto, feeds: list) -> tuple[float, float]:
    """The row's task metric and the worst output cosine of ``model`` against float on ``feeds`` (``ref``: the
    float outputs by feed id and the float runner, for the steps a decoder's metric feeds itself)."""
    test = zoo.session_runner(model)
    got = {id(f): test(f) for f in feeds}
    known, run = ref
    r = lambda f: known[id(f)] if id(f) in known else run(f)  # noqa: E731
    t = lambda f: got[id(f)] if id(f) in got else test(f)  # noqa: E731
    return float(row.metric(r, t, feeds)), float(zoo.output_cosine(r, t, feeds))


def main(argv: list[str] | None = None) -> int:
    import onnxptq

    ap = row_arguments(__doc__.split("\n\n")[0])
    ap.add_argument("--rank-fresh", type=int, default=8, help="feeds (of the fresh ones) the per-tensor ranking reads")
    ap.add_argument("--cumulative", default="1,2,4,8,16")
    args = ap.parse_args(argv)
    base = plain_config()
    for source in args.sources.split(","):
        row = load_row(source, args.calib, args.fresh)
        float_run = zoo.session_runner(row.path)
        ref = ({id(f): float_run(f) for f in row.fresh}, float_run)
        plain = onnxptq.quantize(row.path, base, data=row.calib)
        calls = activation_calls(plain.model)
        rank_feeds = row.fresh[: max(1, min(args.rank_fresh, len(row.fresh)))]
        m0, c0 = read(row, ref, plain.model, rank_feeds)
        mall, call = read(row, ref, plain.model, row.fresh)
        emit({"row": row.name, "what": "plain", "metric": row.metric_name, "agreement": round(mall, 4), "cosine": round(call, 5),
              "rank_agreement": round(m0, 4), "rank_cosine": round(c0, 5), "calls": len(calls), "load": round(os.getloadavg()[0], 1)}, args.json)
        gains = []
        t0 = time.process_time()
        for name in calls:
            m, c = read(row, ref, float_back(plain.model, {name}), rank_feeds)
            gains.append((m - m0, c - c0, name))
        emit({"row": row.name, "what": "ranking", "cpu_s": round(time.process_time() - t0, 1), "load": round(os.getloadavg()[0], 1),
              "top": [[n, round(dm, 4), round(dc, 5)] for dm, dc, n in sorted(gains, reverse=True)[:24]],
              "n_positive": sum(1 for dm, _, _ in gains if dm > 0), "n_negative": sum(1 for dm, _, _ in gains if dm < 0)}, args.json)
        order = [n for _, _, n in sorted(gains, reverse=True)]
        for k in [int(v) for v in args.cumulative.split(",") if int(v) <= len(order)] + [len(order)]:
            chosen = set(order[:k])
            mf, cf = read(row, ref, float_back(plain.model, chosen), row.fresh)
            over = {}
            for name in chosen:
                q = plain.plan.tensors[name].quant if name in plain.plan.tensors else None
                if q is not None and q.format == "mx":
                    over[name] = q.with_(attrs={**dict(q.attrs), "element_dtype": "int8", "scale_search": 0})
            built = onnxptq.quantize(row.path, base.replace(tensor_overrides=over), data=row.calib)
            mi, ci = read(row, ref, built.model, row.fresh)
            emit({"row": row.name, "what": f"top{k}", "float_agreement": round(mf, 4), "float_cosine": round(cf, 5),
                  "int8_agreement": round(mi, 4), "int8_cosine": round(ci, 5), "int8_overrides": len(over),
                  "load": round(os.getloadavg()[0], 1)}, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
