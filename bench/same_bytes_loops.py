"""sha256 of the delivered file for the zoo's Loop models: the byte-identity check of a change that touches
Loop/If handling (hoist_loop_constants, exact_cast_chains, exact_int_weights), which the lead's cls-model check
(no control flow) cannot see. Run it before and after the change and diff the lines.

    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice python bench/same_bytes_loops.py \
        --models mk8dx,mk8dx:fp16,chars2vec,nakdimon --presets A8W8,A16W8

A model written ``NAME:fp16`` keeps its float16 source float16 inside (``QuantConfig.widen_fp16=False``: the Loop
bodies then hold the weight decodes the hoist moves). Feeds are synthetic (seeded): only the bytes are compared.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import newmodels  # noqa: E402  (the rounds' source folders)

import onnxptq  # noqa: E402
from onnxptq.config.presets import get_preset  # noqa: E402


def _models() -> dict[str, tuple[str, list[dict[str, np.ndarray]]]]:
    rng = np.random.default_rng(0)
    return {
        "mk8dx": (str(newmodels.MK8DX / "models/number_recognition_model.onnx"),
                  [{"image": rng.random((1, 40, 30, 1), dtype=np.float32)} for _ in range(8)]),
        "chars2vec": (str(newmodels.CHARS2VEC / "model.onnx"),
                      [{"lstm_input": np.eye(59, dtype=np.float32)[rng.integers(0, 59, 7)][None]} for _ in range(8)]),
        "nakdimon": (str(newmodels.NAKDIMON), [{"input": rng.integers(1, 40, (1, 24)).astype(np.int32)} for _ in range(8)]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mk8dx,mk8dx:fp16,chars2vec,nakdimon")
    parser.add_argument("--presets", default="A8W8,A16W8")
    args = parser.parse_args()
    models = _models()
    for spec in args.models.split(","):
        name, _, variant = spec.partition(":")
        path, feeds = models[name]
        for preset in args.presets.split(","):
            cfg = get_preset(preset)
            if variant == "fp16":
                cfg = dataclasses.replace(cfg, widen_fp16=False)
            model = onnxptq.quantize(path, cfg, data=feeds).model
            print(spec, preset, hashlib.sha256(model.SerializeToString()).hexdigest()[:16], flush=True)


if __name__ == "__main__":
    main()
