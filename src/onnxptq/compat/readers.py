"""``RandomDataReader``: the reference tool's one-sample random calibration data (``UseRandomData``).

Random data calibrates nothing meaningful; it exists so a pipeline can be tried on a model before
real data is at hand. We reproduce the reference tool's recipe (spec §1.7) so ranges come out the
same: ``np.random.seed(42)``, one uniform [0, 1) sample per input, dynamic dimensions filled with
fixed guesses, optional per-input shapes and value ranges.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Mapping, Sequence

import numpy as np
import onnx

from ..calibration.readers import ModelInput, ModelInputs
from ..config.schema import ConfigError, suggest

log = logging.getLogger(__name__)

__all__ = ["RandomDataReader"]


def _fill_dims(inp: ModelInput) -> list[int]:
    """The reference tool's guesses: dim0 -> 1; rank-2 dim1 -> 16; rank-4 dims 1..3 -> 3, 32, 32; else 1."""
    shape = list(inp.shape or ())
    guesses_4d = {1: 3, 2: 32, 3: 32}
    out = []
    for i, d in enumerate(shape):
        if d is not None:
            out.append(int(d))
        elif i == 0:
            out.append(1)
        elif len(shape) == 2 and i == 1:
            out.append(16)
        elif len(shape) == 4:
            out.append(guesses_4d[i])
        else:
            out.append(1)
    return out


class RandomDataReader:
    """A ``get_next()`` reader yielding exactly one random feed, then None.

    ``input_shape`` maps input names to shapes (``RandomDataReaderInputShape``);
    ``input_data_range`` maps input names to ``[low, high]`` (``RandomDataReaderInputDataRange``):
    integers are drawn from ``randint(low, high + 1)``, floats from ``uniform(low, high)``.
    Unknown input names raise ValueError with the nearest name.
    """

    def __init__(
        self,
        model: onnx.ModelProto | str | os.PathLike,
        input_shape: Mapping[str, Sequence[int]] | None = None,
        input_data_range: Mapping[str, Sequence[float]] | None = None,
    ) -> None:
        self.inputs = ModelInputs.from_model(model)
        names = self.inputs.names
        for what, given in (("RandomDataReaderInputShape", input_shape), ("RandomDataReaderInputDataRange", input_data_range)):
            for name in given or {}:
                if name not in names:
                    raise ConfigError(f"{what}: model has no input {name!r}{suggest(name, names)}; inputs: {', '.join(names)}")
        self._shapes = dict(input_shape or {})
        self._ranges = dict(input_data_range or {})
        self._done = False

    def _sample(self, inp: ModelInput) -> np.ndarray:
        shape = [int(d) for d in self._shapes[inp.name]] if inp.name in self._shapes else _fill_dims(inp)
        dtype = inp.dtype if inp.dtype is not None else np.dtype(np.float32)
        if dtype.kind in "OSU":
            return np.full(shape, "", dtype=object)
        if inp.name in self._ranges:
            low, high = self._ranges[inp.name]
            if dtype.kind in "iub":
                return np.random.randint(int(low), int(high) + 1, size=shape).astype(dtype)
            return np.random.uniform(low, high, size=shape).astype(dtype)
        return np.random.random(shape).astype(dtype)

    def get_next(self) -> dict[str, Any] | None:
        if self._done:
            return None
        self._done = True
        np.random.seed(42)
        feed = {inp.name: self._sample(inp) for inp in self.inputs}
        log.warning("calibrating on one random sample (UseRandomData): ranges will not reflect real data")
        return feed

    def rewind(self) -> None:
        """Start again (the pipeline's convention for readers read more than once)."""
        self._done = False
