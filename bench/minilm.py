"""all-MiniLM-L6-v2: paraphrase retrieval top-1 and embedding cosine to float, per preset (issue 14).

    PYTHONPATH=src python bench/minilm.py [--mask finfo|1e4] [--presets A8W8 MXINT8 ...] [--json out.json] [--nncf]

``A8W8_PT`` is A8W8 with per-tensor weights; a ``_SQ`` / ``_NOSQ`` suffix forces SmoothQuant on / off
(automatic by default: on for integer activations with per-tensor weights on transformer graphs),
e.g. ``A8W8_SQ``, ``A8W8_PT_NOSQ``. ``--nncf`` adds
the peer NNCF (``nncf.quantize(..., model_type=nncf.ModelType.TRANSFORMER)``, its defaults) on the
same calibration batches, when ``nncf`` imports: install it in a venv of its own, e.g.
``python -m venv --system-site-packages /work/venv-nncf && /work/venv-nncf/bin/pip install nncf``,
then run this script with that venv's python.

Calibration: the 24 sentences of ``CALIBRATION`` below (not in the evaluation pairs), in padded
batches of 8 so the attention mask holds its sentinel. Evaluation: the 100 pairs of
``bench/paraphrases.py`` in padded batches of 10; top-1 is the share of queries whose nearest
paraphrase (cosine) is their own; cosine is the mean over all 200 sentences of the cosine between
the quantized and the float embedding.
"""

from __future__ import annotations

import _common  # noqa: F401  (puts the repository root on sys.path: testkit)
import argparse
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from paraphrases import PAIRS  # noqa: E402

from onnxptq import quantize  # noqa: E402
from onnxptq.config.presets import resolve_config  # noqa: E402
from onnxptq.sessions import open_session  # noqa: E402
from testkit import minilm  # noqa: E402

CALIBRATION = [
    "A quick brown fox jumps over the lazy dog.",
    "We walked along the beach at sunset.",
    "The committee will review the proposal next month.",
    "Can you recommend a good book about history?",
    "The engine makes a strange noise when it is cold.",
    "My grandmother grows vegetables in her backyard.",
    "The conference takes place in a large hall downtown.",
    "Birds migrate south when the weather turns cold.",
    "Scientists measured the temperature of the ocean.",
    "The teacher explained the problem twice.",
    "Our team lost the final match by one goal.",
    "Fresh fruit is sold at the market on Saturdays.",
    "The website asks for a password with twelve characters.",
    "He spent the whole afternoon reading in the garden.",
    "The train was full of commuters going to work.",
    "Please send me the report before Friday.",
    "The festival features music from around the world.",
    "A strong wind knocked down several trees last night.",
    "She prepared a delicious curry for her guests.",
    "The new phone has a larger screen and a better camera.",
    "Visitors must show their tickets at the entrance.",
    "The river runs through the middle of the old town.",
    "It took them three hours to climb the hill.",
    "The manager thanked everyone for their hard work.",
]
PRESETS = ["BF16", "A8W8", "A8W8_SQ", "A8W8_PT", "A8W8_PT_NOSQ", "A16W8", "BFP16", "MX9", "MXINT8", "MXFP8_E4M3"]


def batches(sentences, size):
    for i in range(0, len(sentences), size):
        yield minilm.tokenize(sentences[i:i + size])


def embed(session, sentences, size=10) -> np.ndarray:
    return np.concatenate([session.run(None, feeds)[0] for feeds in batches(sentences, size)])


def config_for(name: str):
    """A preset name, with ``_PT`` (A8W8 only: per-tensor weights) and ``_SQ`` / ``_NOSQ``
    (SmoothQuant forced on / off) suffixes."""
    sq = True if name.endswith("_SQ") else False if name.endswith("_NOSQ") else None
    base = name.removesuffix("_SQ").removesuffix("_NOSQ")
    cfg = resolve_config("A8W8" if base == "A8W8_PT" else base)
    if base == "A8W8_PT":
        cfg = cfg.replace(weight=cfg.weight.with_(per_channel=False))
    if sq is not None:
        cfg = cfg.replace(smooth_quant=sq)
    return cfg


def nncf_model(path: Path, calib: list):
    """The peer NNCF's A8W8 for transformers on the same calibration batches, and what it quantized."""
    import nncf  # optional: only with --nncf, from a venv that has it
    import onnx

    model = onnx.load(str(path))
    quantized = nncf.quantize(model, nncf.Dataset(calib), model_type=nncf.ModelType.TRANSFORMER, subset_size=len(calib))
    inits = {t.name for t in quantized.graph.initializer}
    producer = {o: n.op_type for n in quantized.graph.node for o in n.output}
    acts = [n for n in quantized.graph.node if n.op_type == "QuantizeLinear" and n.input[0] not in inits]
    what = {}
    for n in acts:
        kind = producer.get(n.input[0], "input")
        what[kind] = what.get(kind, 0) + 1
    smooth = sum(1 for n in quantized.graph.node if "smooth_quant" in n.name or "nncf_smooth" in n.output[0])
    return quantized, {"activation_quantizers_by_producer": what, "smooth_quant_muls": smooth}


def metrics(float_q, float_p, q, p) -> dict:
    def top1(a, b):
        a = a / np.linalg.norm(a, axis=1, keepdims=True)
        b = b / np.linalg.norm(b, axis=1, keepdims=True)
        return float(np.mean(np.argmax(a @ b.T, axis=1) == np.arange(len(a))))
    ref = np.concatenate([float_q, float_p])
    got = np.concatenate([q, p])
    cos = np.sum(ref * got, 1) / (np.linalg.norm(ref, axis=1) * np.linalg.norm(got, axis=1))
    return {"top1": top1(q, p), "cosine": float(np.mean(cos)), "cosine_min": float(np.min(cos))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mask", default="finfo", choices=["finfo", "1e4"])
    ap.add_argument("--presets", nargs="*", default=PRESETS)
    ap.add_argument("--json")
    ap.add_argument("--nncf", action="store_true", help="add the peer NNCF's A8W8 (TRANSFORMER model type) row")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    path = minilm.onnx_path(args.mask)
    queries = [a for a, _ in PAIRS]
    paras = [b for _, b in PAIRS]
    fsess = open_session(str(path), threads=1)
    fq, fp = embed(fsess, queries), embed(fsess, paras)
    rows = {"float": metrics(fq, fp, fq, fp)}
    print(f"mask={args.mask} float top1={rows['float']['top1']:.2f}", flush=True)
    calib = list(batches(CALIBRATION, 8))
    for name in args.presets:
        t0 = time.time()
        try:
            res = quantize(str(path), config_for(name), calib)
            sess = open_session(res.model, threads=1)
            rows[name] = metrics(fq, fp, embed(sess, queries), embed(sess, paras))
        except Exception as exc:  # a bench row records the failure and goes on
            rows[name] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        rows[name]["seconds"] = round(time.time() - t0, 1)
        print(name, json.dumps(rows[name]), flush=True)
    if args.nncf:
        t0 = time.time()
        try:
            qmodel, what = nncf_model(path, calib)
            sess = open_session(qmodel, threads=1)
            rows["NNCF_A8W8"] = {**metrics(fq, fp, embed(sess, queries), embed(sess, paras)), **what}
        except Exception as exc:  # no nncf, or it failed: the row says so
            rows["NNCF_A8W8"] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        rows["NNCF_A8W8"]["seconds"] = round(time.time() - t0, 1)
        print("NNCF_A8W8", json.dumps(rows["NNCF_A8W8"]), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"mask": args.mask, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
