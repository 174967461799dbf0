"""Output-comparison metrics and the folder-against-folder comparison of ``onnxptq evaluate``.

Definitions follow the reference tool (spec §6.6) so figures can be compared with it:

* cosine similarity: both arrays flattened as float32, ``dot(a, b) / (|a| * |b|)``; we compute in
  float64 for a stable sum, and return 1.0 for two all-zero arrays and 0.0 when only one is zero
  (the reference divides by zero there);
* L2 loss: ``|a - b|_2``, the Frobenius norm of the float32 difference (a distance, not averaged);
* PSNR: ``mse = mean((ref - x)^2)``, ``peak = max(ref)`` (<= 0 -> 1e-10),
  ``20 log10(peak) - 10 log10(mse)``: the peak is the baseline's maximum, not 255. Identical
  arrays (``mse == 0``, all-zero ones included) give ``inf``, where the reference's
  ``mse -> 1e-10`` gave a number that depends on the peak (−100 dB for two zero arrays, lower than
  for any real difference). ``mean_psnr`` averages the finite values (``inf`` when all are).

Images (.png, .jpg, .jpeg) are read with Pillow as RGB uint8 (the reference reads BGR with OpenCV;
the channel order changes none of the three metrics). Pillow is the ``images`` extra and is imported
only when an image is met.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import OnnxptqError

log = logging.getLogger(__name__)

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
ARRAY_SUFFIXES = (".npy",)
SUFFIXES = ARRAY_SUFFIXES + IMAGE_SUFFIXES
_TINY = 1e-10


class EvaluateError(OnnxptqError, ValueError):
    """The two result folders cannot be compared (named file or folder at fault)."""


class MissingFileError(EvaluateError):
    """A baseline file has no counterpart in the quantized folder."""


class ShapeMismatchError(EvaluateError):
    """Two paired files hold arrays of different shapes."""


class EmptyFolderError(EvaluateError):
    """A folder holds no file of a supported type."""


def dot(a: np.ndarray, b: np.ndarray) -> float:
    """Σ a·b of two 1-D arrays in their (float64) dtype without BLAS: OpenBLAS's thread pool,
    spinning against onnxruntime's on a busy machine, took 8 ms of CPU (24 ms wall) for one
    265 k-element ``np.dot`` here against 0.2 ms for this loop, and a quantization's evaluation
    and accuracy floor take dozens (PP-OCRv4 rec A8W8: ~0.4 s of its ~5 s CPU; bench/RESULTS.md,
    issue 26 item 4). The figures move in the last digits only (another summation order)."""
    return float(np.einsum("i,i->", a, b))


def cosine_similarity(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine of the angle between the flattened arrays."""
    x = np.asarray(a, dtype=np.float32).ravel().astype(np.float64)
    y = np.asarray(b, dtype=np.float32).ravel().astype(np.float64)
    if x.shape != y.shape:
        raise ShapeMismatchError(f"cosine similarity of arrays with {x.size} and {y.size} elements")
    nx, ny = math.sqrt(dot(x, x)), math.sqrt(dot(y, y))
    if nx == 0 or ny == 0:
        return 1.0 if nx == ny else 0.0
    return float(dot(x, y) / (nx * ny))


def l2_loss(a: np.ndarray, b: np.ndarray) -> float:
    """Euclidean norm of the difference (float32 inputs, float64 sum)."""
    diff = np.asarray(a, dtype=np.float32).astype(np.float64) - np.asarray(b, dtype=np.float32).astype(np.float64)
    flat = diff.ravel()
    return math.sqrt(dot(flat, flat))


def psnr(reference: np.ndarray, test: np.ndarray) -> float:
    """PSNR in dB with the reference's maximum as the peak (spec §6.6)."""
    ref = np.asarray(reference, dtype=np.float32).astype(np.float64)
    x = np.asarray(test, dtype=np.float32).astype(np.float64)
    mse = float(np.mean((ref - x) ** 2)) if ref.size else 0.0
    peak = float(ref.max()) if ref.size else 0.0
    if mse == 0.0:
        return math.inf
    peak = peak if peak > 0 else _TINY
    return 20.0 * math.log10(peak) - 10.0 * math.log10(mse)


def pair_figures(reference: np.ndarray, test: np.ndarray) -> tuple[float, float, float, float] | None:
    """``(cosine, L2 loss, MSE, PSNR)`` of two C-contiguous float32 arrays of one shape, each figure
    bit for bit what :func:`cosine_similarity`, :func:`l2_loss`, ``compare.mse`` and :func:`psnr`
    return (the same float64 values summed in the same order), from ONE float64 copy of each array
    and one difference; ``None`` for any other pair (the four functions then run as before).

    Why: the four functions each convert both arrays to float64 again (eight copies and three
    differences of every output, per held-out feed). On a detector with two 256×192×192 heads
    (LORE's ``lore_detect``, 9.4 M elements each) that was ~9.5 CPU s of an A16W8 quantize whose
    float model costs 1.6 CPU s a feed (bench/RESULTS.md, issue 26, branch lore16). The peak
    memory is lower too: two float64 arrays at once (the difference goes into one copy) where
    the four functions held three."""
    a, b = np.asarray(reference), np.asarray(test)
    if (a.dtype != np.float32 or b.dtype != np.float32 or a.shape != b.shape
            or not (a.flags.c_contiguous and b.flags.c_contiguous)):
        return None
    x, y = a.astype(np.float64), b.astype(np.float64)
    fx, fy = x.ravel(), y.ravel()
    nx, ny = math.sqrt(dot(fx, fx)), math.sqrt(dot(fy, fy))
    if nx == 0 or ny == 0:
        cos = 1.0 if nx == ny else 0.0
    else:
        cos = float(dot(fx, fy) / (nx * ny))
    peak = float(x.max()) if x.size else 0.0
    diff = np.subtract(x, y, out=x)  # into x's copy: an array also for 0-d outputs (``x - y`` is a scalar there)
    del y, fx, fy
    flat = diff.ravel()
    l2 = math.sqrt(dot(flat, flat))
    np.square(diff, out=diff)  # ``diff ** 2`` in place: the same squares
    mse = float(np.mean(diff)) if diff.size else 0.0
    if mse == 0.0:
        return cos, l2, mse, math.inf
    peak = peak if peak > 0 else _TINY
    return cos, l2, mse, 20.0 * math.log10(peak) - 10.0 * math.log10(mse)


@dataclass
class PairMetrics:
    """The three metrics for one file pair."""

    name: str
    cosine: float
    l2: float
    psnr: float


@dataclass
class FolderComparison:
    """Per-pair metrics and their summaries (mean, and the worst value of each)."""

    pairs: list[PairMetrics] = field(default_factory=list)

    def _values(self, attr: str) -> list[float]:
        return [getattr(p, attr) for p in self.pairs]

    @property
    def mean_cosine(self) -> float:
        return float(np.mean(self._values("cosine")))

    @property
    def min_cosine(self) -> float:
        return float(np.min(self._values("cosine")))

    @property
    def mean_l2(self) -> float:
        return float(np.mean(self._values("l2")))

    @property
    def max_l2(self) -> float:
        return float(np.max(self._values("l2")))

    @property
    def mean_psnr(self) -> float:
        """Mean over the pairs that differ; identical pairs (inf) would make every mean inf."""
        values = np.asarray(self._values("psnr"), dtype=np.float64)
        finite = values[np.isfinite(values)]
        return float(np.mean(finite)) if finite.size else (math.inf if values.size else math.nan)

    @property
    def min_psnr(self) -> float:
        return float(np.min(self._values("psnr")))

    def summary(self) -> dict[str, float]:
        return {
            "pairs": len(self.pairs),
            "mean_cos_similarity": self.mean_cosine,
            "min_cos_similarity": self.min_cosine,
            "mean_l2_loss": self.mean_l2,
            "max_l2_loss": self.max_l2,
            "mean_psnr": self.mean_psnr,
            "min_psnr": self.min_psnr,
        }


def load_image(path: str | os.PathLike) -> np.ndarray:
    """Read an image as an RGB uint8 array [H, W, 3] with Pillow (the ``images`` extra)."""
    try:
        from PIL import Image
    except ImportError as exc:
        raise ImportError(
            f"comparing image files ({path}) needs Pillow: pip install onnxptq[images]"
        ) from exc
    try:
        with Image.open(path) as img:
            return np.asarray(img.convert("RGB"))
    except OSError as exc:
        raise EvaluateError(f"cannot read image {path}: {exc}") from exc


def load_result(path: str | os.PathLike) -> np.ndarray:
    """Read one result file (.npy array, or .png/.jpg/.jpeg image)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in IMAGE_SUFFIXES:
        return load_image(path)
    if suffix == ".npy":
        try:
            return np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise EvaluateError(f"cannot read array file {path}: {exc}") from exc
    raise EvaluateError(f"unsupported result file type {path} (expected one of {', '.join(SUFFIXES)})")


def compare_arrays(name: str, baseline: np.ndarray, quantized: np.ndarray) -> PairMetrics:
    """Metrics of one pair; shapes must match exactly (no silent broadcasting)."""
    if baseline.shape != quantized.shape:
        raise ShapeMismatchError(
            f"{name}: baseline shape {baseline.shape} differs from quantized shape {quantized.shape}"
        )
    return PairMetrics(name, cosine_similarity(baseline, quantized), l2_loss(baseline, quantized), psnr(baseline, quantized))


def _result_files(folder: Path, role: str) -> list[str]:
    if not folder.exists():
        raise FileNotFoundError(f"{role} results folder not found: {folder}")
    if not folder.is_dir():
        raise EvaluateError(f"{role} results path is not a folder: {folder}")
    return sorted(p.name for p in folder.iterdir() if p.is_file() and p.suffix.lower() in SUFFIXES)


def compare_folders(baseline_folder: str | os.PathLike, quantized_folder: str | os.PathLike) -> FolderComparison:
    """Compare every supported file of ``baseline_folder`` with the same-named file of ``quantized_folder``.

    Files are paired by name. A baseline file without a counterpart, a pair of different shapes and a
    folder without any supported file are errors naming the file or folder: a comparison that
    silently skipped files would report a better figure than the truth.
    """
    base, quant = Path(baseline_folder), Path(quantized_folder)
    names = _result_files(base, "baseline")
    quant_names = _result_files(quant, "quantized")
    if not names:
        raise EmptyFolderError(f"baseline results folder {base} holds no {'/'.join(SUFFIXES)} files")
    if not quant_names:
        raise EmptyFolderError(f"quantized results folder {quant} holds no {'/'.join(SUFFIXES)} files")
    missing = [n for n in names if n not in set(quant_names)]
    if missing:
        shown = ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
        raise MissingFileError(f"{len(missing)} baseline file(s) have no counterpart in {quant}: {shown}")
    extra = sorted(set(quant_names) - set(names))
    if extra:
        log.warning("%d file(s) in %s have no baseline and are not compared: %s", len(extra), quant, ", ".join(extra[:5]))
    result = FolderComparison()
    for name in names:
        result.pairs.append(compare_arrays(name, load_result(base / name), load_result(quant / name)))
    return result
