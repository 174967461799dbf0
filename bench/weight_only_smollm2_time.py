"""Quantize time and peak memory of quantize_weights on SmolLM2-135M (llm-bench's export), one
method per process: ``PYTHONPATH=src python bench/weight_only_smollm2_time.py rtn|gptq|awq``.
GPTQ/AWQ calibrate on 8 windows of 512 tokens of GPL-2 (tokenizer.json beside the model)."""
import json, sys, time, numpy as np, resource
from pathlib import Path
import onnxptq
method = sys.argv[1]
feeds = None
if method != "rtn":
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file("/work/cache/smollm2/tokenizer.json")
    ids = np.asarray(tok.encode(Path("/usr/share/common-licenses/GPL-2").read_text()).ids, np.int64)
    feeds = [{"input_ids": ids[i*512:(i+1)*512][None]} for i in range(8)]
t = time.perf_counter(); c = time.process_time()
r = onnxptq.quantize_weights("/work/cache/smollm2/model.onnx", f"/work/cache/llm-core/smollm2_{method}.onnx", method=method,
                             data=feeds, external_data=True, progress=False)
print(json.dumps({"method": method, "wall_s": round(time.perf_counter() - t, 1), "cpu_s": round(time.process_time() - c, 1),
                  "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
                  **{k: round(v, 1) for k, v in r.timings.items()}}), flush=True)
