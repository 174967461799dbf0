"""Long CTC reads judged by their edit distance, short ones by their exact strings (analysis/symbol_reads.py).

hama's phoneme recognizer reads 18-39 phonemes an utterance, and its users read the phoneme error
rate: as exact strings one phoneme changed in 32 changes the read (bench/RESULTS.md, newmodels18 and
seqreads2). A captcha's code or an OCR line of 3-18 characters stays an exact read.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from onnxptq.analysis.class_scores import collapse, edit_distance
from onnxptq.analysis.floor import Floor, measure, readings_of
from onnxptq.analysis.symbol_reads import LONG_READ
from onnxptq.sessions import open_session
from test_floor_strings import C, F, _prototypes, softmax_reader

SIXTEEN = Floor("16-bit", 0.0, 0.97)
CLASSES = 40


def _reads(n: int, symbols: int, substituted: int, seed: int = 0, unsure: bool = False) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """``n`` confident CTC reads of ``symbols`` characters (a frame each, two blank frames between; blank 0)
    and the same reads with ``substituted`` characters of each read as another class; ``unsure``: float
    reads those characters at 0.55 against 0.40 for the class they become."""
    rng = np.random.default_rng(seed)
    refs, gots = [], []
    for _ in range(n):
        p = np.full((1, 3 * symbols + 3, CLASSES), 0.002)
        p[0, :, 0] = 0.95
        got = p.copy()
        swap = set(rng.choice(symbols, substituted, replace=False).tolist())
        for i, k in enumerate(rng.integers(1, CLASSES, symbols)):
            t = 3 * i + 1
            p[0, t, 0] = got[0, t, 0] = 0.002
            p[0, t, k] = 0.95
            got[0, t, 1 + k % (CLASSES - 1) if i in swap else k] = 0.95
            if unsure and i in swap:
                p[0, t, k], p[0, t, 1 + k % (CLASSES - 1)] = 0.55, 0.40
        refs.append(p / p.sum(-1, keepdims=True))
        gots.append(got / got.sum(-1, keepdims=True))
    return refs, gots


def _judge(refs: list[np.ndarray], gots: list[np.ndarray]):
    verdict = measure([{"probs": r} for r in refs], [{"probs": g} for g in gots], SIXTEEN, class_outputs={"probs": None})
    return verdict, verdict.outputs["probs"]


def test_one_substituted_symbol_per_long_read_holds_by_its_edit_distance():
    refs, gots = _reads(12, 40, 1)
    verdict, check = _judge(refs, gots)
    p = check.positions
    assert p is not None and p.strings and p.symbols
    assert p.changed == 12 and p.chars == 480 and p.edits == 12  # every read differs: as exact strings, 0.0 of them
    assert p.agreement == pytest.approx(1 - 12 / 480, abs=2e-3) and p.agreement >= SIXTEEN.top1
    assert verdict.ok and not check.top1_unjudged and check.rows == 480
    assert "symbols 0.97" in verdict.describe() and "edit distance" in verdict.describe()


def test_the_same_substitution_in_short_reads_breaks_them_as_exact_strings():
    refs, gots = _reads(40, 6, 1)
    verdict, check = _judge(refs, gots)
    p = check.positions
    assert p.strings and not p.symbols and p.changed == 40 and p.agreement < 0.5
    assert not verdict.ok and "read differently" in verdict.describe()


def test_long_reads_losing_many_symbols_break_and_a_few_edits_on_few_reads_are_not_judged():
    refs, gots = _reads(12, 40, 3)  # 36 of 480 symbols: 0.925, far below 0.97
    verdict, check = _judge(refs, gots)
    assert check.positions.symbols and check.positions.edits == 36 and not verdict.ok

    refs, gots = _reads(2, 40, 2)  # 4 of 80 symbols: 0.95, as a model at 0.97 loses on about a fifth of draws
    verdict, check = _judge(refs, gots)
    assert check.positions.symbols and check.top1 < SIXTEEN.top1
    assert verdict.ok and check.top1_unjudged and check.within_chance is not None and check.within_chance > 0.1
    assert "NOT JUDGED: below the floor by 4 lost of 80" in verdict.describe()


def test_edits_where_float_is_unsure_count_in_a_long_read():
    """The exact judgement leaves out strings changed only where float reads a character at a
    probability margin under 0.5 (OCR lines whose truth such changes do not worsen); a PER against
    float counts every edit: 36 of 480 symbols so changed break the long reads."""
    refs, gots = _reads(12, 40, 3, unsure=True)
    verdict, check = _judge(refs, gots)
    p = check.positions
    assert p.symbols and p.unsure_changed == 12 and p.edits == 36 and not verdict.ok

    refs, gots = _reads(40, 6, 1, unsure=True)  # short reads: exact strings, those changes said, not repaired
    verdict, check = _judge(refs, gots)
    assert not check.positions.symbols and check.positions.unsure_changed == 40 and verdict.ok and check.advisory


def _dynamic(model: onnx.ModelProto) -> onnx.ModelProto:
    for v in (model.graph.input[0], model.graph.output[0]):
        v.type.tensor_type.shape.dim[1].dim_param = "T"
    return model


def _lines(n: int, glyphs: int, seed: int = 3) -> list[dict[str, np.ndarray]]:
    """test_floor_strings' glyph lines (three frames a glyph, edges weaker), ``glyphs`` to a line."""
    rng = np.random.default_rng(seed)
    protos = _prototypes()
    feeds = []
    for _ in range(n):
        x = 0.1 * rng.standard_normal((1, 6 * glyphs + 6, F))
        for slot in range(glyphs):
            k, t = int(rng.integers(1, C)), 6 * slot + 2
            for dt, amp in ((-1, 1.8), (0, 3.0), (1, 1.8)):
                x[0, t + dt] += amp * protos[k] + 0.1 * rng.standard_normal(F)
        feeds.append({"x": x.astype(np.float32)})
    return feeds


@pytest.fixture(scope="module")
def readers() -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """A Softmax CTC reader and the same with glyph 7's frames lost to glyph 5 and the blank."""
    return _dynamic(softmax_reader()), _dynamic(softmax_reader(confuse=(5, 7)))


@pytest.mark.parametrize("glyphs, by_symbols", [(30, True), (6, False)])
def test_a_reader_losing_one_glyph_is_judged_as_its_users_read_it(readers, glyphs, by_symbols):
    """The same confused glyph: on lines of 30 glyphs (an utterance's length) 1 − edits / symbols holds
    the 16-bit floor where a third of the lines read differently; on lines of 6 (a captcha) the strings break it."""
    model, confused = readers
    feeds = _lines(12, glyphs)
    ref = [{"probs": open_session(model).run(["probs"], f)[0]} for f in feeds]
    got = [{"probs": open_session(confused).run(["probs"], f)[0]} for f in feeds]
    strings = [(collapse(np.argmax(r["probs"], -1)[0], 0), collapse(np.argmax(g["probs"], -1)[0], 0)) for r, g in zip(ref, got)]
    changed = sum(a != b for a, b in strings)
    edits, symbols = sum(edit_distance(a, b) for a, b in strings), sum(len(a) for a, _ in strings)
    assert changed >= 2 and (symbols >= LONG_READ * len(feeds)) == by_symbols
    verdict = measure(ref, got, SIXTEEN, **readings_of(model))
    p = verdict.outputs["probs"].positions
    assert p.strings and p.symbols == by_symbols and p.changed == changed
    if by_symbols:
        assert p.edits == edits and 1 - edits / symbols >= p.agreement >= SIXTEEN.top1 and verdict.ok
    else:
        assert p.agreement <= 1 - changed / len(feeds) + 1e-9 and not verdict.ok
