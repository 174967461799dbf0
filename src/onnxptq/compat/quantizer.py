"""``ModelQuantizer``: the reference tool's entry point, running our pipeline.

``ModelQuantizer(Config(global_quant_config=...)).quantize_model(in, out, reader)`` translates the
legacy config (:func:`onnxptq.compat.options.parse`) and calls :func:`onnxptq.api.quantize`. The
translation runs first, so an unknown or unbuilt option fails before any model is read.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import warnings
from pathlib import Path
from typing import Any, Iterator

import onnx

from ..config.schema import ConfigError, QuantConfig
from .legacy import Config
from .options import RunOptions, parse

log = logging.getLogger(__name__)

__all__ = ["ModelQuantizer"]


@contextlib.contextmanager
def _run_scope(run: RunOptions) -> Iterator[None]:
    """Debug logging and warning filters for the duration of one call only.

    The reference tool silences UserWarning/ResourceWarning process-wide when ``ignore_warnings``
    is set; we restore the filters on return so the caller's program is left as it was.
    """
    logger = logging.getLogger("onnxptq")
    level = logger.level
    with warnings.catch_warnings():
        if run.ignore_warnings:
            warnings.simplefilter("ignore", UserWarning)
            warnings.simplefilter("ignore", ResourceWarning)
        if run.debug_mode:
            logger.setLevel(logging.DEBUG)
        try:
            yield
        finally:
            logger.setLevel(level)


def _summary(model: onnx.ModelProto) -> str:
    """Op-type counts of the quantized graph (the reference tool's print_summary table)."""
    counts = collections.Counter(f"{n.domain + '::' if n.domain else ''}{n.op_type}" for n in model.graph.node)
    width = max((len(k) for k in counts), default=7) + 2
    lines = [f"{'Op type':<{width}}Count"] + [f"{k:<{width}}{v}" for k, v in sorted(counts.items())]
    return "\n".join(lines)


class ModelQuantizer:
    """Quantize ONNX models with a legacy :class:`Config` (or our own :class:`QuantConfig`)."""

    def __init__(self, config: Config | QuantConfig) -> None:
        if not isinstance(config, (Config, QuantConfig)):
            raise ValueError(f"ModelQuantizer expects a Config (or an onnxptq QuantConfig), got {type(config).__name__}")
        self.config = config
        if isinstance(config, Config):
            try:
                parse(config.global_quant_config)  # fail fast on unknown keys and bad values
            except NotImplementedError as exc:
                # Raised again by quantize_model: building a quantizer for such a config is not an error yet.
                log.warning("this configuration cannot be quantized yet: %s", exc)

    def _translate(self) -> tuple[QuantConfig, RunOptions]:
        if isinstance(self.config, QuantConfig):
            return self.config, RunOptions()
        return parse(self.config.global_quant_config)

    def quantize_model(
        self,
        model_input: str | os.PathLike | onnx.ModelProto,
        model_output: str | os.PathLike | None = None,
        calibration_data_reader: Any = None,
        calibration_data_path: str | os.PathLike | None = None,
        algorithms: list[Any] | None = None,
    ) -> onnx.ModelProto | None:
        """Quantize ``model_input``; save to ``model_output`` and return None, or return the ModelProto.

        Calibration data comes from ``calibration_data_reader`` (anything with ``get_next()``), else
        ``calibration_data_path`` (a folder of .npy/.npz files), else — only with
        ``extra_options['UseRandomData']`` — one random sample. ``algorithms`` (the reference tool's
        algorithm config objects) are not implemented.
        """
        if algorithms:
            names = ", ".join(type(a).__name__ for a in algorithms)
            raise NotImplementedError(f"quantize_model argument 'algorithms' ({names}) is not implemented yet")
        config, run = self._translate()
        if run.weight_only is not None:
            return self._quantize_weights(model_input, model_output, run.weight_only,
                                          calibration_data_reader if calibration_data_reader is not None else calibration_data_path)

        if isinstance(model_input, (str, os.PathLike)):
            if not Path(model_input).exists():
                raise FileNotFoundError(f"model_input not found: {model_input}")
        elif not isinstance(model_input, onnx.ModelProto):
            raise ValueError(f"model_input must be a path or an onnx.ModelProto, not {type(model_input).__name__}")
        if run.crypto_mode and (not isinstance(model_input, onnx.ModelProto) or model_output is not None):
            raise ConfigError("crypto_mode needs model_input as an onnx.ModelProto and model_output=None (nothing is written)")
        if model_output is not None:
            from ..graph import io

            io.check_output_path(model_output, (model_input,))

        data: Any
        if calibration_data_reader is not None:
            data = calibration_data_reader
        elif calibration_data_path is not None:
            if not Path(calibration_data_path).exists():
                raise FileNotFoundError(f"calibration_data_path not found: {calibration_data_path}")
            data = calibration_data_path
        elif run.use_random_data:
            from .readers import RandomDataReader

            data = RandomDataReader(model_input, run.random_input_shape, run.random_input_range)
        else:
            raise ValueError(
                "quantize_model needs calibration data: pass calibration_data_reader or calibration_data_path "
                "(or set extra_options['UseRandomData']=True to try the pipeline on one random sample)"
            )

        from .. import api

        save_here = model_output is not None and run.use_external_data_format
        with _run_scope(run):
            result = api.quantize(model_input, config, data, None if save_here else model_output)
            if save_here:
                from ..graph import io

                io.save_model(result.model, model_output, external_data=True)
            if run.print_summary:
                log.info("quantized model:\n%s", _summary(result.model))
        return result.model if model_output is None else None

    def _quantize_weights(self, model_input: Any, model_output: Any, kwargs: dict[str, Any], data: Any) -> onnx.ModelProto | None:
        """``UseMatMulNBits`` / ``UseGPTQ``: the weight-only pipeline (see :mod:`onnxptq.compat.weight_only`)."""
        from ..weight_only.api import quantize_weights

        if kwargs["method"] not in ("gptq", "awq"):
            data = None  # the reference skips calibration for RTN/HQQ MatMulNBits
        result = quantize_weights(model_input, model_output, data=data, **kwargs)
        return result.model if model_output is None else None

