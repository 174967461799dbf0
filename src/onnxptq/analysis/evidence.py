"""Whether the losses seen on a few independent decisions say an agreement is below a floor.

Why: a verdict "broken" says the quantized model keeps float's decisions on fewer than the floor's
share of the samples its user runs, and repair then keeps nodes float for it. Judged by a point
estimate on a few dozen decisions, that said "broken" by chance: arabic-name-romanizer's Persian
decoder step under A16W8 and BFP16 lost float's top two on 2 of 64 held-out rows (0.969 < 0.97)
while 512 other rows kept them on 0.990 / 0.982, and a declared ``topk:2`` reading kept a node float
for it; khmersm's tagger under MXFP8_E4M3 flipped 4 of 79 word starts on its 4 held-out sentences
(0.949 < 0.95) where the CRF's word-start F1 on 32 sentences was 0.979 (bench/RESULTS.md, "Sequence
readings"). On 64 rows a model exactly at the 0.97 floor loses 2 or more on 58 % of draws.

So a judgement of independent decisions (rows, a tagger's word starts) breaks only where the losses
seen are unlikely at the floor's own loss rate: the one-sided binomial tail ``P(X ≥ lost)``, ``X`` the
losses of ``count`` decisions each lost with probability ``1 − floor``, is at most
``1 − CONFIDENT`` (:data:`CONFIDENT`, 0.9: the confidence the floor's margin estimates on few reads
already ask, ``class_scores._surely_below``). Where the share seen is
below the floor and the tail is larger, the judgement *could not judge*: said in the summary, the
warning and the plan (``floor.unjudged_text``), never "holds", and a repair candidate showing it is
not accepted (``algorithms/repair.moved_unjudged_reads``). On 64 rows at 0.97 a break then needs 5
lost (0.922); at 0.95, 7 (0.891): anr_fa_decoder MXFP8_E4M3's 13 of 64 (0.797) stays one.

The other side: a share *above* the floor on a few reads is not yet a share that holds it. 2 lost of
64 held-out rows reads 0.969 against an 8-bit floor of 0.95, and anr_fa_decoder's MXFP8_E4M3 then
read 0.871 on 512 rows; mp_face_short A16W8's objects read F1 0.975 on 106 decisions and 0.966 on 96
images. So every agreement-style share carries its bound (:func:`share_bound`: Wilson's score
interval, :data:`CONFIDENT` each side, on the count of independent reads) and has three outcomes:
*holds* (the bound's low end at or above the floor), *broken* (the share below it; or not judged, by
the rule above) and *could not confirm* (the share above, the bound's low end below): said in the
warning, the summary and the plan with the count that would confirm it (:func:`reads_to_confirm`),
never a bare "holds"; repair acts on it only where the user asks (``QuantConfig.repair_uncertain``).
Why Wilson and not Clopper-Pearson: the reads' agreement is often a margins' estimate, a fractional
count of kept reads, which the score interval takes as it is; its coverage is close to nominal where
the exact interval's is above it (Brown, Cai & DasGupta 2001), and it has a closed form. With every
read kept its low end is ``n / (n + z²)``: a floor of 0.97 is confirmed from 54 reads, 0.95 from 32,
0.90 from 15 (z = 1.2816 at 0.9 one-sided).

**Two looks** (:data:`FIRST_LOOK`, :data:`SECOND_LOOK`; ``pipeline/second_look.py``). Where the data leaves a
reserve of held-out samples beyond the first ones (``calibrate.split_holdout``), a share the first held-out
samples cannot confirm is judged again on all of them together: more held-out samples only where the first
verdict is "could not confirm", not on every quantization. Two chances to confirm a model exactly at the floor
at 90 % each would confirm it on 15-21 % of draws (the reserve 3× the first samples: 80 → 320 reads at 0.97,
64 → 256 at 0.95, by simulation), twice the 10 % a single bound allows; so where a second look is possible
the first confirms at 95 % and the second at 92 % (about half the error spent on each), which keeps the
two looks' chance to confirm a model at the floor within 0.08-0.12 on those counts, as one bound at 90 %
on all the reads (Wilson's coverage steps with the counts; tests/test_evalsamples_looks.py sums it
exactly). Without a reserve there is one look, at :data:`CONFIDENT`, as before; and so is a share a second look
could not confirm even with every read kept (its count with the reserve's too few at :data:`SECOND_LOOK`: a
batch-1 classifier's 8 + 24 rows against 0.97), decided by the count and not by the share (``floor.Floor.level``).

**Chains of calls** (:class:`Chains`, :meth:`Chains.draws`). A streamed model's held-out calls are not independent
draws: the calls of one clip (a chain of calls, each fed the state of the one before: analysis/streams.py) share its
noise, its speaker and the state the quantized model carried into them, and whether they drift is decided by the clip
(decibri's FastEnhancer-T MX9: every streamed chunk of the calibration clips within 20 dB of float's, 0.917 of the
chunks of other clips; bench/RESULTS.md, streamspread). 48 chunks of one clip confirm nothing about the next clip. So a
share judged on chained calls is bounded on its *effective* draws (Kish 1965, the design effect of a cluster sample):
``n_eff = n / deff``, ``deff = 1 + (m̃ − 1) ρ``, ``m̃ = Σ m_c² / n`` the size-weighted mean of the ``m_c`` units of
each chain, ``ρ`` the intra-chain correlation of the kept/lost indicator. The bound takes ``ρ = 1``:
``n_eff = n² / Σ m_c²``, the number of chains where they hold alike counts (3 clips of 16 chunks: 3 draws), fewer where
one chain holds most of them. A call in no chain is a chain of its units, each its own (``deff`` 1): independent
units give exactly the count, so every unchained verdict is the one it was. A reading gives the floor its share and
its count, not the units of each call, so the units are taken as spread evenly over the held-out calls
(``m_c = n · h_c / H``, ``h_c`` of the ``H`` held-out calls in chain ``c``); ``n_eff`` is never above ``n``.

Why ``ρ = 1`` and not estimated: (1) the floor holds each reading's share and count, not its kept/lost units call by
call; (2) with the 1-4 clips a user's first 192 calls hold, ``ρ̂`` is not estimable where every unit is kept (the
case "could not confirm" is about) and is all noise elsewhere: one lost chunk of 3 × 16 puts the one-way ANOVA
estimate at 0 (``n_eff`` 48, bound 0.933 for 47 kept) where none lost gives no estimate, so a single loss would
confirm what a clean run could not; (3) ``ρ = 1`` is the one value the floor's own 1-4 clips cannot refute, and it
is monotone: more chains, more draws. It is the conservative end: over the whole of 10 of the bench's FastEnhancer-T
clips (about 136 audible chunks each) the kept/lost indicator's intra-clip correlation measured 0.03-0.05 under MX9
and A16W8 (bench/RESULTS.md, chains), a design effect of 5-8 there, where ``ρ = 1`` takes the clip's count; the held-out
calls (every third of a clip's first seconds) are closer together than that. A break is unchanged: the losses seen on
a chained output stay judged on its units (``surely_below``), so a drift the floor sees is repaired; a repair
candidate whose clips could not confirm any share is not ruled out by its bound (``repair.selected_unconfirmed``).

**Chosen among candidates** (:func:`chosen_level`; ``floor.chosen``). Repair's search builds candidates and
delivers the first one whose verdict holds on the floor's samples; the delivered model's verdict on those
same samples is the figure it was *selected* by (the winner's curse: of several candidates near the floor, the
one whose draw fell high is the one kept). A bound at ``c`` each side covers one share with probability ``c``;
the share of a model chosen among ``k`` judged on the same samples is covered by every one of the ``k``
bounds at once with probability at least ``1 − k (1 − c)`` (Bonferroni: the selected one is one of them, which
the search's rule of choosing does not enter). So the delivered verdict's confirming end is taken at
``1 − (1 − c) / k``: a share that confirmed one candidate may be "could not confirm" once it is known to have been
chosen among four (``tests/test_floor_chosen.py`` simulates the search at the floor: the plain bound confirms the
chosen share on more draws than its ``1 − c`` allows, the widened one within it). The figure itself is said as
what it is, "the figure the search chose by", with the samples it was judged on (``Verdict.where``).
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Callable, NamedTuple

__all__ = ["CONFIDENT", "FIRST_LOOK", "MOST_HELD_OUT", "SECOND_LOOK", "Chains", "ShareBound", "chosen_level", "clips", "decisions_to_decide", "f1_share", "least_count", "reads_to_confirm", "share_bound",
           "surely_below", "tail"]

#: A break the margins' estimate alone shows on fewer reads than the floor needs is judged where the
#: per-position loss rate is above the floor's with at least this probability (``class_scores._surely_below``).
#: 0.95 lost a real break: tinyocr's reader under A8W8 (0.85 of 352 lines against the 8-bit floor's
#: 0.95) judged on 12 lines, one flip of 128 positions beside an estimate 2.4 times the floor's rate,
#: is 0.945 sure; at 0.9 every verdict checked agrees with the task metric on 160-400 samples but
#: sudachi's A8W8 and MXINT8 on 4 held-out sentences (0.93, 0.988: broken, as before)
CONFIDENT = 0.9
#: the confidence of the first look's bound where a second look on a reserve of held-out samples is possible,
#: and of the second look's (module docstring, "Two looks")
FIRST_LOOK = 0.95
SECOND_LOOK = 0.92
#: the most samples the floor holds out of the data, the first ones and the reserve together (pipeline/calibrate.py,
#: ``DEFAULT_HOLDOUT`` + ``HOLDOUT_RESERVE``): every third of the data's first 192 samples
MOST_HELD_OUT = 64
#: the most decisions :func:`decisions_to_decide` looks for
MOST = 100_000


def clips(n: int) -> str:
    """``n`` chains of calls in the verdict's words (module docstring, "Chains of calls"): "1 clip", "3 clips"."""
    return f"{n} clip" if n == 1 else f"{n} clips"


def tail(lost: int, count: int, floor: float) -> float:
    """``P(X ≥ lost)`` for ``X`` ~ Binomial(``count``, ``1 − floor``): how likely a model exactly at the
    floor loses at least ``lost`` of ``count`` decisions."""
    if lost <= 0:
        return 1.0
    if lost > count:
        return 0.0
    p = 1.0 - floor
    if p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    lp, lq = math.log(p), math.log1p(-p)
    below = 0.0  # P(X < lost), summed in order of increasing terms' index
    for i in range(lost):
        below += math.exp(math.lgamma(count + 1) - math.lgamma(i + 1) - math.lgamma(count - i + 1) + i * lp + (count - i) * lq)
    return max(0.0, 1.0 - below)


def f1_share(floor: float) -> float:
    """The share of decisions a reading judged by an F1 keeps at the F1 ``floor``: the floor its binomial
    rule is held against. Objects matched between float and quantized (a detector's objects at one
    threshold, analysis/threshold_cells.py) make ``n`` decisions (float's objects and those invented) of
    which ``e`` are errors (lost or invented); their F1 is ``2(n − e) / (2n − e)``, at least ``floor``
    exactly where ``e / n ≤ 2(1 − floor) / (2 − floor)``: a model at the floor errs on each decision with
    that rate (0.058 at 0.97, 0.095 at 0.95), so ``floor / (2 − floor)`` of them kept."""
    return floor / (2.0 - floor)


def surely_below(kept: int, count: int, floor: float) -> bool:
    """Whether ``kept`` of ``count`` independent decisions kept say the agreement is below ``floor``
    (module docstring): the losses' binomial tail at the floor's rate is at most ``1 − CONFIDENT``."""
    lost = count - kept
    if count <= 0 or lost <= 0 or kept / count >= floor:
        return False
    return tail(lost, count, floor) <= 1.0 - CONFIDENT


def decisions_to_decide(share: float, floor: float, seen: int = 1) -> int | None:
    """About how many decisions (at least ``seen``, those judged) at the agreement ``share`` would say
    it is below ``floor`` (the data a "could not judge" asks for); None where ``share`` is not below
    ``floor`` or more than :data:`MOST` would be needed."""
    if not share < floor:
        return None
    # the tail steps with the rounded losses: the count found is close, not least
    return least_count(lambda count: surely_below(int(round(share * count)), count, floor), max(1, seen), MOST)


def least_count(decides: Callable[[int], bool], start: int, most: int) -> int | None:
    """About the least count from ``start`` on that ``decides`` (doubling, then bisecting the last
    step): the decisions (:func:`decisions_to_decide`) or pages (``maps.MaskBound.pages_to_decide``)
    that would decide a figure; None where more than ``most`` would be needed."""
    count = start
    while count <= most and not decides(count):
        count *= 2
    if count > most:
        return None
    low, high = max(start, count // 2 + 1), count
    while low < high:
        mid = (low + high) // 2
        if decides(mid):
            high = mid
        else:
            low = mid + 1
    return high


def share_bound(kept: float, count: float, confidence: float = CONFIDENT) -> tuple[float, float]:
    """Wilson's score interval of a share ``kept / count``, ``confidence`` on each side (module
    docstring): the shares ``p`` a score test at that level does not refute, the roots of
    ``(kept/count − p)² = z² p (1 − p) / count``. ``kept`` may be fractional (a margins' estimate);
    ``(0, 1)`` where nothing was counted."""
    if count <= 0:
        return 0.0, 1.0
    p = min(1.0, max(0.0, kept / count))
    z = NormalDist().inv_cdf(confidence)
    z2n = z * z / count
    centre = (p + z2n / 2.0) / (1.0 + z2n)
    half = z / (1.0 + z2n) * math.sqrt(p * (1.0 - p) / count + z2n / (4.0 * count))
    return max(0.0, centre - half), min(1.0, centre + half)


def chosen_level(confidence: float, among: int) -> float:
    """The confidence each side of a bound on a share chosen among ``among`` candidates judged on the same samples,
    for its coverage to stay at ``confidence`` (module docstring, "Chosen among candidates"): Bonferroni's
    ``1 − (1 − confidence) / among``; ``confidence`` itself for one candidate (nothing chosen)."""
    if among <= 1:
        return confidence  # exactly: the looks' levels are compared by value (``FIRST_LOOK``, ``CONFIDENT``)
    return 1.0 - (1.0 - confidence) / int(among)


def reads_to_confirm(share: float, floor: float, seen: int = 1, confidence: float = CONFIDENT) -> int | None:
    """About how many independent reads at the agreement ``share`` put its bound's low end
    (:func:`share_bound`, ``confidence``) at or above ``floor`` (at least ``seen``, those judged): what a "could not
    confirm" asks for; None where ``share`` is not above ``floor`` or more than :data:`MOST` would be needed."""
    if not share > floor:
        return None
    return least_count(lambda count: share_bound(share * count, count, confidence)[0] >= floor, max(1, seen), MOST)


class Chains(NamedTuple):
    """How a streamed model's held-out calls hang together (module docstring, "Chains of calls"): the held-out calls
    of each chain of calls that holds any (analysis/streams.py ``held_out_chains``), and the held-out calls in all
    (those in no chain are independent)."""

    sizes: tuple[int, ...]
    calls: int

    @property
    def clips(self) -> int:
        """The clips the held-out calls come from: the chains that hold any, and each call in no chain its own."""
        return sum(1 for h in self.sizes if h) + max(0, self.calls - sum(self.sizes))

    def draws(self, count: float) -> float:
        """The effective draws of ``count`` units judged on the held-out calls: ``count² / Σ m²`` over the chains'
        units (``m_c = count · h_c / calls``) and the units of calls in no chain (each its own); ``count`` where no
        held-out call is in a chain, never above it."""
        chained = sum(self.sizes)
        if count <= 0 or self.calls <= 0 or not chained:
            return count
        per = count / self.calls
        squares = sum((per * h) ** 2 for h in self.sizes) + per * max(0, self.calls - chained)
        return min(count, count * count / squares)


class ShareBound(NamedTuple):
    """A share that holds its floor on its figure, and the bound that says how sure that is
    (:func:`share_bound`); the floor's "could not confirm" where ``low`` is below ``floor``."""

    #: the share judged (rows kept, reads' agreement, the share of decisions an F1 keeps) and what it counts
    share: float
    count: int
    unit: str
    low: float
    high: float
    #: the floor the share is held against (an F1's: :func:`f1_share`)
    floor: float
    #: reads like these that would confirm it (:func:`reads_to_confirm`); None: more than :data:`MOST`
    to_confirm: int | None
    #: the bound's confidence each side (:data:`CONFIDENT`; :data:`FIRST_LOOK` / :data:`SECOND_LOOK` where two looks are possible)
    confidence: float = CONFIDENT
    #: the effective draws the bound counts where the units came from chains of calls (module docstring, "Chains of
    #: calls": then ``to_confirm`` counts chains, :func:`clips`), and the clips they came from (:attr:`Chains.clips`); None,
    #: 0: independent units
    draws: float | None = None
    chains: int = 0

    @classmethod
    def of(cls, share: float, count: int, unit: str, floor: float, confidence: float = CONFIDENT,
           chains: Chains | None = None) -> "ShareBound":
        draws = chains.draws(count) if chains is not None else float(count)
        low, high = share_bound(share * draws, draws, confidence)
        if draws >= count:  # independent units: the bound of every unchained share, as before
            return cls(share, count, unit, low, high, floor, reads_to_confirm(share, floor, count, confidence), confidence)
        assert chains is not None
        return cls(share, count, unit, low, high, floor, reads_to_confirm(share, floor, max(1, int(draws)), confidence),
                   confidence, draws, chains.clips)

    @property
    def effective(self) -> float:
        """The draws the bound counts: :attr:`draws`, else :attr:`count`."""
        return self.count if self.draws is None else self.draws

    @property
    def confirmed(self) -> bool:
        return self.low >= self.floor

    @property
    def confirmable(self) -> bool:
        """Whether its draws could confirm any share: every one kept would leave the bound at the floor or above."""
        return share_bound(float(self.effective), float(self.effective), self.confidence)[0] >= self.floor

    def describe(self) -> str:
        """"0.9688 on 64 rows, bound 0.9271-0.9869 (90% each side) reaches below the floor 0.95: could NOT
        confirm; about 222 rows like these would confirm it" in words; a chained share says its chains ("1.0000
        on 48 audible chunks of 3 clips (3.0 effective draws: ...)", "about 54 clips like these")."""
        count = (f"{self.to_confirm} {self.unit}" if self.draws is None else clips(self.to_confirm)) if self.to_confirm else ""
        more = f"; about {count} like these would confirm it" if count else ""
        of = ("" if self.draws is None else f" of {clips(self.chains)} ({self.draws:.1f} effective draws: the {self.unit} "
              f"of one clip, each call fed the state of the one before, are no independent draws; analysis/evidence.py)")
        return (f"{self.share:.4f} on {self.count} {self.unit}{of}, bound {self.low:.4f}-{self.high:.4f} ({self.confidence:.0%} "
                f"each side) reaches below the floor {self.floor:.4g}: could NOT confirm{more}")
