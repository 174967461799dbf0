"""Round 31 of the outside models: rxnfp's reaction BERTs, textgenrnn's char-LSTM, PESTO's pitch estimator.

* rxnfp 0.1.0 ships three BERTs (hidden 256, 12 layers, 4 heads, a 591-token SMILES vocabulary) as PyTorch
  checkpoints under ``rxnfp/models/transformers/``. ``bert_ft`` is ``get_default_model_and_tokenizer``'s default, a
  ``BertModel`` whose ``last_hidden_state[:, 0]`` ([CLS]) is the reaction fingerprint
  (``RXNBERTFingerprintGenerator.convert_batch``): exported with that row taken inside the graph, so the file ends in
  its pooling (ids, mask, token types in; ``fingerprint`` [N, 256] out). ``bert_ft_10k_25s`` is a
  ``BertForSequenceClassification`` over 50 reaction classes: exported as it runs (logits out; its pooler and
  classifier read the [CLS] row inside the graph).
* textgenrnn 2.0.0 (sdist) ships ``textgenrnn_weights.hdf5``: ``textgenrnn_model``'s net (a 40-char window of token
  ids, Embedding 100, two LSTMs of 128 returning sequences, the three concatenated, AttentionWeightedAverage over the
  window, a softmax over the 465 tokens of ``textgenrnn_vocab.json``). Rebuilt here with Keras 3 as the package
  builds it (LSTM with sigmoid recurrent activation, no mask), the weights read from the HDF5 by layer name, the
  attention layer written as the package's ``call``; converted with tf2onnx (opset 17).
* pesto-pitch 2.0.1 ships ``pesto/weights/mir-1k_g7.ckpt`` (``predict``'s default; its other ``mir-1k.ckpt`` is of
  an older layout that 2.0.1's ``load_model`` loads only with ``strict=False``, its confidence classifier and a
  prefilter missing, and then cannot run: not taken): loaded by ``pesto.load_model`` at 16 kHz with 10 ms steps and exported whole as ``PESTO.forward`` runs it (audio in; the
  harmonic CQT as complex convolutions, log magnitude, the confidence classifier, the crop, the Resnet1d encoder with
  its LayerNorm and Toeplitz head, the softmax, and the argmax-local weighted average): ``pitch`` (semitones),
  ``confidence``, ``volume``, ``activations``. The CQT's complex output is read as its real and imaginary planes (what
  ``view_as_complex(...).abs()`` computes), as ONNX has no complex type.

    python bench/round31_export.py --src /work/cache/newmodels31/src [--only rxnfp_ft ...]   # PYTHONPATH=<round pydeps>

Each file is checked against the framework that ran it (PyTorch, Keras) on an input like its feeds; the max
absolute difference is printed.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from round28_export import _check, _export, export_main

#: (the file written under src)
OUTPUTS = {
    "rxnfp_ft": "round31_onnx/rxnfp_bert_ft.onnx",
    "rxnfp_cls": "round31_onnx/rxnfp_bert_ft_10k_25s.onnx",
    "textgenrnn": "round31_onnx/textgenrnn.onnx",
    "pesto_g7": "round31_onnx/pesto_mir1k_g7.onnx",
}

#: a reaction SMILES (an amide coupling) tokenised as rxnfp's SmilesTokenizer does, for the checks
_CHECK_RXN = "CC(C)N.O=C(O)c1ccccc1>>CC(C)NC(=O)c1ccccc1"


def _bert_ids(src: Path, folder: str, text: str) -> dict[str, np.ndarray]:
    """``[CLS] tokens [SEP]`` ids by rxnfp's regex and vocabulary (as SmilesTokenizer.encode_plus)."""
    import re

    from_vocab = (src / f"rxnfp/models/transformers/{folder}/vocab.txt").read_text().split("\n")
    vocab = {t: i for i, t in enumerate(from_vocab)}
    pattern = (r"(\%\([0-9]{3}\)|\[[^\]]+]|Br?|Cl?|N|O|S|P|F|I|b|c|n|o|s|p|\||\(|\)|\.|=|#|-|\+|\\|\/|:|~|@|\?|>>?|"
               r"\*|\$|\%[0-9]{2}|[0-9])")
    ids = [vocab["[CLS]"]] + [vocab.get(t, vocab["[UNK]"]) for t in re.findall(pattern, text)] + [vocab["[SEP]"]]
    a = np.asarray([ids], np.int64)
    return {"input_ids": a, "attention_mask": np.ones_like(a), "token_type_ids": np.zeros_like(a)}


def logits_module(cls):
    """The classifier called by its three id tensors, its logits out (what the export traces)."""
    import torch

    class Logits(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.m(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).logits

    return Logits(cls)


def export_rxnfp(src: Path, key: str) -> None:
    import torch
    from transformers import BertForSequenceClassification, BertModel

    folder = "bert_ft" if key == "rxnfp_ft" else "bert_ft_10k_25s"
    path = src / f"rxnfp/models/transformers/{folder}"
    if key == "rxnfp_ft":
        bert = BertModel.from_pretrained(str(path))

        class Fingerprint(torch.nn.Module):
            """convert_batch's fingerprint: the [CLS] row of the last hidden state."""

            def __init__(self, bert):
                super().__init__()
                self.bert = bert

            def forward(self, input_ids, attention_mask, token_type_ids):
                h = self.bert(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).last_hidden_state
                return h[:, 0, :]

        net, out_name = Fingerprint(bert), "fingerprint"
    else:
        # its config lists num_labels 50 beside a 2-entry id2label left from the template: the checkpoint's classifier
        # is [50, 256]
        cls = BertForSequenceClassification.from_pretrained(str(path), num_labels=50)
        net, out_name = logits_module(cls), "logits"
    net.eval()
    feed = _bert_ids(src, folder, _CHECK_RXN)
    args = tuple(torch.from_numpy(feed[k]) for k in ("input_ids", "attention_mask", "token_type_ids"))
    names = ["input_ids", "attention_mask", "token_type_ids"]
    dyn = {n: {0: "batch", 1: "tokens"} for n in names}
    dyn[out_name] = {0: "batch"}
    out = src / OUTPUTS[key]
    _export(net, args, out, names, [out_name], dyn)
    check = _bert_ids(src, folder, "Brc1ccccc1.OB(O)c1ccc(C)cc1>>Cc1ccc(-c2ccccc2)cc1")
    with torch.no_grad():
        _check(out, check, net(*(torch.from_numpy(check[k]) for k in names)).numpy())


def _textgenrnn_keras(src: Path):
    """textgenrnn_model(num_classes, cfg) at the package's default config, with its weights."""
    import h5py
    import keras
    import tensorflow as tf

    base = src / "textgenrnn-2.0.0/textgenrnn"
    vocab = json.loads((base / "textgenrnn_vocab.json").read_text())
    n = len(vocab) + 1

    class AttentionWeightedAverage(keras.layers.Layer):
        """The package's layer: a softmax over the window of x @ W (max trick, + epsilon), the weighted sum."""

        def build(self, input_shape):
            self.W = self.add_weight(shape=(input_shape[2], 1), name="attention_W", initializer="uniform")

        def call(self, x):
            logits = tf.squeeze(tf.tensordot(x, self.W, axes=1), -1)
            ai = tf.exp(logits - tf.reduce_max(logits, axis=-1, keepdims=True))
            w = ai / (tf.reduce_sum(ai, axis=1, keepdims=True) + keras.backend.epsilon())
            return tf.reduce_sum(x * tf.expand_dims(w, -1), axis=1)

    inp = keras.Input(shape=(40,), name="input", dtype="int32")
    emb = keras.layers.Embedding(n, 100, name="embedding")(inp)
    r1 = keras.layers.LSTM(128, return_sequences=True, recurrent_activation="sigmoid", name="rnn_1")(emb)
    r2 = keras.layers.LSTM(128, return_sequences=True, recurrent_activation="sigmoid", name="rnn_2")(r1)
    cat = keras.layers.Concatenate(name="rnn_concat")([emb, r1, r2])
    att = AttentionWeightedAverage(name="attention")(cat)
    outp = keras.layers.Dense(n, activation="softmax", name="output")(att)
    model = keras.Model(inp, outp)
    with h5py.File(base / "textgenrnn_weights.hdf5", "r") as f:
        g = f["model_weights"] if "model_weights" in f else f
        for layer in model.layers:
            if layer.name not in g or not layer.weights:
                continue
            grp = g[layer.name]
            arrays = []
            grp.visititems(lambda name, obj: arrays.append((name, obj[()])) if isinstance(obj, h5py.Dataset) else None)
            order = {"embeddings": 0, "kernel": 0, "W": 0, "recurrent_kernel": 1, "bias": 2}
            arrays.sort(key=lambda t: order[t[0].rsplit("/", 1)[-1].split(":")[0].replace("attention_", "")])
            weights = [a for _, a in arrays]
            if isinstance(layer, keras.layers.LSTM) and weights[2].shape[0] == 8 * 128:
                # saved from CuDNNLSTM: converted as Keras 2's _convert_rnn_weights does when a plain LSTM loads them
                # (each gate's kernel block read in cuDNN's column-major layout, each recurrent block transposed, the
                # separate input and recurrent biases summed)
                kernel, recurrent, bias = weights
                weights = [np.hstack([k.T.reshape(k.shape, order="F") for k in np.hsplit(kernel, 4)]),
                           np.hstack([k.T for k in np.hsplit(recurrent, 4)]),
                           bias[:512] + bias[512:]]
            layer.set_weights(weights)
    return model, n


def export_textgenrnn(src: Path) -> None:
    import tensorflow as tf
    import tf2onnx

    model, n = _textgenrnn_keras(src)
    out = src / OUTPUTS["textgenrnn"]
    out.parent.mkdir(parents=True, exist_ok=True)
    spec = (tf.TensorSpec((None, 40), tf.int32, name="input"),)
    tf2onnx.convert.from_keras(model, input_signature=spec, opset=17, output_path=str(out))
    y = np.random.default_rng(0).integers(0, n, (3, 40)).astype(np.int32)
    _check(out, {"input": y}, model(y, training=False).numpy())


def export_pesto(src: Path) -> None:
    import importlib.util
    import math
    import sys
    import types

    import torch

    if "torchaudio" not in sys.modules and importlib.util.find_spec("torchaudio") is None:
        # pesto.core imports torchaudio at module level only to read audio files (predict_from_files)
        sys.modules["torchaudio"] = types.ModuleType("torchaudio")
    from pesto import load_model
    from pesto.utils import reduce_activations

    model = load_model("mir-1k_g7", step_size=10.0, sampling_rate=16000)

    class Whole(torch.nn.Module):
        """PESTO.forward(audio, sr=16000, convert_to_freq=False, return_activations=True), the complex CQT's
        magnitude taken from its real and imaginary planes."""

        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, audio):
            m = self.m
            h = m.preprocessor.hcqt(audio, sr=16000).permute(0, 3, 1, 2, 4)        # (B, T, harmonics, bins, 2)
            mag = torch.sqrt(h[..., 0] ** 2 + h[..., 1] ** 2)
            x = torch.log10(torch.clamp(mag, min=torch.finfo(torch.float32).eps)) * 20
            x = x.flatten(0, 1)
            energy = torch.exp(x * (math.log(10) / 10.0)).squeeze(1)
            vol = energy.sum(dim=-1)
            confidence = m.confidence(energy)
            act = m.encoder(m.crop_cqt(x))
            b = audio.shape[0]
            act = act.view(b, -1, act.size(-1))
            shift = round(m.shift.item() * m.bins_per_semitone)
            if shift:
                act = act.roll(-shift, -1)
            return reduce_activations(act, reduction=m.reduction), confidence.view(b, -1), vol.view(b, -1), act

    net = Whole(model).eval()
    out = src / OUTPUTS["pesto_g7"]
    t = np.arange(40000, dtype=np.float32) / 16000
    audio = (0.3 * np.sin(2 * np.pi * 220 * t) + 0.2 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)[None]
    names_out = ["pitch", "confidence", "volume", "activations"]
    dyn = {"audio": {0: "batch", 1: "samples"}, "pitch": {0: "batch", 1: "frames"},
           "confidence": {0: "batch", 1: "frames"}, "volume": {0: "batch", 1: "frames"},
           "activations": {0: "batch", 1: "frames"}}
    _export(net, (torch.from_numpy(audio),), out, ["audio"], names_out, dyn)
    t2 = np.arange(48000, dtype=np.float32) / 16000
    y = (0.4 * np.sin(2 * np.pi * (180 + 40 * t2) * t2)).astype(np.float32)[None]
    with torch.no_grad():
        ref = model(torch.from_numpy(y.copy()), sr=16000, convert_to_freq=False, return_activations=True)
    _check(out, {"audio": y}, ref[0].numpy())


def main() -> None:
    exporters = {"rxnfp_ft": lambda src: export_rxnfp(src, "rxnfp_ft"),
                 "rxnfp_cls": lambda src: export_rxnfp(src, "rxnfp_cls"),
                 "textgenrnn": export_textgenrnn, "pesto_g7": export_pesto}
    export_main(__doc__, OUTPUTS, exporters, "NEWMODELS31_SRC")


if __name__ == "__main__":
    main()
