"""What every bench script shares: the repository root on ``sys.path`` and one way to open a session.

The test/bench harness (``testkit/``: the real models, rendered OCR lines, speech, MiniLM) lives at
the repository root, outside the installed package, so that the wheel never carries it. Scripts run
as ``python bench/<name>.py`` (``bench/`` is then first on the path); importing this module first puts
the root there too.

Sessions: every script opens its onnxruntime sessions through :func:`session`, a thin front of the
library's one session helper (:func:`onnxptq.sessions.open_session`), so a bench figure runs the
same session options the library does unless the script names a difference (threads, optimization
level, profiling).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from onnxptq.sessions import open_session  # noqa: E402


def session(model: Any, threads: int | None = None, *, optimization: str = "all", **options: Any) -> Any:
    """An ``InferenceSession`` on ``model`` (a ``ModelProto``, bytes or a path) on the CPU provider;
    other keyword arguments go to :func:`onnxptq.sessions.open_session`."""
    if isinstance(model, bytes):
        import onnx

        model = onnx.load_from_string(model)
    return open_session(model, threads=threads, optimization=optimization, **options)
