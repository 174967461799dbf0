"""Weight-only methods side by side on the fitted 2-layer test Llama (tests/_llama.py).

Per method × bits × block: relative L2 error of the logits against fp32 on 4 windows of 128 bytes
of Apache-2.0 (held out; the model was fitted on GPL-3 and GPTQ/AWQ calibrate on 6 windows of
GPL-2), under ``session.qdq_matmulnbits_accuracy_level=1`` (the weights' error alone), and the
quantize time. Also the lm_head rule (float / int8 / int4 with an int4 body).

    PYTHONPATH=src python bench/weight_only_small.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import numpy as np  # noqa: E402

import _llama  # noqa: E402
import onnxptq  # noqa: E402
from onnxptq.weight_only import runtime  # noqa: E402

PATHS = _llama.build()
CALIB = _llama.token_feeds(_llama.CALIB_TEXT, 6, 128)
EVAL = _llama.token_feeds(_llama.EVAL_TEXT, 4, 128)


def logits(model) -> np.ndarray:
    s = runtime.session(model, accuracy_level=1)
    return np.concatenate([s.run(["logits"], f)[0] for f in EVAL])


def nll(lg: np.ndarray) -> float:
    ids = np.concatenate([f["input_ids"] for f in EVAL])
    x = lg[:, :-1].astype(np.float64)
    m = x.max(-1)
    return float(np.mean(np.log(np.exp(x - m[..., None]).sum(-1)) + m - np.take_along_axis(x, ids[:, 1:, None], -1)[..., 0]))


def main() -> None:
    ref = logits(str(PATHS["plain"]))
    print(json.dumps({"setting": "fp32", "nll": nll(ref)}))
    for bits, bs in ((4, 32), (4, 128), (3, 64), (3, 128)):
        for method in ("rtn", "hqq", "gptq", "awq"):
            r = onnxptq.quantize_weights(str(PATHS["plain"]), bits=bits, block_size=bs, method=method,
                                         data=CALIB if method in ("gptq", "awq") else None, progress=False)
            lg = logits(r.model)
            print(json.dumps({"setting": f"int{bits} sym b{bs}", "method": method,
                              "rel_logits_error": round(float(np.linalg.norm(lg - ref) / np.linalg.norm(ref)), 5),
                              "nll": round(nll(lg), 5), "quantize_s": round(r.timings["total"], 2)}), flush=True)
    for head in ("float", "int8", "int4"):
        r = onnxptq.quantize_weights(str(PATHS["plain"]), bits=4, block_size=128, lm_head=head, progress=False)
        lg = logits(r.model)
        print(json.dumps({"setting": "int4 sym b128 RTN body", "lm_head": head,
                          "rel_logits_error": round(float(np.linalg.norm(lg - ref) / np.linalg.norm(ref)), 5),
                          "nll": round(nll(lg), 5), "bytes": r.model.ByteSize()}), flush=True)


if __name__ == "__main__":
    main()
