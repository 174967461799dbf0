"""Waveform outputs, judged the way their users read them: a log-power spectrum within 1 dB.

Why: a waveform's cosine is blind to what its users hear or compute next. onnx-asr's 22.05 → 16 kHz
resampler writes a waveform whose ``Log`` lives in the *next* model (a whisper/kaldi front end): under
BF16 its cosine was 1.0000 while only 0.955 of the next model's log-mel bins stayed within 1 dB, and
A8W8 (cosine 0.9997) kept 0.673 (bench/RESULTS.md, newmodels19). A rounded sample is a noise floor
under every frequency; the cosine weighs it by the loud bins' energy, a log spectrum by each bin's
own level, so the quiet bins 40-80 dB down — which a spectrogram's reader sees — drown unseen.

The reading: each row (one signal per batch row) framed as a spectrogram's front end frames it
(:data:`N_FFT` samples, hop :data:`HOP`, Hann window), its power in dB with float's and the candidate's
values floored at :data:`RANGE_DB` below the row's loudest float bin (a log-mel front end's clamp:
whisper's ``max − 8`` in log10, 80 dB), and the share of bins within :data:`TOLERANCE_DB` of float's,
pooled over the feeds, against the family's top-1 floor.

What makes an output a waveform, by structure (:func:`waveform_outputs`): a float graph output of one
signal per batch row (``[batch, time]``, or ``[batch, 1, time]``) whose time axis is symbolic, in a
model that reads such a signal (a float input of the same form). A fixed last axis is a vocabulary,
an embedding, a class count — not a signal. The data must agree (:func:`is_waveform`): rows of at least
one frame that swing both ways about zero (a probability track or an envelope does not). Outputs the
structure misses are declared by their user: ``floor_output_reading={name: "waveform"}``.

**Chunks shorter than a frame** (issue 27: a streaming enhancer's ``[1, 256]`` hop out of a ``[1, 512]`` window
in): no spectrum frame fits, and the cosine floor lets a chunk through at ~17 dB SNR (0.99). By structure a
chunk is a fixed-length signal output (at least :data:`MIN_CHUNK` samples) of a model whose signal input is fixed
too and a whole multiple of it, 2 to :data:`MAX_HOPS` times (a window of hops: a class count or an embedding
is not a fixed fraction of the samples read, and an output as long as an input is a state carried back — an LSTM's
``h`` — not a hop); the data must swing about zero as a waveform does
(:func:`is_chunk`). Such rows are read by their SNR (:func:`chunk_snr`): the share of chunks within
:data:`CHUNK_SNR_DB` of float's (the error's energy at most 1 % of the chunk's, where a 0.99 cosine allows 2 %),
of the chunks float makes audible (within :data:`ACTIVE_DB` of the loudest: a silent chunk's SNR reads
rounding against nothing), against the family's top-1 floor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import onnx

from ..graph.ops import FLOATING

__all__ = ["ACTIVE_DB", "CHUNK_SNR_DB", "ChunkSnr", "MAX_HOPS", "MIN_CHUNK", "N_FFT", "HOP", "RANGE_DB", "TOLERANCE_DB",
           "SpectrumShare", "chunk_snr", "is_chunk", "spectrum_share", "is_waveform", "waveform_outputs"]

#: a speech front end's frame (32 ms at 16 kHz) and hop
N_FFT, HOP = 512, 256
#: the span of levels below the row's loudest bin that a log-spectrum reader resolves (whisper's clamp)
RANGE_DB = 80.0
#: a bin within this many dB of float's reads the same
TOLERANCE_DB = 1.0
#: a fixed-length chunk shorter than a frame holds at least this many samples (module docstring, "Chunks")
MIN_CHUNK = 64
#: a fixed signal input is at most this many chunks long (a window of hops)
MAX_HOPS = 4
#: a chunk holds where its error's energy is this many dB below its own
CHUNK_SNR_DB = 20.0
#: chunks more than this many dB below the loudest chunk float returned are silence, not read
ACTIVE_DB = 40.0


def _signal_axis(value_info: onnx.ValueInfoProto) -> onnx.TensorShapeProto.Dimension | None:
    """The last axis of a float ``[batch, L]`` or ``[batch, 1, L]`` tensor; None where it is not such a tensor.
    One test of the form, so that a waveform (symbolic ``L``) and a chunk (fixed ``L``) never disagree on it."""
    t = value_info.type.tensor_type
    if t.elem_type not in FLOATING or not t.HasField("shape"):
        return None
    dims = list(t.shape.dim)
    if len(dims) not in (2, 3) or (len(dims) == 3 and dims[1].dim_value != 1):
        return None
    return dims[-1]


def _signal_like(value_info: onnx.ValueInfoProto) -> bool:
    """A float tensor ``[batch, time]`` or ``[batch, 1, time]`` whose time axis is symbolic (not a fixed width)."""
    axis = _signal_axis(value_info)
    return axis is not None and not axis.HasField("dim_value")


def _chunk_length(value_info: onnx.ValueInfoProto) -> int | None:
    """The fixed last axis of a float ``[batch, L]`` or ``[batch, 1, L]`` tensor; None where it is not such a tensor."""
    axis = _signal_axis(value_info)
    return int(axis.dim_value) if axis is not None and axis.HasField("dim_value") else None


def waveform_outputs(model: onnx.ModelProto) -> set[str]:
    """Graph outputs that are waveforms by structure (module docstring): a signal of symbolic length per
    batch row, in a model that reads one; or a fixed chunk of a fixed signal input (module docstring, "Chunks")."""
    found: set[str] = set()
    if any(_signal_like(i) for i in model.graph.input):
        found = {o.name for o in model.graph.output if _signal_like(o)}
    windows = {n for i in model.graph.input if (n := _chunk_length(i)) is not None}
    for o in model.graph.output:
        length = _chunk_length(o)
        if length is not None and length >= MIN_CHUNK and any(w % length == 0 and 2 <= w // length <= MAX_HOPS for w in windows):
            found.add(o.name)
    return found


def _rows(values: np.ndarray) -> np.ndarray:
    return np.asarray(values, np.float64).reshape(values.shape[0], -1) if values.ndim >= 2 else np.asarray(values, np.float64)[None]


def is_waveform(refs: Sequence[np.ndarray]) -> bool:
    """Float's rows read as signals: each at least one frame long, swinging both ways about zero (its mean
    within half its RMS)."""
    if not refs:
        return False
    for r in refs:
        if r.ndim not in (2, 3) or r.shape[-1] < N_FFT or not np.isfinite(r).all():
            return False
        rows = _rows(r)
        rms = np.sqrt(np.mean(rows ** 2, axis=1))
        if np.any(np.abs(rows.mean(axis=1)) > 0.5 * rms) or not (np.any(rows < 0) and np.any(rows > 0)):
            return False
    return True


def is_chunk(refs: Sequence[np.ndarray]) -> bool:
    """Float's rows read as chunks of a signal: each at least :data:`MIN_CHUNK` samples, finite, swinging both ways
    about zero over the feeds (a probability track, an envelope, a magnitude does not)."""
    if not refs:
        return False
    for r in refs:
        if r.ndim not in (2, 3) or r.shape[-1] < MIN_CHUNK or not np.isfinite(r).all():
            return False
    both = np.concatenate([np.asarray(r, np.float64).ravel() for r in refs])  # rows of any length (a symbolic axis)
    rms = float(np.sqrt(np.mean(both ** 2)))
    return bool(np.any(both < 0) and np.any(both > 0) and abs(float(both.mean())) <= 0.5 * rms)


@dataclass
class ChunkSnr:
    """The SNR reading of one chunk output over the feeds (module docstring, "Chunks")."""

    #: audible chunks within :data:`CHUNK_SNR_DB` of float's, of all audible chunks
    share: float
    chunks: int
    #: the worst audible chunk's SNR in dB
    worst_db: float

    def describe(self) -> str:
        return (f"{self.share:.3f} of {self.chunks} audible chunks within {CHUNK_SNR_DB:g} dB SNR of float's "
                f"(worst {self.worst_db:.1f} dB)")


def chunk_snr(pairs: Sequence[tuple[np.ndarray, np.ndarray]]) -> ChunkSnr | None:
    """The reading of ``(float, candidate)`` chunk pairs, one chunk a batch row (module docstring, "Chunks"); None
    where float returned nothing audible. A candidate that is not finite counts its chunks as off."""
    energies, errors = [], []
    for r, g in pairs:
        if r.shape != g.shape:
            continue
        ref, got = _rows(r), _rows(g)
        energies.append((ref ** 2).sum(axis=1))
        err = ((ref - np.nan_to_num(got, nan=0.0, posinf=0.0, neginf=0.0)) ** 2).sum(axis=1)
        errors.append(np.where(np.isfinite(got).all(axis=1), err, np.inf))
    if not energies:
        return None
    energy, error = np.concatenate(energies), np.concatenate(errors)
    if not energy.size or energy.max() <= 0:
        return None
    audible = energy >= energy.max() * 10.0 ** (-ACTIVE_DB / 10.0)
    snr = 10.0 * np.log10(energy[audible] / np.maximum(error[audible], 1e-300))
    return ChunkSnr(float(np.mean(snr >= CHUNK_SNR_DB)), int(audible.sum()), float(snr.min()))


def _power_db(rows: np.ndarray) -> np.ndarray:
    """``[rows, frames, bins]`` power in dB of Hann-windowed frames (frames that fit: no padding)."""
    frames = 1 + (rows.shape[1] - N_FFT) // HOP
    index = np.arange(N_FFT)[None, :] + HOP * np.arange(frames)[:, None]
    window = np.hanning(N_FFT + 1)[:-1]
    spectrum = np.fft.rfft(rows[:, index] * window, axis=-1)
    return 10.0 * np.log10(np.abs(spectrum) ** 2 + 1e-300)


@dataclass
class SpectrumShare:
    """The log-power spectrum reading of one waveform output over the feeds."""

    #: bins within :data:`TOLERANCE_DB` of float's, of all bins read
    share: float
    bins: int
    #: the worst bin's error in dB (both sides floored at float's peak − :data:`RANGE_DB`)
    worst_db: float

    def describe(self) -> str:
        return (f"log-power spectrum ({N_FFT}-sample Hann frames, {RANGE_DB:g} dB below each row's peak): "
                f"{self.share:.3f} of {self.bins} bins within {TOLERANCE_DB:g} dB of float (worst {self.worst_db:.1f} dB)")


def spectrum_share(pairs: Sequence[tuple[np.ndarray, np.ndarray]]) -> SpectrumShare | None:
    """The reading of ``(float, candidate)`` output pairs (module docstring); None where no pair holds a frame.
    A candidate that is not finite counts its bins as off."""
    within = total = 0
    worst = 0.0
    for r, g in pairs:
        if r.shape != g.shape or r.ndim == 0 or r.shape[-1] < N_FFT:  # a scalar holds no frame
            continue
        ref, got = _power_db(_rows(r)), _power_db(_rows(np.nan_to_num(g, nan=0.0, posinf=0.0, neginf=0.0)))
        floor = ref.max(axis=(1, 2), keepdims=True) - RANGE_DB
        off = np.abs(np.maximum(ref, floor) - np.maximum(got, floor))
        if not np.isfinite(g).all():
            off = np.full_like(off, np.inf)
        within += int(np.count_nonzero(off <= TOLERANCE_DB))
        total += off.size
        worst = max(worst, float(off.max()) if off.size else 0.0)
    return SpectrumShare(within / total, total, worst) if total else None
