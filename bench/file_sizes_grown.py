"""Which models the constant-folding growth rule touches (graph/passes/fold_constants.py ``grows``,
branch blockfile9): per model, the nodes prepare no longer folds because their result is
``GROWTH`` times their constant inputs and at least ``GROWN_FROM`` elements, with the elements
each would have stored.

Why: the rule keeps onnx-asr's resampler kernels computed (a 588 KB sinc kernel from 779 numbers)
and must leave every ordinary fold alone; a rule is checked on the zoo, not on one model.

    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/file_sizes_grown.py --all-nm --json /work/cache/x.json
    PYTHONPATH=src:. python bench/file_sizes_grown.py --models nm:asr_resample22 --outputs 4
        # --outputs N: the prepared float model with the rule and without (GROWTH None) against the
        # source model in onnxruntime on N feeds: elements bit-identical, max abs difference
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

import _common  # noqa: F401 - the repository root on sys.path
import onnx

import file_sizes as fs

#: files above this many bytes are skipped (prepare of an LLM takes minutes; none grows a weight)
MAX_BYTES = 200 * 2**20


class _Grown(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if "the file keeps the computation" in msg:
            self.lines.append(msg)


def scan(spec: str) -> dict:
    from onnxptq.pipeline.prepare import prepare

    path, _ = fs.model_source(spec)
    row: dict = {"model": spec}
    if os.path.getsize(path) > MAX_BYTES:
        row["skipped"] = "large"
        return row
    handler = _Grown()
    logger = logging.getLogger("onnxptq.graph.passes.fold_constants")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        prepare(onnx.load(path))
    except Exception as exc:  # a row, never fatal
        row["error"] = f"{type(exc).__name__}: {str(exc)[:160]}"
    finally:
        logger.removeHandler(handler)
    row["grown"] = handler.lines
    return row


def prepared_outputs(spec: str, n: int) -> dict:
    """The source model's outputs against its prepared form's, with the growth rule (kept chain)
    and without it (the folded kernel), in onnxruntime on ``n`` feeds (seed 1000)."""
    import numpy as np
    import onnxruntime as ort

    from onnxptq.graph.passes import fold_constants as _  # noqa: F401
    from onnxptq.pipeline.prepare import prepare

    fc = sys.modules["onnxptq.graph.passes.fold_constants"]
    path, feeds = fs.model_source(spec)
    src = onnx.load(path)
    forms = {"source": src, "kept": prepare(src)}
    rule = fc.GROWTH
    fc.GROWTH = None
    try:
        forms["folded"] = prepare(src)
    finally:
        fc.GROWTH = rule
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sessions = {k: ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
                for k, m in forms.items()}
    out: dict = {}
    for form in ("kept", "folded"):
        same = total = 0
        worst = 0.0
        for feed in feeds(n, 1000):
            for a, b in zip(sessions["source"].run(None, feed), sessions[form].run(None, feed)):
                a, b = np.asarray(a), np.asarray(b)
                total += a.size
                same += int(np.sum(a.view(np.uint32) == b.view(np.uint32))) if a.dtype == np.float32 else \
                    int(np.sum(a == b))
                if a.dtype == np.float32:
                    worst = max(worst, float(np.max(np.abs(a - b))) if a.size else 0.0)
        out[form] = {"identical": same, "elements": total, "max_abs": worst,
                     "bytes": forms[form].ByteSize()}
    out["source_bytes"] = src.ByteSize()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="")
    ap.add_argument("--all-nm", action="store_true", help="every bench/newmodels.py model whose file is here")
    ap.add_argument("--json")
    ap.add_argument("--outputs", type=int, default=0, help="with N > 0: prepared outputs against the source's")
    args = ap.parse_args(argv)
    specs = [s for s in args.models.split(",") if s]
    if args.all_nm:
        import newmodels as nm

        specs += [f"nm:{k}" for k, v in nm.MODELS.items() if os.path.exists(str(nm.SRC / v[0]))]
    rows = []
    for spec in specs:
        row = scan(spec)
        if args.outputs and row.get("grown"):
            row["outputs"] = prepared_outputs(spec, args.outputs)
        rows.append(row)
        print(json.dumps(row), flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)
    touched = [r["model"] for r in rows if r.get("grown")]
    print(f"{len(touched)} of {len(rows)} models keep a grown computation: {', '.join(touched)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
