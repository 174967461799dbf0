"""Perplexity of one quantize_weights setting on SmolLM2-135M (llm-bench's export), level 1.

    PYTHONPATH=src python bench/weight_only_smollm2_ppl.py METHOD LM_HEAD [CALIB_WINDOWS]

Calibration (GPTQ/AWQ): CALIB_WINDOWS (default 4) windows of 512 tokens of GPL-2; evaluation: 2
windows of 256 tokens of GPL-3 under ``session.qdq_matmulnbits_accuracy_level=1``. int4 sym b128.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lm_head_rule import _run, _windows  # noqa: E402

MODEL = Path("/work/cache/smollm2/model.onnx")


def main() -> None:
    import onnxptq

    method, head = sys.argv[1], sys.argv[2]
    count = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(MODEL.parent / "tokenizer.json"))
    ids = np.asarray(tok.encode(Path("/usr/share/common-licenses/GPL-2").read_text()).ids, np.int64)
    feeds = [{"input_ids": ids[i * 512:(i + 1) * 512][None]} for i in range(count)]
    out = Path("/work/cache/llm-core") / f"smollm2_{method}_{head}.onnx"
    t = time.perf_counter()
    onnxptq.quantize_weights(str(MODEL), out, method=method, lm_head=head, data=feeds if method in ("gptq", "awq") else None,
                             external_data=True, progress=False)
    seconds = time.perf_counter() - t
    _, nll = _run(str(out), _windows(MODEL.parent, "/usr/share/common-licenses/GPL-3", 2, 256), 1)
    print(json.dumps({"method": method, "lm_head": head, "ppl_level1": round(float(np.exp(nll)), 3),
                      "quantize_s": round(seconds, 1)}))


if __name__ == "__main__":
    main()
