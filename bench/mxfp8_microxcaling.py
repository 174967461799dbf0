"""Our MX quantizer against microsoft/microxcaling's, value by value (issue 27 item 5, mxfp820).

The OCP MX paper's direct-cast figures were made with microxcaling (``mx/mx_ops.py _quantize_mx``: shared exponent
``floor(log2(max|V|)) - emax_elem``, E8M0 clamped to [-127, 127] with NaN above, elements rounded by
``_quantize_elemwise_core`` with ``saturate_normals=True``). This script runs that code (the ``mx`` package of a
microxcaling checkout, ``--microxcaling DIR``: pure PyTorch on CPU, ``custom_cuda=False``) and ours
(``onnxptq.formats.mx.fake_quantize``, the NumPy reference the ONNX bodies are held bit-exact to) on the same
float32 tensors and counts the elements that differ, by the kind of block they sit in:

* ``gauss`` / ``laplace`` / ``logu``: random blocks (normal, heavy-tailed, magnitudes log-uniform over 2^±40);
* ``sat``: block maxima with every E4M3 mantissa of the top binade (1.0 … 1.9375, and the values between: where
  OCP's exponent saturates the maximum at 448·X);
* ``ties``: elements exactly halfway between two grid points (normal and subnormal elements);
* ``pow2``: block maxima one float32 ulp below a power of two (microxcaling takes ``floor(torch.log2(x))`` in float32,
  which rounds up there);
* ``tiny`` / ``huge``: maxima near the E8M0 floor (2^-127) and near float32's top;
* ``special``: ±0, ±Inf, NaN in a block;
* ``ragged``: a block axis of 70 (padded) along axis 1 of an NCHW tensor (microxcaling ``axes=[1]``, as its conv).

Each microxcaling rounding is compared: ``even`` (round half to even, what OCP requires and our FP elements always do)
and ``nearest`` (half away from zero: microxcaling's default, and so the paper's unless its runs set ``round``).

    PYTHONPATH=src:.:bench python bench/mxfp8_microxcaling.py --microxcaling /path/to/microxcaling [--elements fp8_e4m3,int8]
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings

import numpy as np

import _common  # noqa: F401  (the repository root on sys.path)

from mxfp8_attention import write_json
from onnxptq.formats import fake_quantize


def cases(element: str, rng: np.random.Generator) -> dict[str, tuple[np.ndarray, int]]:
    """``{kind: (tensor, axis)}`` of float32 tensors (module docstring)."""
    from onnxptq.formats.mx import ELEMENT_FORMATS

    fmt = ELEMENT_FORMATS[element]
    n = 4096
    out: dict[str, tuple[np.ndarray, int]] = {}
    out["gauss"] = (rng.standard_normal((n, 64)).astype(np.float32), -1)
    out["laplace"] = (rng.laplace(size=(n, 64)).astype(np.float32), -1)
    out["logu"] = ((np.exp2(rng.uniform(-40, 40, (n, 64))) * rng.choice([-1, 1], (n, 64))).astype(np.float32), -1)
    # the top binade: maxima m·2^(emax+k) for every mantissa m on a 1/64 grid of [1, 2)
    mant = 1.0 + np.arange(64) / 64.0
    sat = rng.standard_normal((64 * 8, 32)) * 0.3
    for i in range(sat.shape[0]):
        sat[i, i % 32] = mant[i % 64] * 2.0 ** (fmt.emax + (i // 64) - 3)
    out["sat"] = (sat.astype(np.float32), -1)
    # ties: an element halfway between grid points, the block maximum fixing the exponent at 0
    top = 2.0 ** fmt.emax
    step = 2.0 ** (fmt.emin - fmt.mbits) if not fmt.is_int else 1 / 64
    ties = np.zeros((256, 32))
    ties[:, 0] = top
    k = np.arange(256)
    ties[:, 1] = (k + 0.5) * step  # subnormal and low normal ties
    if not fmt.is_int:
        e = fmt.emin + (k % (fmt.emax - fmt.emin + 1))
        ties[:, 2] = 2.0 ** e * (1 + (2 * (k % 2 ** fmt.mbits) + 1) / 2 ** (fmt.mbits + 1))  # normal ties
    out["ties"] = (ties.astype(np.float32), -1)
    below = np.zeros((64, 32), np.float32)
    below[:, 0] = np.nextafter(np.exp2(np.arange(-30, 34, dtype=np.float32)), np.float32(0))
    below[:, 1:] = below[:, :1] * rng.uniform(-1, 1, (64, 31)).astype(np.float32)
    out["pow2"] = (below, -1)
    tiny = (rng.standard_normal((64, 32)) * np.exp2(rng.uniform(-140, -120, (64, 1)))).astype(np.float32)
    out["tiny"] = (tiny, -1)
    huge = (rng.standard_normal((64, 32)) * np.exp2(rng.uniform(120, 126, (64, 1)))).astype(np.float32)
    out["huge"] = (huge, -1)
    spec = rng.standard_normal((64, 32)).astype(np.float32)
    spec[::4, 3] = np.inf
    spec[1::4, 5] = -np.inf
    spec[2::4, 7] = np.nan
    spec[3::4, 9] = -0.0
    out["special"] = (spec, -1)
    out["ragged"] = (rng.standard_normal((4, 70, 5, 6)).astype(np.float32), 1)
    return out


def theirs(mx_ops, x: np.ndarray, axis: int, element: str, rounding: str) -> np.ndarray:
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = mx_ops._quantize_mx(torch.from_numpy(x.copy()), 8, element, axes=[axis], block_size=32, round=rounding)
    return y.numpy()


def compare(a: np.ndarray, b: np.ndarray) -> dict[str, int]:
    """Counts of elements: values differing (NaN = NaN), and of those, NaN on one side only and signs of zero."""
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    nan_one = np.isnan(a) ^ np.isnan(b)
    zero_sign = (a == 0) & (b == 0) & (np.signbit(a) != np.signbit(b))
    return {"n": int(a.size), "differ": int((~same).sum()), "nan_one_side": int(nan_one.sum()),
            "zero_sign": int(zero_sign.sum())}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--microxcaling", required=True, help="a folder holding microxcaling's mx/ package")
    ap.add_argument("--elements", default="fp8_e4m3,fp8_e5m2,int8")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    sys.path.insert(0, args.microxcaling)
    from mx import mx_ops  # noqa: E402  (microxcaling)

    rows = []
    for element in args.elements.split(","):
        for kind, (x, axis) in cases(element, np.random.default_rng(0)).items():
            ours = fake_quantize(x, "mx", element_dtype=element, axis=axis, block_size=32, rounding_mode=2)
            for rounding in ("even", "nearest"):
                row = {"element": element, "case": kind, "round": rounding,
                       **compare(ours, theirs(mx_ops, x, axis, element, rounding))}
                rows.append(row)
                print(json.dumps(row), flush=True)
    write_json(rows, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
