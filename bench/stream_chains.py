"""Whether a streamed output's chunks are independent draws: the floor's share bound counting chunks or clips (issue 27,
chains; analysis/evidence.py, "Chains of calls").

``simulate``: clips of a stream whose drift is decided per clip (a share ``q`` of clips drift and keep ``r`` of their
chunks, the others keep every chunk), the population's share ``1 − q + q·r`` below the floor. The held-out chunks
(64, the floor's most) come from ``C`` clips; the rate at which the floor's bound would *confirm* that share (its low end
at or above the floor) counting the chunks as draws (before), the clips (Kish at rho = 1: this branch), and an
estimated intra-clip correlation (one-way ANOVA, clamped to [0, 1], 1 where not estimable: tried and dropped), and
the rate at which a model that drifts on no clip is confirmed (what counting clips costs).

    PYTHONPATH=src:. python bench/stream_chains.py simulate --trials 4000

``real``: a delivered model streamed over every clip of the bench's data with its own state (as bench/stream_spread.py),
its chunks read as the floor reads them (audible within 40 dB of the loudest, kept within 20 dB SNR of float's): each
clip's share, and the intra-clip correlation of the kept/lost indicator (one-way ANOVA) over the clips.

    NEWMODELS21_SRC=/work/cache/newmodels21/src PYTHONPATH=src:.:bench python bench/stream_chains.py real \\
        --model fastenhancer --calib 1200 --seed 1000 --quantized OUT/fastenhancer.MX9.onnx
"""

from __future__ import annotations

import argparse

import numpy as np

from onnxptq.analysis.evidence import Chains, share_bound


def icc(groups: list[np.ndarray]) -> float | None:
    """The one-way ANOVA estimate of the intra-group correlation of 0/1 values (groups of unequal sizes: the size
    term ``n0``); None where it is not estimable (one group, or no variance within or between)."""
    groups = [g for g in groups if g.size]
    k, n = len(groups), sum(g.size for g in groups)
    if k < 2 or n <= k:
        return None
    mean = np.concatenate(groups).mean()
    msb = sum(g.size * (g.mean() - mean) ** 2 for g in groups) / (k - 1)
    msw = sum(((g - g.mean()) ** 2).sum() for g in groups) / (n - k)
    n0 = (n - sum(g.size ** 2 for g in groups) / n) / (k - 1)
    if msb + (n0 - 1) * msw <= 0:
        return None
    return float((msb - msw) / (msb + (n0 - 1) * msw))


def _confirms(share: float, draws: float, floor: float, confidence: float) -> bool:
    """Whether a share judged on ``draws`` effective draws is confirmed: its bound's low end at the floor or above."""
    return draws > 0 and share_bound(share * draws, draws, confidence)[0] >= floor


def simulate(trials: int, floor: float, confidence: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    # (q clips drift, r of a drifting clip's chunks kept, b of a clean clip's chunks kept: scattered single losses)
    cases = [(0.1, 0.6, 1.0), (0.05, 0.3, 1.0), (0.2, 0.85, 1.0), (0.1, 0.6, 0.99), (0.3, 0.6, 1.0), (0.3, 0.6, 0.99),
             (0.0, 1.0, 1.0), (0.0, 1.0, 0.99)]
    print(f"floor {floor}, bound {confidence:.0%} each side, 64 held-out chunks from C clips, {trials} trials a cell")
    print("| q drift, r kept, b clean kept | population share | C clips | confirmed: chunks counted (before) | clips counted (Kish rho=1) "
          "| rho estimated (ANOVA, dropped) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for q, r, b in cases:
        for clips in (1, 2, 3, 4, 8, 16, 64):
            per = 64 // clips
            hits = np.zeros(3)
            for _ in range(trials):
                drift = rng.random(clips) < q
                groups = [(rng.random(per) < (r if d else b)).astype(float) for d in drift]
                n = clips * per
                share = sum(g.sum() for g in groups) / n
                hits[0] += _confirms(share, n, floor, confidence)
                hits[1] += _confirms(share, Chains((per,) * clips, n).draws(n), floor, confidence)
                rho = icc(groups)
                rho = 1.0 if rho is None else min(1.0, max(0.0, rho))
                hits[2] += _confirms(share, n / (1.0 + (per - 1) * rho), floor, confidence)
            print(f"| {q}, {r}, {b} | {(1 - q) * b + q * r:.3f} | {clips} | {hits[0] / trials:.3f} | {hits[1] / trials:.3f} | {hits[2] / trials:.3f} |")


def real(model: str, calib: int, seed: int, quantized: str, output: str) -> None:
    import newmodels  # bench/: the feeds as bench/newmodels.py builds them
    import onnx

    from onnxptq.analysis.streams import find_stream, state_pairs, streamed_outputs
    from onnxptq.analysis.waveform_reads import ACTIVE_DB, CHUNK_SNR_DB
    from testkit.stream import run

    path, feeds_fn = newmodels.MODELS[model][:2]
    float_model = onnx.load(path)
    feeds = feeds_fn(calib, seed)
    ref_step, cand_step = run(float_model), run(onnx.load(quantized))
    ref = [ref_step(f) for f in feeds]
    stream = find_stream(feeds, ref, state_pairs(float_model))
    assert stream is not None, "no stream in the data"
    got = streamed_outputs(cand_step, feeds, stream)
    energy = {k: float((np.asarray(ref[k][output], np.float64) ** 2).sum()) for c in stream.chains for k in c}
    loud = max(energy.values())
    groups = []
    for chain in stream.chains:
        kept = []
        for k in chain:
            if energy[k] < loud * 10.0 ** (-ACTIVE_DB / 10.0):
                continue
            err = float(((np.asarray(ref[k][output], np.float64) - np.asarray(got[k][output], np.float64)) ** 2).sum())
            kept.append(10.0 * np.log10(energy[k] / max(err, 1e-300)) >= CHUNK_SNR_DB)
        groups.append(np.array(kept, float))
    print(f"{model} {quantized} (seed {seed}): {len(feeds)} calls, {len(stream.chains)} clips")
    for c, g in zip(stream.chains, groups):
        print(f"  clip of {len(c)} calls: {g.mean() if g.size else float('nan'):.3f} of {g.size} audible chunks kept")
    pooled = np.concatenate(groups)
    rho = icc(groups)
    print(f"  pooled {pooled.mean():.4f} of {pooled.size}; intra-clip correlation (ANOVA) "
          f"{'not estimable' if rho is None else f'{rho:.3f}'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=("simulate", "real"))
    ap.add_argument("--trials", type=int, default=4000)
    ap.add_argument("--floor", type=float, default=0.97)
    ap.add_argument("--confidence", type=float, default=0.9)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", default="fastenhancer")
    ap.add_argument("--calib", type=int, default=1200)
    ap.add_argument("--quantized", default="")
    ap.add_argument("--output", default="wav_out")
    a = ap.parse_args()
    if a.mode == "simulate":
        simulate(a.trials, a.floor, a.confidence, a.seed)
    else:
        real(a.model, a.calib, a.seed, a.quantized, a.output)


if __name__ == "__main__":
    main()
