"""The library's warnings as a bench row records them: what a user of the quantizer would have seen.

A row says "below floor, warned" or "below floor, SILENT" by whether the library warned during its
quantization, so every bench that writes such rows reads the warnings the same way.
"""

from __future__ import annotations

import logging

__all__ = ["capture_warnings"]


def capture_warnings(limit: int = 300) -> list[str]:
    """A list that fills with every WARNING-or-above message the ``onnxptq`` loggers emit from now
    on, each cut to ``limit`` characters (one handler on the package's logger, for the process; the
    caller clears the list between jobs)."""
    messages: list[str] = []

    class _Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage()[:limit])

    logging.getLogger("onnxptq").addHandler(_Capture(logging.WARNING))
    return messages
