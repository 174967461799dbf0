"""The lm_head rule of ``onnxptq.quantize_weights``: float vs int8 vs int4 lm_head, body fixed.

For one exported decoder (default: SmolLM2-135M-Instruct, exported by llm-bench to
/work/cache/smollm2), the body is quantized once per lm_head setting (int4 sym b128 RTN by
default) and each result is run on the same token windows of a licence text: relative L2 error of
the logits against fp32, next-token NLL and perplexity, file size. Sessions: onnxruntime's default
(int8 activations in MatMulNBits, accuracy level 4) and ``session.qdq_matmulnbits_accuracy_level=1``.

    PYTHONPATH=src python bench/lm_head_rule.py --model /work/cache/smollm2/model.onnx \
        --text /usr/share/common-licenses/GPL-3 --windows 2 --length 256

Prints one JSON line per setting (and writes them to --out when given).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np


def _windows(model_dir: Path, text: str, count: int, length: int) -> list[np.ndarray]:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    ids = np.asarray(tok.encode(Path(text).read_text(encoding="utf-8")).ids, dtype=np.int64)
    return [ids[i * length:(i + 1) * length][None] for i in range(count)]


def _run(model: str, windows: list[np.ndarray], level: int | None) -> tuple[np.ndarray, float]:
    from onnxptq.weight_only import runtime

    session = runtime.session(model, accuracy_level=level)
    logits = [session.run(["logits"], {"input_ids": w})[0] for w in windows]
    nll = []
    for w, lg in zip(windows, logits):
        lg = lg[0, :-1].astype(np.float64)
        m = lg.max(-1)
        lse = np.log(np.exp(lg - m[:, None]).sum(-1)) + m
        nll.append(lse - lg[np.arange(len(lg)), w[0, 1:]])
    return np.concatenate([lg.reshape(-1) for lg in logits]), float(np.mean(np.concatenate(nll)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="/work/cache/smollm2/model.onnx")
    parser.add_argument("--text", default="/usr/share/common-licenses/GPL-3")
    parser.add_argument("--windows", type=int, default=2)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--bits", type=int, default=4)
    parser.add_argument("--block-size", type=int, default=128)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    import onnxptq

    windows = _windows(Path(args.model).parent, args.text, args.windows, args.length)
    ref, ref_nll = _run(args.model, windows, None)
    rows = [{"setting": "fp32", "nll": ref_nll, "ppl": float(np.exp(ref_nll)), "bytes": os.path.getsize(args.model)
             + os.path.getsize(args.model + ".data") if os.path.exists(args.model + ".data") else os.path.getsize(args.model)}]
    print(json.dumps(rows[0]), flush=True)
    with tempfile.TemporaryDirectory(dir="/work/cache") as tmp:
        for head in ("float", "int8", "int4"):
            out = Path(tmp) / f"head_{head}.onnx"
            t = time.perf_counter()
            onnxptq.quantize_weights(args.model, out, bits=args.bits, block_size=args.block_size, lm_head=head,
                                     external_data=True, progress=False)
            seconds = time.perf_counter() - t
            size = sum(p.stat().st_size for p in Path(tmp).glob(f"head_{head}.onnx*"))
            for level in (None, 1):
                logits, nll = _run(str(out), windows, level)
                row = {"setting": f"body int{args.bits} b{args.block_size}, lm_head {head}",
                       "session": "default (level 4)" if level is None else "accuracy level 1",
                       "rel_logits_error": float(np.linalg.norm(logits - ref) / np.linalg.norm(ref)),
                       "nll": nll, "ppl": float(np.exp(nll)), "bytes": size, "quantize_s": round(seconds, 1)}
                rows.append(row)
                print(json.dumps(row), flush=True)
    if args.out:
        Path(args.out).write_text("\n".join(json.dumps(r) for r in rows) + "\n")


if __name__ == "__main__":
    main()
