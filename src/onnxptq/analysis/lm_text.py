"""Text to token ids for the language-model evaluation: the tokenizer from the model's folder.

Why apart from :mod:`onnxptq.analysis.perplexity`: reading files and the optional ``tokenizers``
dependency stay here, so the perplexity computation stays pure and testable without either.

The tokenizer is the Hugging Face ``tokenizer.json`` (what ``save_pretrained`` and
onnxruntime-genai's builder put next to the model), loaded with the ``tokenizers`` package (the
``llm`` extra). Text is encoded without special tokens: a perplexity figure then depends only on
the text, the same for every model compared.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..errors import InputNotFoundError, UsageError

__all__ = ["MissingExtraError", "encode_text", "load_tokenizer", "tokenizer_path"]

TOKENIZER_FILE = "tokenizer.json"


class MissingExtraError(UsageError, ImportError):
    """An optional dependency the command needs is not installed; the message names the extra."""


def tokenizer_path(model: str | os.PathLike, tokenizer: str | os.PathLike | None = None) -> Path:
    """The ``tokenizer.json`` to use: ``tokenizer`` (a file or a folder holding one) or the model's folder."""
    where = Path(tokenizer) if tokenizer is not None else Path(model).parent
    path = where / TOKENIZER_FILE if where.is_dir() else where
    if not path.is_file():
        hint = "" if tokenizer is not None else " (the model's folder; name another with --tokenizer)"
        raise InputNotFoundError(f"no tokenizer file: {path} does not exist{hint}")
    return path


def load_tokenizer(path: str | os.PathLike):
    """A ``tokenizers.Tokenizer`` from ``path``; a clear error when the ``llm`` extra is missing."""
    try:
        from tokenizers import Tokenizer
    except ImportError as exc:
        raise MissingExtraError("reading tokenizer.json needs the 'tokenizers' package: "
                                "pip install 'onnxptq[llm]'") from exc
    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises its own Exception subclass for a bad file
        raise UsageError(f"cannot read the tokenizer {path}: {exc}") from exc


def encode_text(tokenizer, text_file: str | os.PathLike) -> np.ndarray:
    """The ids of ``text_file`` (UTF-8) as int64, without special tokens."""
    path = Path(text_file)
    if not path.is_file():
        raise InputNotFoundError(f"text file {path} does not exist")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"text file {path} is not UTF-8: {exc}") from exc
    if not text.strip():
        raise UsageError(f"text file {path} is empty")
    return np.asarray(tokenizer.encode(text, add_special_tokens=False).ids, dtype=np.int64)
