"""``metrics.pair_figures``: the four figures a quantization reports per output (cosine, L2 loss,
MSE, PSNR) from one float64 copy of each array, bit for bit those of the four functions it stands
in for (``compare_outputs`` took ~9.5 CPU s of lore_detect's A16W8 quantize converting its two
256×192×192 heads eight times per feed: bench/RESULTS.md, issue 26, branch lore16)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from onnxptq.analysis.compare import compare_outputs, mse
from onnxptq.analysis.metrics import cosine_similarity, l2_loss, pair_figures, psnr


def _four(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float, float]:
    return cosine_similarity(a, b), l2_loss(a, b), mse(a, b), psnr(a, b)


def _pairs():
    rng = np.random.default_rng(7)
    for shape in [(1, 8, 48, 40), (3, 7), (1,), (2, 5, 1031), (0, 4), ()]:
        a = rng.standard_normal(shape).astype(np.float32) * 3
        noisy = (a + rng.standard_normal(shape).astype(np.float32) * 0.01).astype(np.float32)
        yield a, noisy
        yield a, a.copy()  # identical: mse 0, psnr inf
        yield a, np.zeros_like(a)  # one side zero: cosine 0
        yield np.zeros_like(a), np.zeros_like(a)  # both zero: cosine 1, peak below 0 -> tiny
        yield -np.abs(a) - 1, noisy  # a negative peak


@pytest.mark.parametrize("k", range(30))
def test_same_bits_as_the_four_functions(k: int) -> None:
    a, b = list(_pairs())[k]
    got = pair_figures(a, b)
    assert got is not None
    want = _four(a, b)
    for g, w in zip(got, want):
        assert g == w or (math.isnan(g) and math.isnan(w)), (got, want)


def test_other_pairs_take_the_four_functions() -> None:
    """Not float32, not one shape or not C-contiguous: None (the callers then run the four functions,
    whose float32 casts and error on unequal sizes stay theirs)."""
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    assert pair_figures(a.astype(np.float64), a.astype(np.float64)) is None
    assert pair_figures(a.astype(np.float16), a) is None
    assert pair_figures(a, a.reshape(6, 4)) is None
    assert pair_figures(a.T, a.T.copy()) is None
    assert pair_figures(a[:, :3], a[:, 3:]) is None


def test_compare_outputs_reports_the_same_figures() -> None:
    """compare_outputs' means over feeds: float32 outputs through pair_figures, a float64 output and
    two outputs of another length (a Loop decoder's: cut to the common extent, not contiguous)
    through the four functions, all equal to the four functions' own figures."""
    rng = np.random.default_rng(3)
    refs, cands = [], []
    for i in range(3):
        r32 = rng.standard_normal((1, 4, 32, 32)).astype(np.float32)
        r64 = rng.standard_normal((2, 9))
        seq = rng.standard_normal((5 + i, 6)).astype(np.float32)
        refs.append({"map": r32, "f64": r64, "seq": seq})
        cands.append({"map": (r32 * 0.98 + 0.01).astype(np.float32), "f64": r64 + 1e-3,
                      "seq": rng.standard_normal((6, 6)).astype(np.float32)})
    got = compare_outputs(["map", "f64", "seq"], refs, cands)
    for name in ("map", "f64", "seq"):
        sums = np.zeros(4)
        for r, c in zip(refs, cands):
            a, b = r[name], c[name]
            if a.shape != b.shape:
                common = tuple(slice(0, min(x, y)) for x, y in zip(a.shape, b.shape))
                a, b = a[common], b[common]
            cos, l2, err, p = _four(a, b)
            sums += (cos, l2, err, min(p, 200.0))
        want = dict(zip(("cosine", "l2", "mse", "psnr"), (sums / 3).tolist()))
        assert got[name] == want, (name, got[name], want)


def test_floor_pools_the_per_feed_sums(monkeypatch: pytest.MonkeyPatch) -> None:
    """The accuracy floor's pooled and worst per-feed cosine of an output: bit for bit
    ``_pooled_cosine`` and ``cosine_similarity`` of the feeds, from ONE float64 copy of each array per
    feed (``measure`` converted every output twice: once per feed, once to pool); a non-finite
    candidate still leaves its output's pooled cosine NaN."""
    from onnxptq.analysis import floor, metrics

    rng = np.random.default_rng(1)
    refs = [{"map": rng.standard_normal((1, 8, 24, 24)).astype(np.float32),
             "vec": rng.standard_normal((1, 10)).astype(np.float32)} for _ in range(4)]
    cands = [{k: (v + rng.standard_normal(v.shape).astype(np.float32) * 0.05).astype(np.float32) for k, v in r.items()}
             for r in refs]
    cands[2]["vec"] = cands[2]["vec"].copy()
    cands[2]["vec"][0, 3] = np.inf
    want = {n: (floor._pooled_cosine([r[n] for r in refs], [c[n] for c in cands]),
                min(cosine_similarity(r[n], c[n]) for r, c in zip(refs, cands))) for n in ("map",)}
    converted: list[int] = []
    dot = metrics.dot
    monkeypatch.setattr(metrics, "dot", lambda a, b: converted.append(a.size) or dot(a, b))  # cosine_similarity's sums
    verdict = floor.measure(refs, cands, floor.Floor("integer", 0.99, 0.9))
    assert (verdict.outputs["map"].cosine, verdict.outputs["map"].cosine_min) == want["map"]
    assert math.isnan(verdict.outputs["vec"].cosine)
    assert converted == []  # no second float64 pass through cosine_similarity
