"""The documented error classes: every bad input a user can give ends in one of these.

Why a module of its own: the CLI prints any :class:`OnnxptqError` as one line and exits 2, the
fuzz tests assert that nothing else escapes, and ``docs/errors.md`` lists which input raises which.
Each class also derives from the builtin a caller would have caught before it existed
(``ValueError``, ``FileNotFoundError``, ``PermissionError``, ...), so no ``except`` clause written
against earlier releases stops matching.

This module imports nothing from the package, so every other module can import it.
"""

from __future__ import annotations


class OnnxptqError(Exception):
    """Base of every error onnxptq raises on purpose for input it cannot use."""


class UsageError(OnnxptqError, ValueError):
    """An option or argument with a value that can never work (``--calib-size 0``, a bad regex)."""


class ConfigError(UsageError):
    """A configuration value is invalid; the message names the field and the valid choices."""


class UnknownNameError(UsageError):
    """A node, tensor or op type named in the configuration does not exist in the model."""


class OutputPathError(OnnxptqError, ValueError):
    """An output path that cannot be written as given; decided before any work is done."""


class OutputCollisionError(OutputPathError):
    """An output would replace one of the command's inputs, or another of its outputs."""


class OutputFolderMissingError(OutputPathError, FileNotFoundError):
    """The folder an output goes into does not exist."""


class OutputNotWritableError(OutputPathError, PermissionError):
    """The folder an output goes into is not writable."""


class OutputIsFolderError(OutputPathError, IsADirectoryError):
    """An output path names a folder (or ends with a path separator) where a file is written."""


class SaveError(OnnxptqError, OSError):
    """Writing an output failed (disk full, permissions changed, killed); nothing partial is left."""


class InputNotFoundError(OnnxptqError, FileNotFoundError):
    """A file the command reads does not exist."""


class ModelRuntimeError(OnnxptqError, ValueError):
    """onnxruntime refuses to load or to run the (float) model: a model the ONNX checker accepts can
    still hold shapes that do not fit together, or an opset onnxruntime does not implement."""


class NonFiniteStatisticsError(OnnxptqError, ValueError):
    """A tensor held values on the calibration feeds but none of them finite (all NaN/Inf): no range can be
    computed for it. NaN in part of a tensor (padding, masks) is left out and calibrates to the finite range."""


class ScaleOverflowError(OnnxptqError, ValueError):
    """A tensor's values are too large (or not finite) for any float32 scale: a weight near the
    float32 limit, or an int32 bias whose scale (activation scale × weight scale) overflows."""


class RuntimeOpsetError(OnnxptqError, ValueError):
    """The model's opset is newer than the installed onnxruntime runs quantization ops at."""


class CalibrationMissingError(OnnxptqError, RuntimeError):
    """A planned activation has no statistics: calibration was skipped, or the data never computed
    the tensor (a branch no sample took)."""


class NothingToQuantizeError(OnnxptqError, ValueError):
    """The configuration selects no tensor of the model: no node of an op type it quantizes, or the
    plan's rules keep every candidate float (a log-domain front end whose only dot products read the
    Log's linear input). Raised before any calibration run; the message names the file and the rules'
    reasons. Here, beside the other documented errors, so a caller catches it by name from
    ``onnxptq.errors`` (``onnxptq.pipeline.calibrate`` re-exports it)."""


class AccuracyError(OnnxptqError, ValueError):
    """``strict=True``: the quantized model breaks its format family's accuracy floor on the held-out
    samples (algorithms/repair.py, docs/accuracy.md). The message names the outputs, their metric
    and the floor; ``verdict`` holds the figures. Nothing is written."""

    def __init__(self, message: str, verdict: object = None) -> None:
        super().__init__(message)
        self.verdict = verdict


#: What a caller (the CLI, the fuzz tests) may expect from any bad input; anything else is a bug.
DOCUMENTED_ERRORS: tuple[type[BaseException], ...] = (OnnxptqError,)
