"""The CRNN + CTC captcha reader of ``captcha-whisperer==0.1.0``, and captchas to read.

The wheel is fetched once with pip (the mechanism of :mod:`.models`) and unpacked into the user
cache; its own preprocessing (``preprocess_bytes``: BGR, 0..255, 3×60×160) and greedy CTC decode
(``decode``) are imported from there, so the figures are the package's reads, not ours.
Images come from the ``captcha`` package (the ``test`` extra; its ``secrets`` draws replaced by a\nseeded generator while they are made), four characters long:
the float model reads about half of them right, which leaves a clear set to keep.
"""

from __future__ import annotations

import importlib
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Sequence

import numpy as np

from .models import cache_dir, unpack_wheel

WHEEL = "captcha-whisperer==0.1.0"
PACKAGE = "captcha_whisperer"
MODEL_MEMBER = f"{PACKAGE}/models/captcha_crnn.onnx"
ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def package_root() -> Path:
    """The folder holding the unpacked ``captcha_whisperer`` package (fetched if needed)."""
    root = cache_dir() / "captcha-whisperer-0.1.0"
    if not (root / MODEL_MEMBER).is_file():
        unpack_wheel(WHEEL, f"{PACKAGE}/", root, flat=False)
    return root


def model_path() -> Path:
    return package_root() / MODEL_MEMBER


def _module(name: str) -> ModuleType:
    root = str(package_root())
    if root not in sys.path:
        sys.path.insert(0, root)
    return importlib.import_module(f"{PACKAGE}.{name}")


@dataclass
class Captchas:
    texts: list[str]
    images: np.ndarray  # [N, 3, 60, 160] float32, as the package's preprocessing gives them


class _SeededSecrets:
    """The three ``secrets`` functions the ``captcha`` package draws from, from a seeded generator:
    captcha 0.7 takes every random choice (font, offsets, warps, noise, colours) from ``secrets``,
    which cannot be seeded, so the same seed would otherwise give different images each run."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)

    def randbelow(self, n: int) -> int:
        return self._rng.randrange(n)

    def randbits(self, k: int) -> int:
        return self._rng.getrandbits(k)

    def choice(self, seq: Sequence[Any]) -> Any:
        return self._rng.choice(seq)


def make_captchas(count: int, seed: int, length: int = 4) -> Captchas:
    """``count`` seeded captchas from the ``captcha`` package, preprocessed by the reader's own code."""
    from captcha import image as captcha_image

    preprocess = _module("preprocess")
    rng = random.Random(seed)
    original = captcha_image.secrets
    captcha_image.secrets = _SeededSecrets(seed)  # type: ignore[assignment]
    try:
        generator = captcha_image.ImageCaptcha(width=160, height=60)
        texts = ["".join(rng.choice(ALPHABET) for _ in range(length)) for _ in range(count)]
        images = np.concatenate([preprocess.preprocess_bytes(generator.generate(t).getvalue()) for t in texts])
    finally:
        captcha_image.secrets = original
    return Captchas(texts, images.astype(np.float32))


def read(session: Any, images: np.ndarray, batch: int = 64) -> list[str]:
    """The package's greedy CTC reads of ``images`` through an onnxruntime ``session``."""
    decode = _module("recognizer").decode
    name = session.get_inputs()[0].name
    texts: list[str] = []
    for start in range(0, len(images), batch):
        logits = session.run(None, {name: images[start:start + batch]})[0]
        texts += decode(logits)[0]
    return texts


def kept_fraction(float_reads: Sequence[str], quant_reads: Sequence[str], truth: Sequence[str]) -> tuple[float, int]:
    """Of the captchas the float model reads right, the fraction still read right; and how many."""
    right = [i for i, (f, t) in enumerate(zip(float_reads, truth)) if f == t]
    if not right:
        raise ValueError("the float model read no captcha right: nothing to keep")
    return sum(quant_reads[i] == truth[i] for i in right) / len(right), len(right)
