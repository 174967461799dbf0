"""Standard-op spellings of float32 → bfloat16 → float32 rounding against ml_dtypes, every float32 bit pattern.

Issue 26 item 3 (bf16lat17): onnxruntime's CPU Cast to bfloat16 is a scalar loop, so a BF16 quantizer
(``Cast(BFLOAT16) → Cast(FLOAT)``) costs ~2.4x an FP16 one on large tensors. Arithmetic spellings of
round-to-nearest-even to 8 significant bits run on vectorised Mul/Sub kernels; this sweep says on
which bit patterns each agrees with ml_dtypes' bfloat16 rounding (the reference), so a spelling is
only ever used where it is proved. NumPy float32 arithmetic is IEEE binary32 with round-to-nearest-even,
as onnxruntime's elementwise kernels (no contraction into FMA across separate nodes).

Spellings:

* ``veltkamp``: ``c = x·(2^16+1); r = c − (c − x)`` (Veltkamp's split, the high part).
* ``scaled``: ``r = 2^16 · (x·(1 + 2^-16) − x)``: the split of ``x·2^-16`` without forming it, so no
  intermediate overflows before the result does and the subnormal grid is bfloat16's.
* ``scaled_clip``: ``scaled`` of ``Clip(x, −FLT_MAX, FLT_MAX)``.

Per spelling: the patterns whose bits differ from the reference (NaN counts as equal to NaN), by
class, and a few examples. Chunks of ``2^--chunk-bits`` consecutive
patterns; ``--stride n`` takes every n-th chunk (a sample spread over every exponent and both signs),
``--limit`` stops early; without them every float32 pattern is checked (~400 CPU s).

    OMP_NUM_THREADS=1 python bench/bf16_split_sweep.py --chunk-bits 12 --stride 4099   # a prime stride: every mantissa region
"""

from __future__ import annotations

import argparse
from collections import Counter

import ml_dtypes
import numpy as np

FLT_MAX = np.float32(np.finfo(np.float32).max)


def reference(x: np.ndarray) -> np.ndarray:
    """ml_dtypes' round-to-nearest-even of float32 ``x`` to bfloat16, back in float32."""
    return x.astype(ml_dtypes.bfloat16).astype(np.float32)


def veltkamp(x: np.ndarray) -> np.ndarray:
    c = x * np.float32(65537.0)
    return c - (c - x)


def scaled(x: np.ndarray) -> np.ndarray:
    return (x * np.float32(1 + 2.0**-16) - x) * np.float32(65536.0)


def scaled_clip(x: np.ndarray) -> np.ndarray:
    return scaled(np.clip(x, -FLT_MAX, FLT_MAX))


SPELLINGS = {"veltkamp": veltkamp, "scaled": scaled, "scaled_clip": scaled_clip}


def classify(x: np.ndarray) -> np.ndarray:
    """A class name per element: inf, nan, zero, subnormal, huge (|x| ≥ 2^111), normal."""
    a = np.abs(x)
    out = np.full(x.shape, "normal", dtype=object)
    out[a >= np.float32(2.0**111)] = "huge"
    out[(a < np.float32(2.0**-126)) & (a > 0)] = "subnormal"
    out[a == 0] = "zero"
    out[np.isinf(x)] = "inf"
    out[np.isnan(x)] = "nan"
    return out


def differs(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    both_nan = np.isnan(got) & np.isnan(want)
    return (got.view(np.uint32) != want.view(np.uint32)) & ~both_nan


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunk-bits", type=int, default=24)
    ap.add_argument("--limit", type=int, default=0, help="stop after this many chunks (0: all)")
    ap.add_argument("--stride", type=int, default=1, help="every n-th chunk only (a sample spread over every exponent)")
    ap.add_argument("--spellings", default=",".join(SPELLINGS))
    args = ap.parse_args()
    names = args.spellings.split(",")
    size = 1 << args.chunk_bits
    chunks = (1 << 32) // size
    bad: dict[str, Counter] = {n: Counter() for n in names}
    examples: dict[str, list[str]] = {n: [] for n in names}
    done = 0
    # the edge classes, whatever the stride: ±0, ±Inf, NaNs, the largest finite value and the
    # values around bfloat16's overflow, the subnormal boundary, a tie on each side of even
    edges = np.array([0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFFFFFFF, 0x7F7FFFFF,
                      0xFF7FFFFF, 0x7F7F7FFF, 0x7F7F8000, 0x00800000, 0x807FFFFF, 0x00008000, 0x80018000,
                      0x3F808000, 0x3F818000, 0x3FFFFFFF], dtype=np.uint32)
    with np.errstate(all="ignore"):
        want = reference(edges.view(np.float32))
        for n in names:
            got = SPELLINGS[n](edges.view(np.float32))
            wrong = differs(got, want)
            bad[n].update(f"edge {c}" for c in classify(edges.view(np.float32)[wrong]))
            examples[n] += [f"x=0x{b:08x} got 0x{g:08x} want 0x{w:08x}" for b, g, w in
                            zip(edges[wrong], got[wrong].view(np.uint32), want[wrong].view(np.uint32))][:3]
        for k in list(range(0, chunks, args.stride))[:args.limit or None]:
            bits = np.arange(k * size, (k + 1) * size, dtype=np.uint64).astype(np.uint32)
            x = bits.view(np.float32)
            want = reference(x)
            for n in names:
                wrong = differs(SPELLINGS[n](x), want)
                if wrong.any():
                    idx = np.flatnonzero(wrong)
                    bad[n].update(classify(x[idx]))
                    if len(examples[n]) < 6:
                        got = SPELLINGS[n](x[idx[:2]])
                        examples[n] += [f"x=0x{b:08x} got 0x{g:08x} want 0x{w:08x}" for b, g, w in
                                        zip(bits[idx[:2]], got.view(np.uint32), want[idx[:2]].view(np.uint32))]
            done += size
    print(f"{done} patterns ({done / 2**32:.4f} of all float32)")
    for n in names:
        total = sum(bad[n].values())
        print(f"{n:12s} {total} differ: {dict(bad[n])}  e.g. {examples[n][:4]}")


if __name__ == "__main__":
    main()
