"""Speech-like audio for the silero voice-activity models, and the streaming loop that runs them.

A VAD's quantization damage shows where the float model is unsure: at speech onsets and offsets,
in noisy speech, in loud non-speech noise. :func:`speech_mix` therefore lays out a deterministic
sequence (per seed) of silence with faint room noise, spoken sentences at varied loudness, and
bursts of non-speech noise, over a background at a chosen signal-to-noise ratio, at 16 kHz.

Speech comes from Debian's ``espeak-ng`` (varied voices, speeds and pitches) when it is installed;
without it a seeded formant synthesiser (a glottal pulse train through vowel resonators, with
consonant-like noise bursts) stands in and a warning says so, so the figures of a machine without
espeak-ng are comparable among themselves but not with one that has it.

:func:`run_vad` is the silero models' streaming protocol (as the wheel's own ``OnnxWrapper``):
512-sample windows at 16 kHz, each prefixed by the last 64 samples of the previous window, the
recurrent ``state`` [2, 1, 128] carried from one window to the next, and ``sr`` when the model
takes it. :func:`vad_feeds` records the float model's feeds of a clip, the calibration data.
"""

from __future__ import annotations

import io
import logging
import shutil
import subprocess
import wave
from collections.abc import Sequence
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

SAMPLE_RATE = 16000
#: samples per VAD window at 16 kHz, and the context carried in front of it (silero v5+)
WINDOW = 512
CONTEXT = 64
STATE_SHAPE = (2, 1, 128)

_SENTENCES = (
    "the quick brown fox jumps over the lazy dog",
    "please call stella and ask her to bring these things with her from the store",
    "we will meet at the station at half past nine tomorrow morning",
    "quantization keeps the model small while the answers stay the same",
    "turn left at the second light and the office is on your right",
    "she sells sea shells by the sea shore every summer",
    "the weather in the mountains changes quickly in the afternoon",
    "one two three four five six seven eight nine ten",
    "could you repeat the last number a little more slowly please",
    "a large cup of coffee and two slices of bread with butter",
)
_VOICES = ("en-us", "en-gb", "en-us+f3", "en-gb+m3", "en-us+f1", "en-gb-scotland")


def espeak_available() -> bool:
    """Whether the ``espeak-ng`` program is on the PATH."""
    return shutil.which("espeak-ng") is not None


def speak(text: str, *, voice: str = "en-us", speed: int = 150, pitch: int = 50) -> np.ndarray:
    """``text`` spoken by espeak-ng, float32 in [-1, 1] at 16 kHz.

    Raises FileNotFoundError when espeak-ng is not installed (Debian: ``apt-get install espeak-ng``).
    """
    exe = shutil.which("espeak-ng")
    if exe is None:
        raise FileNotFoundError("espeak-ng is not installed (Debian: apt-get install espeak-ng)")
    wav = subprocess.run([exe, "-v", voice, "-s", str(speed), "-p", str(pitch), "--stdout", text],
                         check=True, capture_output=True).stdout
    with wave.open(io.BytesIO(wav)) as reader:
        rate = reader.getframerate()
        frames = reader.readframes(reader.getnframes())
    audio = np.frombuffer(frames, dtype="<i2").astype(np.float32) / 32768.0
    return resample(audio, rate, SAMPLE_RATE)


def resample(audio: np.ndarray, rate: int, target: int) -> np.ndarray:
    """Linear-interpolation resampling after a moving-average low-pass at the target's Nyquist.

    Good enough for test speech (the VAD looks at the spectrum below 8 kHz); no SciPy needed.
    """
    if rate == target:
        return audio.astype(np.float32)
    if target < rate:
        width = max(1, int(round(rate / target)))
        audio = np.convolve(audio, np.full(width, 1.0 / width, dtype=np.float32), mode="same")
    n = int(round(len(audio) * target / rate))
    positions = np.arange(n, dtype=np.float64) * (rate / target)
    return np.interp(positions, np.arange(len(audio)), audio).astype(np.float32)


def synthetic_speech(rng: np.random.Generator, seconds: float) -> np.ndarray:
    """Speech-like sound without espeak-ng: voiced vowels (pulse train through three formant
    resonators, pitch contour, syllable envelope) alternating with short fricative noise."""
    out: list[np.ndarray] = []
    total = int(seconds * SAMPLE_RATE)
    vowels = ((730, 1090, 2440), (270, 2290, 3010), (300, 870, 2240), (530, 1840, 2480), (640, 1190, 2390))
    f0_base = rng.uniform(90, 220)
    while sum(len(x) for x in out) < total:
        n = int(rng.uniform(0.09, 0.22) * SAMPLE_RATE)
        t = np.arange(n) / SAMPLE_RATE
        f0 = f0_base * (1 + 0.1 * np.sin(2 * np.pi * rng.uniform(1, 4) * t))
        phase = np.cumsum(f0 / SAMPLE_RATE)
        source = (np.diff(np.floor(phase), prepend=0.0) > 0).astype(np.float64)
        voiced = np.zeros(n)
        for formant, bandwidth in zip(vowels[rng.integers(len(vowels))], (80, 100, 120)):
            r = np.exp(-np.pi * bandwidth / SAMPLE_RATE)
            theta = 2 * np.pi * formant / SAMPLE_RATE
            a1, a2 = 2 * r * np.cos(theta), -r * r
            y = np.zeros(n)
            for i in range(n):  # two-pole resonator
                y[i] = source[i] + a1 * (y[i - 1] if i else 0.0) + a2 * (y[i - 2] if i > 1 else 0.0)
            voiced += y
        voiced *= np.hanning(n)
        voiced /= max(np.abs(voiced).max(), 1e-9)
        out.append(voiced)
        m = int(rng.uniform(0.02, 0.07) * SAMPLE_RATE)
        out.append(np.diff(rng.normal(0, 0.15, m + 1)) * np.hanning(m))
    return np.concatenate(out)[:total].astype(np.float32)


def _utterance(rng: np.random.Generator, use_espeak: bool) -> np.ndarray:
    if use_espeak:
        text = _SENTENCES[rng.integers(len(_SENTENCES))]
        return speak(text, voice=_VOICES[rng.integers(len(_VOICES))], speed=int(rng.integers(120, 190)),
                     pitch=int(rng.integers(30, 75)))
    return synthetic_speech(rng, float(rng.uniform(1.0, 2.5)))


def speech_mix(seed: int = 0, seconds: float = 12.0, *, snr_db: float = 15.0,
               use_espeak: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
    """A clip of about ``seconds`` at 16 kHz and its per-sample ground truth (True = speech).

    Segments, in seeded random order: silence (0.3-1.2 s), an utterance at a random gain, and now
    and then a non-speech noise burst (coloured noise, 0.2-0.6 s). A background of white noise at
    ``snr_db`` below the speech level runs under everything. ``use_espeak=None`` uses espeak-ng
    when installed and the synthesiser otherwise (with a warning).
    """
    rng = np.random.default_rng(seed)
    if use_espeak is None:
        use_espeak = espeak_available()
        if not use_espeak:
            log.warning("espeak-ng is not installed: speech_mix uses the formant synthesiser (figures differ)")
    total = int(seconds * SAMPLE_RATE)
    parts: list[np.ndarray] = []
    truth: list[np.ndarray] = []
    length = 0
    while length < total:
        kind = rng.choice(["silence", "speech", "speech", "noise"])
        if kind == "speech":
            seg = _utterance(rng, use_espeak)
            seg = seg / max(float(np.abs(seg).max()), 1e-9) * rng.uniform(0.15, 0.8)
            label = np.abs(seg) > 0.02 * np.abs(seg).max()
        elif kind == "noise":
            n = int(rng.uniform(0.2, 0.6) * SAMPLE_RATE)
            white = rng.normal(0, 1, n)
            seg = np.convolve(white, np.ones(int(rng.integers(1, 8))), mode="same")
            seg = seg / np.abs(seg).max() * rng.uniform(0.05, 0.3) * np.hanning(n)
            label = np.zeros(n, dtype=bool)
        else:
            seg = np.zeros(int(rng.uniform(0.3, 1.2) * SAMPLE_RATE))
            label = np.zeros(len(seg), dtype=bool)
        parts.append(seg.astype(np.float32))
        truth.append(label)
        length += len(seg)
    audio = np.concatenate(parts)[:total]
    labels = np.concatenate(truth)[:total]
    speech_rms = float(np.sqrt(np.mean(audio[labels] ** 2))) if labels.any() else 0.1
    background = rng.normal(0, speech_rms * 10 ** (-snr_db / 20), total)
    return np.clip(audio + background, -1, 1).astype(np.float32), labels


def _input_names(session: Any) -> list[str]:
    return [i.name for i in session.get_inputs()]


def _session(model: Any) -> Any:
    """An onnxruntime CPU session for a path, a ModelProto or an existing session."""
    if hasattr(model, "run") and hasattr(model, "get_inputs"):
        return model
    from onnxptq.sessions import open_session

    return open_session(model)


def _feed(names: Sequence[str], chunk: np.ndarray, state: np.ndarray) -> dict[str, np.ndarray]:
    feed = {"input": chunk[None, :].astype(np.float32), "state": state}
    if "sr" in names:
        feed["sr"] = np.array(SAMPLE_RATE, dtype=np.int64)
    return {k: feed[k] for k in names}


def run_vad(model: Any, audio: np.ndarray, *, max_windows: int | None = None) -> tuple[np.ndarray, list[dict[str, np.ndarray]]]:
    """Stream ``audio`` through a silero model: (speech probability per window, the feeds used).

    ``model``: a path, a ModelProto or an onnxruntime session. Each feed holds the 64-sample
    context plus the 512-sample window, the state the model returned for the previous window and,
    when the model takes it, ``sr`` = 16000.
    """
    session = _session(model)
    names = _input_names(session)
    windows = len(audio) // WINDOW if max_windows is None else min(max_windows, len(audio) // WINDOW)
    state = np.zeros(STATE_SHAPE, dtype=np.float32)
    context = np.zeros(CONTEXT, dtype=np.float32)
    probs = np.empty(windows, dtype=np.float32)
    feeds: list[dict[str, np.ndarray]] = []
    for i in range(windows):
        chunk = np.concatenate([context, audio[i * WINDOW : (i + 1) * WINDOW]])
        feed = _feed(names, chunk, state)
        feeds.append(feed)
        out, state = session.run(["output", "stateN"], feed)
        probs[i] = float(np.asarray(out).reshape(-1)[0])
        state = np.asarray(state, dtype=np.float32)
        context = chunk[-CONTEXT:]
    return probs, feeds


def vad_feeds(model: Any, audio: np.ndarray, *, max_windows: int | None = None) -> list[dict[str, np.ndarray]]:
    """The float model's feeds for ``audio`` (states from its own run): calibration data."""
    return run_vad(model, audio, max_windows=max_windows)[1]


def triangular_mel(bins: int, mels: int) -> np.ndarray:
    """A ``[bins, mels]`` filterbank of triangles evenly spaced over the bins (float32): the mel
    MatMul of the hand-built audio front ends the log-domain tests quantize; its shape, not its
    exact mel spacing, is what those rules read."""
    mel = np.zeros((bins, mels), np.float32)
    edges = np.linspace(0, bins - 1, mels + 2)
    f = np.arange(bins)
    for m in range(mels):
        lo, mid, hi = edges[m], edges[m + 1], edges[m + 2]
        mel[:, m] = np.clip(np.minimum((f - lo) / (mid - lo), (hi - f) / (hi - mid)), 0, None)
    return mel


def window_labels(labels: np.ndarray) -> np.ndarray:
    """Per-window ground truth: a window is speech when most of its samples are."""
    windows = len(labels) // WINDOW
    return labels[: windows * WINDOW].reshape(windows, WINDOW).mean(axis=1) > 0.5


def compare_probs(reference: np.ndarray, candidate: np.ndarray, threshold: float = 0.5) -> dict[str, float]:
    """Cosine of the two probability sequences and the share of windows whose decision agrees."""
    ref, cand = np.asarray(reference, np.float64), np.asarray(candidate, np.float64)
    cosine = float(ref @ cand / max(np.linalg.norm(ref) * np.linalg.norm(cand), 1e-30))
    agree = float(np.mean((ref > threshold) == (cand > threshold)))
    return {"cosine": cosine, "agreement": agree, "max_abs": float(np.max(np.abs(ref - cand)))}
