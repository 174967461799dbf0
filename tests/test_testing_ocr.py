"""Rendered OCR evaluation data: decoding, CER, determinism, and the float models' scores on it."""

from __future__ import annotations

import time

import numpy as np
import pytest

pytest.importorskip("PIL")

from testkit import ocr  # noqa: E402
from testkit.models import model_path  # noqa: E402

# Measured on seed 0 with onnxruntime 1.31 CPU: rec CER 0.030 on 64 lines (0.035 on 200),
# cls accuracy 0.93 on 200 lines. The bounds leave room for FreeType/Pillow differences while
# still catching a broken renderer or a broken pre-processing convention.
REC_CER_MAX = 0.08
CLS_ACC_MIN = 0.85


@pytest.fixture(scope="module")
def rec_session():
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    return ort.InferenceSession(str(model_path("rec")), opts, providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module")
def cls_session():
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    return ort.InferenceSession(str(model_path("cls")), opts, providers=["CPUExecutionProvider"])


# --- decoding ----------------------------------------------------------------------------------


def _onehot(classes: list[list[int]], n_classes: int) -> np.ndarray:
    out = np.full((len(classes), len(classes[0]), n_classes), 0.01, np.float32)
    for i, row in enumerate(classes):
        for t, c in enumerate(row):
            out[i, t, c] = 0.9
    return out


def test_ctc_greedy_decode_merges_repeats_and_drops_blanks():
    chars = ["a", "b", "c", " "]  # class 1..4
    probs = _onehot(
        [
            [1, 1, 0, 1, 2, 2, 0, 0],  # a a _ a b b _ _ -> "aab"
            [0, 3, 3, 3, 0, 0, 0, 0],  # -> "c"
            [0, 0, 0, 0, 0, 0, 0, 0],  # all blank -> ""
            [2, 4, 4, 2, 0, 2, 1, 1],  # b ' ' b _ b a -> "b bba"
        ],
        5,
    )
    assert ocr.ctc_greedy_decode(probs, chars) == ["aab", "c", "", "b bba"]


def test_ctc_greedy_decode_rejects_bad_shapes():
    with pytest.raises(ValueError, match=r"\[N, T, C\]"):
        ocr.ctc_greedy_decode(np.zeros((4, 5)), ["a"])
    with pytest.raises(ValueError, match="character list covers only"):
        ocr.ctc_greedy_decode(np.zeros((1, 4, 5)), ["a", "b"])


def test_load_characters_matches_model_output(rec_session):
    chars = ocr.load_characters(model_path("rec"))
    n_classes = rec_session.get_outputs()[0].shape[-1]
    assert len(chars) + 1 == n_classes == 6625
    assert chars[-1] == " "
    assert ocr.load_characters(rec_session) == chars


def test_alphabet_is_in_dictionary_and_in_every_font():
    """Every character we draw is one the model can output, and one DejaVu really has a glyph for
    (a missing glyph renders as the .notdef box, the same bitmap as a private-use code point)."""
    chars = set(ocr.load_characters(model_path("rec")))
    assert set(ocr.LATIN_ALPHABET) <= chars
    for face, _ in ocr.FONT_FACES:
        font = ocr._font(face, 24)
        notdef = bytes(font.getmask("\ue000"))
        for c in ocr.LATIN_ALPHABET:
            assert bytes(font.getmask(c)) != notdef, (face, c)


# --- CER --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "d"),
    [("", "", 0), ("abc", "abc", 0), ("abc", "", 3), ("", "ab", 2), ("kitten", "sitting", 3), ("ab", "ba", 2), ("flaw", "lawn", 2)],
)
def test_levenshtein(a, b, d):
    assert ocr.levenshtein(a, b) == d
    assert ocr.levenshtein(b, a) == d


def test_cer_pools_edits_over_reference_length():
    # 1 substitution over 4 chars, 2 deletions over 2 chars, 1 insertion over 4 chars: 4 / 10
    assert ocr.cer(["abXd", "", "wxyzq"], ["abcd", "ef", "wxyz"]) == pytest.approx(0.4)
    assert ocr.cer(["same"], ["same"]) == 0.0
    assert ocr.cer([], []) == 0.0
    assert ocr.cer(["x"], [""]) == float("inf")
    with pytest.raises(ValueError, match="2 predictions for 1 references"):
        ocr.cer(["a", "b"], ["a"])


def test_normalize_text_folds_width_and_spaces():
    assert ocr.normalize_text("  file，  name． ") == "file, name."
    assert ocr.normalize_text("a b") == "a b"


# --- rendering ---------------------------------------------------------------------------------


def test_render_lines_shape_range_and_determinism():
    x1, t1 = ocr.render_lines(16, seed=3)
    x2, t2 = ocr.render_lines(16, seed=3)
    x3, t3 = ocr.render_lines(16, seed=4)
    assert x1.shape == (16, 3, 48, 320) and x1.dtype == np.float32
    assert -1.0 <= x1.min() and x1.max() <= 1.0
    assert np.array_equal(x1, x2) and t1 == t2
    assert t1 != t3
    assert all(t and set(t) <= set(ocr.LATIN_ALPHABET) | {" "} for t in t1)
    assert ocr.render_lines(2, width=200)[0].shape == (2, 3, 48, 200)
    assert ocr.render_lines(0)[0].shape == (0, 3, 48, 320)


def test_render_cls_labels_and_determinism():
    x, y = ocr.render_cls(9, seed=1)
    x2, y2 = ocr.render_cls(9, seed=1)
    assert x.shape == (9, 3, 48, 192) and x.dtype == np.float32
    assert y.tolist() == [0, 1, 0, 1, 0, 1, 0, 1, 0]
    assert np.array_equal(x, x2) and np.array_equal(y, y2)


def test_rendering_is_fast():
    start = time.process_time()
    ocr.render_lines(200, seed=0)
    ocr.render_cls(200, seed=0)
    # about 1.2 s of CPU for both; CPU seconds, so that a busy shared machine's wall clock cannot fail it
    assert time.process_time() - start < 10.0


# --- the float models on rendered data -----------------------------------------------------------


@pytest.mark.slow
def test_float_rec_reads_rendered_lines_well_but_not_perfectly(rec_session):
    images, texts = ocr.render_lines(64, seed=0)
    score = ocr.rec_cer(rec_session, images, texts)
    assert 0.0 < score <= REC_CER_MAX


@pytest.mark.slow
def test_float_cls_accuracy_on_rendered_lines(cls_session):
    images, labels = ocr.render_cls(200, seed=0)
    assert ocr.cls_accuracy(cls_session, images, labels) >= CLS_ACC_MIN


def test_rec_cer_opens_a_model_path():
    images, texts = ocr.render_lines(4, seed=0)
    assert ocr.rec_cer(model_path("rec"), images, texts, batch_size=2) <= 0.5


# --- files for the CLI -----------------------------------------------------------------------------


def test_save_npz_and_folder(tmp_path):
    images = np.arange(5 * 3 * 2 * 2, dtype=np.float32).reshape(5, 3, 2, 2)
    path = ocr.save_npz(tmp_path / "calib.npz", images)
    with np.load(path) as data:
        assert list(data.keys()) == ["x"]
        assert np.array_equal(data["x"], images)
    with pytest.raises(ValueError, match=r"\.npz"):
        ocr.save_npz(tmp_path / "calib.npy", images)

    files = ocr.save_folder(tmp_path / "npy", images, samples_per_file=2)
    assert [f.name for f in files] == ["sample_00000.npy", "sample_00001.npy", "sample_00002.npy"]
    assert np.array_equal(np.concatenate([np.load(f) for f in files]), images)

    files = ocr.save_folder(tmp_path / "npz", images, input_name="inp", fmt="npz")
    assert len(files) == 5
    with np.load(files[4]) as data:
        assert np.array_equal(data["inp"], images[4:])
