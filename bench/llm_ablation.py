"""GPTQ row orders and HQQ's block choice on SmolLM2-135M: the measurements behind their defaults.

Each variant quantizes ``/work/cache/smollm2/model.onnx`` (bench/llm_export.py) with int4 b128,
lm_head float, and reports the perplexity on bench/llm.py's text and windows (default session,
accuracy level 4). Calibration: bench/llm.py's feeds (Apache-2.0 + MPL-2.0), ``--calib`` windows of
256 tokens; the statistics of one calibration are cached in ``--work`` and reused by every GPTQ
variant (they do not depend on the variant).

    PYTHONPATH=src python bench/llm_ablation.py --variants gptq:none,gptq:global,gptq:blocks,gptq:best
    PYTHONPATH=src python bench/llm_ablation.py --variants hqq-asym:2,hqq-asym:4,hqq-sym:2,hqq-sym:4,rtn-asym,rtn-sym

``gptq:ORDER``: ``none`` is ``act_order=False``; ``global``/``blocks`` force one row order (see
onnxptq.weight_only.gptq.ORDERS); ``best`` is the default (each layer keeps the better of the two).
``hqq-asym:P``/``hqq-sym:P``: HQQ with the block choice judged by Σ|ΔW|^P (2: the squared error,
4: the default).
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import llm  # noqa: E402  (the text, windows, calibration feeds and perplexity of bench/llm.py)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", required=True)
    ap.add_argument("--calib", type=int, default=16, help="calibration windows of 256 tokens")
    ap.add_argument("--work", type=Path, default=Path("/work/cache/llm_ablation"))
    args = ap.parse_args()

    import onnxptq
    from onnxptq.weight_only import calibrate, gptq, hqq

    args.work.mkdir(parents=True, exist_ok=True)
    cache = args.work / f"stats_{args.calib}x256.pkl"
    collect = calibrate.collect

    def cached(model, tensors, data, **kw):  # one calibration for all GPTQ variants (chunking off below)
        if cache.exists():
            return pickle.loads(cache.read_bytes())
        stats = collect(model, tensors, data, **kw)
        cache.write_bytes(pickle.dumps(stats))
        return stats

    calibrate.collect = cached
    data = llm.calibration_feeds(args.calib, 256)
    ids = llm.tokens([llm.EVAL_TEXT])
    orders, power = gptq.ACT_ORDERS, hqq.CHOICE_POWER
    for variant in args.variants.split(","):
        method, _, arg = variant.partition(":")
        kwargs: dict = {"lm_head": "float", "calib_memory": 1 << 40}
        gptq.ACT_ORDERS, hqq.CHOICE_POWER = orders, power
        if method == "gptq":
            kwargs.update(method="gptq", data=data, act_order=arg != "none")
            if arg in ("global", "blocks"):
                gptq.ACT_ORDERS = (arg,)
        elif method.startswith("hqq"):
            kwargs.update(method="hqq", symmetric=method.endswith("sym") and not method.endswith("asym"))
            hqq.CHOICE_POWER = int(arg)
        else:
            kwargs.update(method="rtn", symmetric=method == "rtn-sym")
        out = args.work / variant.replace(":", "_") / "model.onnx"
        out.parent.mkdir(exist_ok=True)
        start = time.process_time()
        onnxptq.quantize_weights(str(llm.MODEL_DIR / "model.onnx"), out, external_data=True, progress=False, **kwargs)
        cpu = time.process_time() - start
        ppl = llm.perplexity(out, None, ids, 8, 2)["perplexity"]
        print(json.dumps({"variant": variant, "perplexity": round(ppl, 3), "cpu_s_without_calibration": round(cpu, 1)}), flush=True)


if __name__ == "__main__":
    main()
