"""The settings of a weight-only quantization, checked once, and the named presets.

Every bad value raises :class:`WeightOnlyOptionError` naming the option, before any work.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..errors import OnnxptqError
from ..formats.int_blocks import SUPPORTED_BITS, SUPPORTED_BLOCK_SIZES, BlockFormat

METHODS = ("rtn", "hqq", "gptq", "awq")
NEEDS_DATA = ("gptq", "awq")
FORMS = ("dq", "dq-strict", "matmulnbits")
LM_HEAD = ("int8", "int4", "float")


class WeightOnlyOptionError(OnnxptqError, ValueError):
    """A weight-only option has a value that cannot work."""


@dataclass(frozen=True)
class WeightOnlyOptions:
    """What :func:`onnxptq.quantize_weights` does. See its docstring for each field."""

    bits: int = 4
    block_size: int = 128
    symmetric: bool = True
    method: str = "rtn"
    lm_head: str = "int8"
    embedding: bool = False
    form: str = "dq"
    mixed: float | None = None
    accuracy_level: int | None = None
    act_order: bool = True
    damp: float = 0.01
    awq_grid: int = 20
    calib_feeds: int | None = None
    calib_memory: int | None = None
    exclude: tuple[str, ...] = ()
    progress: bool = True

    def check(self, has_data: bool) -> "WeightOnlyOptions":
        if isinstance(self.bits, bool) or self.bits not in SUPPORTED_BITS:
            raise WeightOnlyOptionError(f"bits={self.bits!r} is not supported; choose one of {', '.join(map(str, SUPPORTED_BITS))} "
                                        "(2 and 3 are stored in 4-bit integers)")
        if isinstance(self.block_size, bool) or self.block_size not in SUPPORTED_BLOCK_SIZES:
            raise WeightOnlyOptionError(f"block_size={self.block_size!r} is not supported; choose a power of two from 16 to 256 "
                                        f"({', '.join(map(str, SUPPORTED_BLOCK_SIZES))}); any K works, the last block is padded")
        if self.method not in METHODS:
            raise WeightOnlyOptionError(f"method={self.method!r} is not one of {', '.join(METHODS)}")
        if self.method in NEEDS_DATA and not has_data:
            raise WeightOnlyOptionError(f"method={self.method!r} needs calibration data: pass data=... (feed dicts of token "
                                        "ids, a reader with get_next(), or a folder/.npz as quantize() takes)")
        if self.mixed is not None and not (isinstance(self.mixed, (int, float)) and 0.0 <= float(self.mixed) <= 1.0):
            raise WeightOnlyOptionError(f"mixed={self.mixed!r} must be a ratio in [0, 1] (the share of layers kept at 8 bits)")
        if self.form not in FORMS:
            raise WeightOnlyOptionError(f"form={self.form!r} is not one of {', '.join(FORMS)}")
        if self.lm_head not in LM_HEAD:
            raise WeightOnlyOptionError(f"lm_head={self.lm_head!r} is not one of {', '.join(LM_HEAD)}")
        if self.accuracy_level is not None and self.accuracy_level not in (0, 1, 2, 3, 4):
            raise WeightOnlyOptionError(f"accuracy_level={self.accuracy_level!r} must be 0..4 (MatMulNBits' accuracy_level)")
        if not (0.0 < float(self.damp) < 1.0):
            raise WeightOnlyOptionError(f"damp={self.damp!r} must be in (0, 1) (a fraction of the Hessian's mean diagonal)")
        if self.calib_feeds is not None and self.calib_feeds < 1:
            raise WeightOnlyOptionError(f"calib_feeds={self.calib_feeds!r} must be >= 1")
        if self.calib_memory is not None and (isinstance(self.calib_memory, bool) or not isinstance(self.calib_memory, int)
                                              or self.calib_memory < 1):
            raise WeightOnlyOptionError(f"calib_memory={self.calib_memory!r} must be a positive number of bytes")
        return self

    @property
    def fmt(self) -> BlockFormat:
        return BlockFormat(self.bits, self.block_size, self.symmetric)

    def lm_head_fmt(self) -> BlockFormat | None:
        """The lm_head's format (its own rule), None for float."""
        if self.lm_head == "float":
            return None
        return BlockFormat(8 if self.lm_head == "int8" else 4, self.block_size, self.symmetric)

    def replace(self, **changes: Any) -> "WeightOnlyOptions":
        return replace(self, **changes)


#: Named settings for ``onnxptq quantize-weights --preset`` and ``quantize_weights(preset=...)``.
PRESETS: dict[str, dict[str, Any]] = {
    "W4A16": {"bits": 4, "block_size": 128, "symmetric": True, "method": "rtn"},
    "W4A16_HQQ": {"bits": 4, "block_size": 128, "symmetric": True, "method": "hqq"},
    "W4A16_GPTQ": {"bits": 4, "block_size": 128, "symmetric": True, "method": "gptq"},
    "W4A16_AWQ": {"bits": 4, "block_size": 128, "symmetric": True, "method": "awq"},
    "W8A16": {"bits": 8, "block_size": 128, "symmetric": True, "method": "rtn"},
    "W3A16_GPTQ": {"bits": 3, "block_size": 64, "symmetric": True, "method": "gptq"},
}


def preset(name: str) -> dict[str, Any]:
    """The settings of preset ``name`` (case-insensitive)."""
    key = str(name).upper()
    if key not in PRESETS:
        raise WeightOnlyOptionError(f"unknown weight-only preset {name!r}; choose one of {', '.join(PRESETS)}")
    return dict(PRESETS[key])
