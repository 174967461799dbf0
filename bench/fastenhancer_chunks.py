"""Issue 27, round 21: why decibri's FastEnhancer-T rows pass the floor while the streamed speech does not.

The enhancer is called once per 256-sample hop with three caches (bench/newmodels.py ``fastenhancer``). The floor
judges each call on its own, with the caches float carried into it, and reads ``wav_out`` (a [1, 256] chunk: a fixed
last axis, shorter than the waveform reading's 512-sample frame) by its cosine. This script reads, for each preset's
quantized file in ``--out-dir``, side by side on the same held-out clips:

* ``per call``: the share of speech-active calls whose 256 samples are within 20 dB SNR of float's, each call given
  FLOAT's caches (what the floor is handed), and the worst per-call cosine;
* ``streamed``: the same share with each model carrying its OWN caches through the clip (what decibri plays);
* with ``--keep-encoder``, a fresh quantization with the 11 encoder nodes (enc_pre, encoder.0/1 Conv+SiLU, the
  linear and rf_pre Conv) kept float, streamed: where the loss sits.

    NEWMODELS21_SRC=/work/cache/newmodels21/src PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/fastenhancer_chunks.py \\
        --out-dir /work/cache/newmodels21/out_final --presets A16W8,A8W8,BFP16,MX9,MXINT8,MXFP8_E4M3 --keep-encoder BFP16,MXINT8
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
from pathlib import Path

import numpy as np

from bench import newmodels as nm
from testkit import zoo


def _active_share(a: np.ndarray, b: np.ndarray) -> tuple[int, int]:
    """(calls within 20 dB SNR, speech-active calls): rows of 256 samples, active = within 40 dB of the loudest."""
    a, b = a.reshape(-1, 256).astype(np.float64), b.reshape(-1, 256).astype(np.float64)
    energy, err = (a ** 2).sum(1), ((a - b) ** 2).sum(1)
    active = energy >= 1e-4 * energy.max()
    return int((err[active] <= 0.01 * energy[active]).sum()), int(active.sum())


def per_call(ref, test, feeds) -> tuple[float, float]:
    """Each held-out call with float's caches: share within 20 dB, worst cosine of wav_out."""
    a = np.stack([np.asarray(ref(f)[0]).ravel() for f in feeds])
    b = np.stack([np.asarray(test(f)[0]).ravel() for f in feeds])
    hits, total = _active_share(a, b)
    cos = (a * b).sum(1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-30)
    return hits / max(total, 1), float(cos.min())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out-dir", type=Path, required=True)
    ap.add_argument("--presets", default="A16W8,A8W8,BFP16,MX9,MXINT8,MXFP8_E4M3")
    ap.add_argument("--keep-encoder", default="", help="presets to re-quantize with the encoder kept float")
    ap.add_argument("--held", type=int, default=48)
    a = ap.parse_args()
    held = nm.fastenhancer_feeds(a.held, 1000)  # the bench's held-out calls (same seed as bench/newmodels.py)
    ref = zoo.session_runner(nm.FASTENHANCER)
    print("| preset | per call within 20 dB (float caches) | worst per-call cosine | streamed within 20 dB (own caches) |")
    print("| --- | --- | --- | --- |")
    for preset in a.presets.split(","):
        test = zoo.session_runner(a.out_dir / f"fastenhancer.{preset}.onnx")
        share, cos = per_call(ref, test, held)
        print(f"| {preset} | {share:.3f} | {cos:.4f} | {nm.fastenhancer_blocks(ref, test, held, None):.3f} |", flush=True)
    if a.keep_encoder:
        import onnx

        import onnxptq
        from onnxptq.config.presets import get_preset

        names = [n.name for n in onnx.load(nm.FASTENHANCER).graph.node]
        first = names.index(next(n.name for n in onnx.load(nm.FASTENHANCER).graph.node if n.op_type == "Conv"))
        encoder = tuple(names[first:first + 11])  # enc_pre Conv .. rf_pre Conv (Conv/Sigmoid/Mul x3, MatMul, Conv)
        calib = nm.fastenhancer_feeds(40, 1)
        with tempfile.TemporaryDirectory() as tmp:
            for preset in a.keep_encoder.split(","):
                cfg = dataclasses.replace(get_preset(preset), nodes_to_exclude=encoder)
                out = Path(tmp) / f"{preset}.onnx"
                onnxptq.quantize(str(nm.FASTENHANCER), cfg, data=calib, output=str(out))
                test = zoo.session_runner(out)
                share, cos = per_call(ref, test, held)
                print(f"| {preset}, encoder ({len(encoder)} nodes) float | {share:.3f} | {cos:.4f} | "
                      f"{nm.fastenhancer_blocks(ref, test, held, None):.3f} |", flush=True)


if __name__ == "__main__":
    main()
