"""What a streamed model's floor would see with its held-out calls spread over the whole data (issue 27, streamspread).

The floor holds out every third of the data's first ``3 × 64`` calls at most (calibrate.split_holdout, reserve_stream),
so on a long stream it judges the first 192 calls only. This script takes a delivered model and its float source,
streams every chain of the calibration data with each model's own state (analysis/streams.py finds the chains), and
reads the chunk output as the floor does (analysis/waveform_reads.chunk_snr: audible chunks within 20 dB SNR) on
held-out sets chosen three ways: every third of the first 192 calls (today's choice), every third of all calls, and
64 calls at an even stride over all calls (a bounded spread). Calibration is not redone: the delivered model's
ranges include the calls a spread would hold out, so the figures say where drift is, not a verdict.

    NEWMODELS21_SRC=... PYTHONPATH=src:. python bench/stream_spread.py --model fastenhancer --calib 600 \\
        --quantized OUT/fastenhancer.MX9.onnx
"""

from __future__ import annotations

import argparse

import numpy as np
import onnx

from onnxptq.analysis.streams import find_stream, state_pairs, streamed_outputs
from onnxptq.analysis.waveform_reads import chunk_snr
from testkit.stream import run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="fastenhancer")
    ap.add_argument("--calib", type=int, default=600)
    ap.add_argument("--quantized", required=True)
    ap.add_argument("--output", default="wav_out")
    ap.add_argument("--seed", type=int, default=1, help="the feeds' seed: 1 the bench's calibration data, 1000 its held-out clips")
    a = ap.parse_args()
    import newmodels  # bench/: the feeds as bench/newmodels.py builds them (seed 1: calibration)

    path, feeds_fn = newmodels.MODELS[a.model][:2]
    float_model = onnx.load(path)
    feeds = feeds_fn(a.calib, a.seed)
    ref_step, cand_step = run(float_model), run(onnx.load(a.quantized))
    ref = [ref_step(f) for f in feeds]
    stream = find_stream(feeds, ref, state_pairs(float_model))
    assert stream is not None, "no stream in the data"
    got = streamed_outputs(cand_step, feeds, stream)
    n = len(feeds)
    sets = {"every 3rd of first 192 (today)": range(0, min(n, 192), 3), "every 3rd of all": range(0, n, 3),
            f"64 at stride {max(n // 64, 1)} over all": range(0, n, max(n // 64, 1))}
    print(f"{a.model} {a.quantized} (seed {a.seed}): {n} calls, {len(stream.chains)} chains ({[len(c) for c in stream.chains]})")
    for name, idx in sets.items():
        pairs = [(ref[k][a.output], got[k][a.output]) for k in idx if k in got]
        read = chunk_snr(pairs)
        print(f"  {name:32s} {len(pairs):4d} calls: " + ("no audible chunk" if read is None else
              f"{read.share:.4f} of {read.chunks} audible chunks within 20 dB, worst {read.worst_db:.1f} dB"))


if __name__ == "__main__":
    main()
