"""Run a model over a data source and save every output as ``.npy``: the helper that the BF16
user document writes by hand, so float and converted models can be compared with ``evaluate``.

Files are named by feed index (``00000.npy``); a model with several outputs gets one file per
output, ``00000_<output>.npy``. Both runs of a comparison therefore produce the same names, which
is how ``evaluate`` pairs them.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)


def _safe(name: str) -> str:
    """An output name usable in a file name (Paddle names hold '/' and '.')."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._") or "output"


def file_suffixes(names: list[str]) -> list[str]:
    """The file-name suffix of each output: ``""`` for a single output, ``_<safe name>`` otherwise.

    Why: ``a/b`` and ``a_b`` (or names differing only in case, on case-insensitive file systems)
    would map to one file and overwrite each other; those get their output index too
    (``_0_a_b``, ``_1_a_b``), the same in every run of the same model, so ``evaluate`` still pairs them.
    """
    if len(names) == 1:
        return [""]
    safe = [_safe(n) for n in names]
    counts: dict[str, int] = {}
    for s in safe:
        counts[s.lower()] = counts.get(s.lower(), 0) + 1
    suffixes = []
    for i, (name, s) in enumerate(zip(names, safe)):
        if counts[s.lower()] > 1:
            log.warning("output %r maps to the same file name as another output; its files are named _%d_%s", name, i, s)
            suffixes.append(f"_{i}_{s}")
        else:
            suffixes.append(f"_{s}")
    return suffixes


def run_and_save(
    model_path: str | os.PathLike,
    data: Any,
    output_folder: str | os.PathLike,
    *,
    batch_size: int | None = None,
    threads: int | None = None,
    overwrite: bool = False,
) -> list[Path]:
    """Run ``model_path`` on every feed of ``data`` and write the outputs to ``output_folder``.

    ``data`` is anything :func:`onnxptq.calibration.readers.as_feed_iterator` reads (a ``.npz``
    keyed by input name, a folder of ``.npy``/``.npz``, arrays, a reader). The folder is created;
    one that already holds ``.npy`` files is refused unless ``overwrite``, because results of two
    runs mixed in one folder would be compared as if they were one.
    """
    from ..calibration.readers import ModelInputs, as_feed_iterator
    from ..sessions import open_session
    from ..graph.io import load_model

    model_path = Path(model_path)
    folder = Path(output_folder)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"output path is a file, not a folder: {folder}")
    if folder.is_dir() and any(folder.glob("*.npy")) and not overwrite:
        raise ValueError(f"output folder {folder} already holds .npy files; use an empty folder or --overwrite")
    model = load_model(model_path, load_external_data=False)
    inputs = ModelInputs.from_model(model)
    session = open_session(model_path, threads=threads, log_severity=2)
    names = [o.name for o in session.get_outputs()]
    suffixes = file_suffixes(names)
    folder.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for index, feed in enumerate(as_feed_iterator(data, inputs, batch_size)):
        outputs = session.run(None, feed)
        for suffix, value in zip(suffixes, outputs):
            path = folder / f"{index:05d}{suffix}.npy"
            np.save(path, np.asarray(value))
            written.append(path)
    log.info("wrote %d output files to %s", len(written), folder)
    return written
