"""Long CTC reads judged by their edit distance: the symbol error rate an ASR's or a paragraph's user reads.

Why: a CTC reader's strings are judged as exact strings (analysis/class_scores.py, "Strings"): a
captcha's code and a text field are used whole, one wrong character and the read is wrong. A long
read is not used so. hama's phoneme recognizer (newmodels18: ``LogSoftmax`` over 191 phonemes, a
3 s utterance collapses to 18-39 phonemes, 32 on average) is read by its phoneme error rate (PER:
edit distance over the reference's length), as every ASR is (PER, CER, WER). Judged as exact
strings, one phoneme changed in 32 changes the read: an exact read of ``L`` symbols at the floor
0.97 asks each symbol ``0.97 ** (1 / L)``, 0.9990 at ``L`` = 32, one error in 1000 phonemes, and
FP16, which changed none, was "not judged" on the floor's 12 reads (34 needed) where its 376
symbols judge it. Measured (bench/RESULTS.md, seqreads2): without repair every other preset loses
9-58 % of the phonemes on 32 utterances and breaks by either reading; the 0.97-0.99 newmodels18
reported was after repair, which stops now where the users' figure holds.

**Which reads, by data** (:func:`by_symbols`): where float's collapsed strings average at least
:data:`LONG_READ` = 20 symbols. The zoo's OCR and captcha readers stay exact: captchas read 4-6
characters (ddddocr, captcha_whisperer, vtop, vcb), the rendered OCR lines 3-18 (the test
harness's ``render_lines``' ``max_chars`` = 18; PP-OCRv4/v5 rec, tinyocr, trueocr), the bench's Chinese
lines 2-6 words (4-16 characters): 4.0-10.4 symbols a read on the floor's 12 feeds; hama's
utterances 31.3 (18-39). A read of 20 symbols
exact at 0.97 asks 0.9985 a symbol: past that, a user reading it whole is the exception (a long
code is checked by a checksum, not by eye), and running text or speech is scored per symbol.
What the length cannot see: a short utterance (a keyword of 5 phonemes) stays an exact read, as
a short OCR line does; a long OCR line (a document's 60 characters) is read by CER, as OCR
benchmarks score lines.

**Judged** (:meth:`class_scores.Positions.judged`, ``symbols``): the agreement is
``1 − edits / symbols``: the Levenshtein distance of each read's collapsed string from float's,
summed over the reads, over the symbols of float's strings (pooled, as PER is). Every edit counts,
also where float itself is unsure (class_scores.UNSURE), which the exact judgement leaves out: that
rule stands on OCR lines whose truth such changes do not worsen (PP-OCRv4 rec), while a PER against
float counts them, and a phoneme recognizer reads a third of its positions so (hama: 142 of 446
under MX9). Left out, they hid 19 edits of 376 symbols (0.949) from a repair that then stopped at
54 nodes float with 1 − PER 0.936 on 32 other utterances. The margins' per-position estimate
(``class_scores._margin_cdf``) over every position becomes a per-symbol one: a flip to a
string-changing class costs an edit (or what the flips seen cost: :func:`symbol_estimate`), so
``1 − (1 − per position) × positions / symbols``, taken where it is lower and not refuted by the
flips seen. Symbols are the decisions, as a tagger's tokens are (analysis/evidence.py): a share
below the floor breaks it where the edits seen are unlikely at the floor's own rate
(``evidence.surely_below`` on the symbols), or where the margins' estimate is below it and sure of
it (:func:`rate_surely_above`); below it by edits that could be chance it is *not judged*; it
holds on at least ``1 / (1 − floor)`` symbols.
"""

from __future__ import annotations

import math

from .evidence import CONFIDENT

__all__ = ["LONG_READ", "by_symbols", "rate_surely_above", "symbol_estimate"]

#: float's mean collapsed symbols per read at or above which a CTC read is judged by its edit distance
LONG_READ = 20


def by_symbols(symbols: int, reads: int) -> bool:
    """Whether CTC reads whose float strings hold ``symbols`` symbols over ``reads`` reads are long
    reads, judged by their edit distance (module docstring)."""
    return reads > 0 and symbols >= LONG_READ * reads


def symbol_estimate(per_position: float, positions: int, symbols: int, flipped: int = 0, edits: int = 0) -> float:
    """The margins' per-position agreement on ``positions`` decision positions as a per-symbol one
    over float's ``symbols``: each expected flip to a string-changing class costs what the ``flipped``
    flips seen cost (``edits / flipped``, at most 1), one edit where none flipped. Why not one edit
    each: a glyph lost outright flips all its frames at once (two or three frames, one substitution),
    so counting each flipped frame as an edit counted a test reader's lost glyph 7 twice."""
    cost = min(1.0, edits / flipped) if flipped else 1.0
    return 1.0 - (1.0 - per_position) * positions * cost / max(1, symbols)


def rate_surely_above(rate: float, flipped: int, positions: int, allowed: float, prior: int) -> bool:
    """Whether a margins' estimate of a per-position loss ``rate`` (worth ``prior`` flips of evidence)
    and ``flipped`` flips seen on ``positions`` positions put the loss rate above ``allowed`` with
    probability ``evidence.CONFIDENT`` at least: the Gamma(``prior + flipped``, ``prior / rate + positions``)
    belief's tail above ``allowed``, a Poisson sum (``class_scores._surely_below`` says why)."""
    if rate <= 0.0 or positions <= 0 or allowed <= 0.0:
        return False
    x = allowed * (prior / rate + positions)
    term = total = math.exp(-x)
    for i in range(1, prior + flipped):
        term *= x / i
        total += term
    return total >= CONFIDENT
