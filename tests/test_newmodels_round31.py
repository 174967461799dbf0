"""bench/newmodels.py round 31 feeds and readings, on made-up vocabularies, signals and outputs (the packages stay out of
the tests).

rxnfp's SmilesTokenizer is BERT's [CLS] ... [SEP] around its SMILES regex, padded to the batch's longest; textgenrnn's
encoding is Keras' pad_sequences (padding and truncating at the front); the sung lines' drawn pitch is what their
spectrum shows; PESTO's frame reading counts voicing and 50-cent pitch agreement. Each is checked against an
independent computation here.
"""

from __future__ import annotations

import random

import numpy as np

from bench import newmodels as nm


def test_reaction_batch_is_cls_regex_tokens_sep_padded(monkeypatch):
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "c", "1", "Br", ">>", "[Na+]", "Cl", "O",
                                         "(", ")", "=", "C", "."])}
    monkeypatch.setitem(nm._RX_VOCAB, "test", vocab)
    feed = nm._rx_batch(["Brc1ccccc1>>[Na+].Cl", "CC(=O)O"], "test")
    first = ["[CLS]", "Br", "c", "1", "c", "c", "c", "c", "c", "1", ">>", "[Na+]", ".", "Cl", "[SEP]"]
    second = ["[CLS]", "C", "C", "(", "=", "O", ")", "O", "[SEP]"]
    assert feed["input_ids"].tolist() == [[vocab[t] for t in first],
                                          [vocab[t] for t in second] + [0] * (len(first) - len(second))]
    assert feed["attention_mask"].tolist() == [[1] * len(first), [1] * len(second) + [0] * (len(first) - len(second))]
    assert not feed["token_type_ids"].any()
    # a token the vocabulary lacks reads [UNK], as BertTokenizer maps it
    assert nm._rx_batch(["[K+]"], "test")["input_ids"].tolist() == [[2, 1, 3]]


def test_textgenrnn_encoding_pads_and_truncates_at_the_front(monkeypatch):
    monkeypatch.setattr(nm, "_TG_VOCAB", {"a": 1, "b": 2, " ": 3})
    short = nm._tg_encode("ab a?")
    assert short.shape == (40,) and short.tolist() == [0] * 35 + [1, 2, 3, 1, 0]   # '?' unknown: 0
    long = nm._tg_encode("b" * 10 + "a" * 40)
    assert long.tolist() == [1] * 40                                             # the last 40 characters


def test_sung_line_sounds_at_its_drawn_pitch():
    """Over a held note (128 ms sung throughout, the drawn pitch moving by its vibrato only), the strongest spectral
    peak lies within 4 % of a harmonic (1st-8th) of the drawn f0's median (a vibrato of at most 60 cents moves it up to
    3.5 % either way). The harmonic, not the fundamental: the voice's gains are its three formant resonances alone,
    so a fundamental far below the first formant is nearly silent (bench/RESULTS.md, round 31: a realism gap)."""
    audio, track, sung = nm._pesto_sung_track(random.Random(5), 2.0)
    assert audio.dtype == np.float32 and len(audio) == len(track) == len(sung) == 32000
    freqs = np.fft.rfftfreq(8 * 16384, 1 / 16000)
    checked = 0
    for at in range(0, 32000 - 2048, 512):
        seg = slice(at, at + 2048)
        if not sung[seg].all() or np.ptp(track[seg]) > 1.25:
            continue
        f0 = float(np.median(440 * 2 ** ((track[seg] - 69) / 12)))
        peak = float(freqs[np.argmax(np.abs(np.fft.rfft(audio[seg] * np.hanning(2048), 8 * 16384)))])
        harmonic = max(1, round(peak / f0))
        assert harmonic <= 8 and abs(peak / (harmonic * f0) - 1) < 0.04, at
        checked += 1
    assert checked >= 5


def test_pesto_frames_agree_on_voicing_and_fifty_cents():
    pitch = np.array([[60.0, 60.0, 60.0, 60.0]])
    conf = np.array([[0.9, 0.9, 0.2, 0.9]])
    ref = lambda f: [pitch, conf]                                                       # noqa: E731
    # frame 0 within 0.4 semitone, frame 1 off by 0.6, frame 2 unvoiced in both (its pitch is not read), frame 3's
    # voicing changed
    test = lambda f: [pitch + np.array([[0.4, 0.6, 5.0, 0.0]]), np.array([[0.8, 0.8, 0.1, 0.3]])]   # noqa: E731
    assert nm.pesto_pitch_frames(ref, test, [{}], None) == 0.5


def test_reaction_classes_and_next_char_read_the_arg_max():
    a = np.array([[0.1, 0.7, 0.2], [0.5, 0.3, 0.2]])
    b = np.array([[0.1, 0.6, 0.3], [0.2, 0.3, 0.5]])
    assert nm.rxnfp_classes(lambda f: [a], lambda f: [b], [{}], None) == 0.5
    assert nm.textgenrnn_next_char(lambda f: [a], lambda f: [b], [{}, {}], None) == 0.5
