"""runtime="npu" A8W8 builds run on this machine's onnxruntime: as run, with fused weights stored uint8, and in int32 sums.

Why: the saturation guard (graph/passes/unsigned_gemm_weights.py) is off for ``runtime="npu"`` (an NPU wants int8
weights), yet the floor and repair judge an npu build with this machine's onnxruntime, whose x86 QDQ path runs int8
activations through its U8S8 kernels, which saturate without VNNI (bench/RESULTS.md, the a8avx2 section, §5).
One build per model (repair off); the task metric vs float on held-out feeds three ways, and the floor's verdict.

    PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 nice -n 5 python bench/avx2_npu.py vcb_captcha,magika,orinet,tinyocr_rec
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from avx2_zoo import _agreement, _memo, _runner, _verdict_state, load_case  # noqa: E402


def main() -> None:
    import onnxptq
    from onnxptq.config.presets import get_preset
    from onnxptq.graph.passes.unsigned_gemm_weights import unsigned_gemm_weights

    logging.basicConfig(level=logging.ERROR)
    print("| model | config (repair off) | fused weights | as run here (cosine) | same bytes, weights stored u8 | "
          "no graph opt. (int32 sums) | floor's verdict |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name in sys.argv[1].split(","):
        case = load_case(name, 12, 32)
        ref = _memo(_runner(case.path), case.held)
        cfg = dataclasses.replace(get_preset("A8W8"), runtime="npu", repair=False)
        result = onnxptq.quantize(str(case.path), cfg, data=list(case.calib))
        guarded = copy.deepcopy(result.model)
        n = unsigned_gemm_weights(guarded)
        runs = [_agreement(case, ref, result.model), _agreement(case, ref, guarded), _agreement(case, ref, result.model, "none")]
        cells = " | ".join(f"{a:.3f} ({c:.4f})" for a, c, _ in runs)
        print(f"| {name} | A8W8 npu | {n} | {cells} | {_verdict_state(result.floor)[:60]} |", flush=True)


if __name__ == "__main__":
    main()
