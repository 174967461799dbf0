"""A small Llama with real structure and fitted weights, written to ONNX by hand, cached.

Why by hand: torch 2.13's exporters fail on transformers 4.57's Llama offline (the dynamo exporter
needs onnxscript, which is not installed; the TorchScript one stops with ``unordered_map::at``).
So a ``transformers`` ``LlamaForCausalLM`` (2 layers, hidden 96, 4 heads over 2 KV heads, tied
embeddings, byte vocabulary) is fitted for a few hundred steps on licence text from
``/usr/share/common-licenses`` — its outputs are not random — and its weights are written into an
ONNX graph with the structure exporters produce: decomposed RMSNorm (Pow/ReduceMean/Sqrt/Div/Mul),
rotary embeddings, GQA by Gather of KV heads, causal mask, SwiGLU, ``MatMul`` weights stored
``[in, out]`` (``down_proj`` behind a ``Transpose`` as some exporters leave it) and the lm_head as
``MatMul(h, Transpose(embedding))``. The build checks the ONNX logits against torch's (5e-5).

Two variants: ``llama.onnx`` (``input_ids`` → ``logits``) and ``llama_kv.onnx`` with
``past_key_values.{i}.key/value`` inputs and ``present.{i}.key/value`` outputs, as onnxruntime-genai's
builder writes them. Cached under ``~/.cache/onnxptq/llama-test`` keyed by :data:`BUILD_VERSION` and the sizes; the
first build fits for about 2.5 CPU-minutes.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

VOCAB, HIDDEN, INTER, LAYERS, HEADS, KV_HEADS = 256, 96, 256, 2, 4, 2
HEAD_DIM = HIDDEN // HEADS
EPS = 1e-5
THETA = 10000.0
TRAIN_TEXT = "/usr/share/common-licenses/GPL-3"
CALIB_TEXT = "/usr/share/common-licenses/GPL-2"
EVAL_TEXT = "/usr/share/common-licenses/Apache-2.0"


def text_tokens(path: str) -> np.ndarray:
    """Bytes of a text file as int64 token ids (the model's vocabulary is bytes)."""
    return np.frombuffer(Path(path).read_bytes(), dtype=np.uint8).astype(np.int64)


def token_feeds(path: str, count: int, length: int, start: int = 0) -> list[dict[str, np.ndarray]]:
    """``count`` feed dicts of ``length`` consecutive tokens from ``path`` (batch 1)."""
    ids = text_tokens(path)
    return [{"input_ids": ids[start + i * length: start + (i + 1) * length][None]} for i in range(count)]


#: Bump when the fit or the graph changes: the cache key (edits elsewhere in this file keep the cache).
BUILD_VERSION = 1


def _cache_dir() -> Path:
    key = repr((BUILD_VERSION, VOCAB, HIDDEN, INTER, LAYERS, HEADS, KV_HEADS, EPS, THETA, TRAIN_TEXT))
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    root = Path(os.environ.get("ONNXPTQ_CACHE", Path.home() / ".cache" / "onnxptq"))
    return root / "llama-test" / digest


def _fit() -> dict[str, np.ndarray]:
    """Fit the torch Llama on the training text; its weights as float32 arrays (deterministic)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(min(2, threads))
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=INTER, num_hidden_layers=LAYERS,
                      num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, tie_word_embeddings=True,
                      max_position_embeddings=512, rms_norm_eps=EPS, rope_theta=THETA, attn_implementation="eager")
    model = LlamaForCausalLM(cfg)
    ids = torch.from_numpy(text_tokens(TRAIN_TEXT))
    opt = torch.optim.AdamW(model.parameters(), lr=4e-3, weight_decay=0.0)
    gen = torch.Generator().manual_seed(0)
    seq, batch, steps = 96, 16, 240
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=4e-3, total_steps=steps, pct_start=0.1)
    model.train()
    for _ in range(steps):
        starts = torch.randint(0, len(ids) - seq - 1, (batch,), generator=gen)
        x = torch.stack([ids[s: s + seq] for s in starts.tolist()])
        loss = model(input_ids=x, labels=x).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    model.eval()
    torch.set_num_threads(threads)
    return {k: v.detach().float().numpy().copy() for k, v in model.state_dict().items()}


def _torch_logits(weights: dict[str, np.ndarray], ids: np.ndarray) -> np.ndarray:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=INTER, num_hidden_layers=LAYERS,
                      num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, tie_word_embeddings=True,
                      max_position_embeddings=512, rms_norm_eps=EPS, rope_theta=THETA, attn_implementation="eager")
    model = LlamaForCausalLM(cfg).eval()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()}, strict=False)
    model.tie_weights()
    with torch.no_grad():
        return model(input_ids=torch.from_numpy(ids), use_cache=False).logits.numpy()


class _G:
    """A tiny graph writer: nodes, initializers, unique names."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.n = 0

    def const(self, name: str, value: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def op(self, op: str, inputs: list[str], name: str | None = None, outputs: int = 1, **attrs) -> str | list[str]:
        self.n += 1
        base = name or f"{op.lower()}_{self.n}"
        outs = [base] if outputs == 1 else [f"{base}_{i}" for i in range(outputs)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=f"n_{base}", **attrs))
        return outs[0] if outputs == 1 else outs


def _rms(g: _G, x: str, weight: str) -> str:
    sq = g.op("Pow", [x, "c_two"])
    mean = g.op("ReduceMean", [sq, "c_axis_last"], keepdims=1)
    root = g.op("Sqrt", [g.op("Add", [mean, "c_eps"])])
    return g.op("Mul", [weight, g.op("Div", [x, root])])


def _rotate(g: _G, x: str, cos: str, sin: str) -> str:
    first = g.op("Slice", [x, "c_zero1", "c_half", "c_axis_last"])
    second = g.op("Slice", [x, "c_half", "c_big", "c_axis_last"])
    rotated = g.op("Concat", [g.op("Neg", [second]), first], axis=-1)
    return g.op("Add", [g.op("Mul", [x, cos]), g.op("Mul", [rotated, sin])])


def _to_onnx(w: dict[str, np.ndarray], kv: bool) -> onnx.ModelProto:
    g = _G()
    g.const("c_two", np.array(2.0, np.float32))
    g.const("c_eps", np.array(EPS, np.float32))
    g.const("c_axis_last", np.array([-1], np.int64))
    g.const("c_zero1", np.array([0], np.int64))
    g.const("c_half", np.array([HEAD_DIM // 2], np.int64))
    g.const("c_big", np.array([1 << 30], np.int64))
    g.const("c_scale", np.array(1.0 / np.sqrt(HEAD_DIM), np.float32))
    g.const("c_neg", np.array(-1e9, np.float32))
    g.const("c_zero", np.array(0.0, np.float32))
    g.const("c_one_i", np.array(1, np.int64))
    g.const("c_zero_i", np.array(0, np.int64))
    g.const("inv_freq", (1.0 / THETA ** (np.arange(0, HEAD_DIM, 2, dtype=np.float32) / HEAD_DIM)).astype(np.float32))
    g.const("kv_map", np.repeat(np.arange(KV_HEADS), HEADS // KV_HEADS).astype(np.int64))
    g.const("shape_q", np.array([0, 0, HEADS, HEAD_DIM], np.int64))
    g.const("shape_kv", np.array([0, 0, KV_HEADS, HEAD_DIM], np.int64))
    g.const("shape_h", np.array([0, 0, HIDDEN], np.int64))
    emb = g.const("model.embed_tokens.weight", w["model.embed_tokens.weight"])
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "seq", VOCAB])]
    # positions: past_len .. past_len + seq
    seq_len = g.op("Gather", [g.op("Shape", ["input_ids"]), "c_one_i"], axis=0)
    if kv:
        past_len = g.op("Gather", [g.op("Shape", ["past_key_values.0.key"]), "c_two_i"], axis=0)
        g.const("c_two_i", np.array(2, np.int64))
    else:
        past_len = "c_zero_i"
    total = g.op("Add", [past_len, seq_len])
    qpos = g.op("Cast", [g.op("Range", [past_len, total, "c_one_i"])], to=TensorProto.FLOAT)
    kpos = g.op("Range", ["c_zero_i", total, "c_one_i"])
    freqs = g.op("Mul", [g.op("Unsqueeze", [qpos, "c_axis_last"]), "inv_freq"])
    emb_f = g.op("Concat", [freqs, freqs], axis=-1)  # [S, hd]
    cos, sin = g.op("Cos", [emb_f]), g.op("Sin", [emb_f])
    qpos_i = g.op("Range", [past_len, total, "c_one_i"])
    future = g.op("Greater", [g.op("Unsqueeze", [kpos, "c_zero1"]), g.op("Unsqueeze", [qpos_i, "c_axis_last"])])
    mask = g.op("Where", [future, "c_neg", "c_zero"])  # [S, T]
    x = g.op("Gather", [emb, "input_ids"], axis=0)
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        h = _rms(g, x, g.const(p + "input_layernorm.weight", w[p + "input_layernorm.weight"]))
        proj = {}
        for name in ("q", "k", "v"):
            wt = g.const(p + f"self_attn.{name}_proj.weight", w[p + f"self_attn.{name}_proj.weight"].T.copy())
            proj[name] = g.op("MatMul", [h, wt], name=f"l{i}_{name}_proj")
        q = g.op("Transpose", [g.op("Reshape", [proj["q"], "shape_q"])], perm=[0, 2, 1, 3])
        k = g.op("Transpose", [g.op("Reshape", [proj["k"], "shape_kv"])], perm=[0, 2, 1, 3])
        v = g.op("Transpose", [g.op("Reshape", [proj["v"], "shape_kv"])], perm=[0, 2, 1, 3])
        q, k = _rotate(g, q, cos, sin), _rotate(g, k, cos, sin)
        if kv:
            for kind, cur in (("key", k), ("value", v)):
                inputs.append(helper.make_tensor_value_info(f"past_key_values.{i}.{kind}", TensorProto.FLOAT,
                                                            ["batch", KV_HEADS, "past", HEAD_DIM]))
                outputs.append(helper.make_tensor_value_info(f"present.{i}.{kind}", TensorProto.FLOAT,
                                                             ["batch", KV_HEADS, "total", HEAD_DIM]))
            k = g.op("Concat", [f"past_key_values.{i}.key", k], name=f"present.{i}.key", axis=2)
            v = g.op("Concat", [f"past_key_values.{i}.value", v], name=f"present.{i}.value", axis=2)
        k_all = g.op("Gather", [k, "kv_map"], axis=1)
        v_all = g.op("Gather", [v, "kv_map"], axis=1)
        scores = g.op("Mul", [g.op("MatMul", [q, g.op("Transpose", [k_all], perm=[0, 1, 3, 2])]), "c_scale"])
        probs = g.op("Softmax", [g.op("Add", [scores, mask])], axis=-1)
        ctx = g.op("Reshape", [g.op("Transpose", [g.op("MatMul", [probs, v_all])], perm=[0, 2, 1, 3]), "shape_h"])
        wo = g.const(p + "self_attn.o_proj.weight", w[p + "self_attn.o_proj.weight"].T.copy())
        x = g.op("Add", [x, g.op("MatMul", [ctx, wo], name=f"l{i}_o_proj")])
        h = _rms(g, x, g.const(p + "post_attention_layernorm.weight", w[p + "post_attention_layernorm.weight"]))
        gate = g.op("MatMul", [h, g.const(p + "mlp.gate_proj.weight", w[p + "mlp.gate_proj.weight"].T.copy())], name=f"l{i}_gate_proj")
        up = g.op("MatMul", [h, g.const(p + "mlp.up_proj.weight", w[p + "mlp.up_proj.weight"].T.copy())], name=f"l{i}_up_proj")
        act = g.op("Mul", [g.op("Mul", [gate, g.op("Sigmoid", [gate])]), up])
        # down_proj as [out, in] behind a Transpose: the weight form some exporters leave
        wd = g.op("Transpose", [g.const(p + "mlp.down_proj.weight", w[p + "mlp.down_proj.weight"])], perm=[1, 0])
        x = g.op("Add", [x, g.op("MatMul", [act, wd], name=f"l{i}_down_proj")])
    h = _rms(g, x, g.const("model.norm.weight", w["model.norm.weight"]))
    g.op("MatMul", [h, g.op("Transpose", [emb], perm=[1, 0])], name="logits")
    graph = helper.make_graph(g.nodes, "llama", inputs, outputs, g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], producer_name="onnxptq-tests")
    model.ir_version = 9
    onnx.checker.check_model(model)
    return model


def build(folder: Path | None = None) -> dict[str, Path]:
    """Paths of the plain and KV-cache models (built and checked against torch on first use)."""
    folder = folder or _cache_dir()
    paths = {"plain": folder / "llama.onnx", "kv": folder / "llama_kv.onnx"}
    if all(p.exists() for p in paths.values()):
        return paths
    folder.mkdir(parents=True, exist_ok=True)
    weights = _fit()
    import onnxruntime as ort

    ids = text_tokens(EVAL_TEXT)[:64][None]
    ref = _torch_logits(weights, ids)
    for kind, path in paths.items():
        model = _to_onnx(weights, kind == "kv")
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        feed = {"input_ids": ids}
        if kind == "kv":
            feed.update({i.name: np.zeros((1, KV_HEADS, 0, HEAD_DIM), np.float32) for i in sess.get_inputs()[1:]})
        got = sess.run(["logits"], feed)[0]
        err = float(np.abs(got - ref).max())
        if err > 5e-4:
            raise AssertionError(f"hand-written ONNX Llama ({kind}) differs from torch by {err}")
        tmp = path.with_suffix(".tmp")
        onnx.save(model, str(tmp))
        os.replace(tmp, path)
    return paths


if __name__ == "__main__":
    print(build())
