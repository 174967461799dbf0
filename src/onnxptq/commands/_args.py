"""argparse value types shared by the commands: bad values become usage errors (exit 2, one line)."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """An integer >= 1; 0 or a negative count can never work, so argparse refuses it up front."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value
