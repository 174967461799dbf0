"""A re-readable, counting stream of feeds over any calibration source: test support.

The pipeline reads its data once; tests use this to check that each source kind can (folders,
files, arrays, ``get_next()`` readers with ``rewind()``) or cannot (one-shot readers, iterators)
be read again, and what a pass counted. It lives with the tests because nothing in the library
needs a second pass.
"""

from __future__ import annotations

from typing import Any, Iterator

from onnxptq.calibration.readers import Feed, InputsLike, OneShotSourceError, _as_inputs, _iterate, _open


class CountingReader:
    """A calibration source as a re-readable stream of feeds that counts what went through.

    Iterate it (``for feed in reader``) or call ``get_next()`` as with an onnxruntime reader.
    ``feeds`` and ``samples`` count the current pass, ``passes`` the passes started. A new pass
    (``iter()`` again, or ``reset()``) is allowed only where the source can be re-read (folders,
    files, arrays, dicts, lists, and ``get_next()`` readers with ``rewind()``); for a one-shot
    reader or an iterator it raises :class:`OneShotSourceError` — the pipeline passes over such
    data once, and algorithms that need a second pass must ask for re-readable data.
    """

    def __init__(self, data: Any, model_inputs: InputsLike, batch_size: int | None = None) -> None:
        self.inputs = _as_inputs(model_inputs)
        self.batch_size = batch_size
        self._source = _open(data, self.inputs)
        self.passes = 0
        self.feeds = 0
        self.samples = 0
        self._current: Iterator[Feed] | None = None

    @property
    def reiterable(self) -> bool:
        """Whether the source can be read more than once."""
        return self._source.reiterable

    @property
    def description(self) -> str:
        return self._source.desc

    def _start(self) -> Iterator[Feed]:
        if self.passes > 0:
            if not self._source.reiterable:
                raise OneShotSourceError(
                    f"{self._source.desc} can be read only once (a get_next() reader without rewind(), or an "
                    "iterator); pass a folder, an .npz file, an array or a list of feeds where several passes "
                    "are needed"
                )
            self._source.rewind()
        self.passes += 1
        self.feeds = 0
        self.samples = 0
        self._current = self._count(_iterate(self._source, self.inputs, self.batch_size))
        return self._current

    def _count(self, feeds: Iterator[Feed]) -> Iterator[Feed]:
        for feed in feeds:
            self.feeds += 1
            first = next(iter(feed.values()), None)
            self.samples += int(first.shape[0]) if first is not None and first.ndim else 1
            yield feed

    def __iter__(self) -> Iterator[Feed]:
        return self._start()

    def reset(self) -> None:
        """Start a new pass at the next ``get_next()``; raises for one-shot sources."""
        if self.passes > 0 and not self._source.reiterable:
            self._start()  # raises OneShotSourceError
        self._current = None

    def get_next(self) -> Feed | None:
        """The next feed, or None at the end of the pass (onnxruntime's reader protocol)."""
        if self._current is None:
            self._start()
        assert self._current is not None
        return next(self._current, None)
