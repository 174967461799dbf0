"""Round 32 of the outside models: MediaPipe's selfie segmentation (TFLite with float16 weights, through tf2onnx), rxnfp's
reaction classifier exported by torch's dynamo exporter, g2p_en's GRU seq2seq with its greedy decoding as a Loop.

* mediapipe 0.10.14 (round 25's wheel; round 25 took its hand and iris landmarks) ships
  ``modules/selfie_segmentation/selfie_segmentation.tflite``: the general model of ``SelfieSegmentation(
  model_selection=0)``, RGB 256 x 256 in [0, 1] (NHWC), a person mask [1, 256, 256, 1] after its own sigmoid. Its
  weights are stored float16 and DEQUANTIZEd at load; round 25's tflite2onnx could not convert it (HARD_SWISH).
  tf2onnx's TFLite reader (``from_tflite``, opset 17) does: the input stays NHWC as the TFLite file has it, and the
  float16 weights are folded to float32 (the file is float32). ``selfie_segmentation_landscape.tflite``
  (``model_selection=1``, 256 wide x 144 high) likewise.
* rxnfp 0.1.0's ``bert_ft_10k_25s`` (round 31's reaction classifier, 50 classes, TorchScript-exported then), exported
  again by ``torch.onnx.export(..., dynamo=True)`` (torch 2.13's default exporter, opset 18, dynamic batch and tokens),
  so the graph has a recent torch's spellings (``LayerNormalization``, the erf GELU, SDPA's mask arithmetic).
* g2p-en 2.1.0 ships ``checkpoint20.npz``, the weights of ``G2p.predict``'s NumPy GRU encoder-decoder (256 wide; 29
  graphemes, 74 phonemes), the model it runs on every word CMUdict lacks. Written as a torch module: the encoder an
  ``nn.GRU`` (the package's gate order, r z n, is torch's), the decoder the package's greedy loop (at most 20 steps,
  each the GRU cell, the output projection, the arg-max and the next step's embedding, stopping at ``</s>``) in a
  scripted function, so the TorchScript export (opset 17) keeps it as a ``Loop`` with an ``If`` inside; outputs
  ``phonemes`` (int64, the word's phoneme indices) and ``logits`` [steps, 74].

    python bench/round32_export.py --src /work/cache/newmodels32/src   # PYTHONPATH=<round 32's pydeps: TF, tf2onnx>

Each file is checked against the framework that ran it (the TFLite interpreter, PyTorch, the package's own NumPy
``predict`` loop) on inputs like its feeds; the max absolute difference (or the words decoded alike) is printed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from round28_export import _check, export_main
from round31_export import _bert_ids, logits_module

#: (the file written under src)
OUTPUTS = {
    "mp_selfie_seg": "round32_onnx/mp_selfie_segmentation.onnx",
    "mp_selfie_landscape": "round32_onnx/mp_selfie_segmentation_landscape.onnx",
    "rxnfp_cls_dynamo": "round32_onnx/rxnfp_bert_ft_10k_25s_dynamo.onnx",
    "g2p_en": "round32_onnx/g2p_en_predict.onnx",
}

#: the TFLite file each MediaPipe model is converted from (under src, round 25's unpacked mediapipe wheel)
TFLITE = {
    "mp_selfie_seg": "mediapipe/modules/selfie_segmentation/selfie_segmentation.tflite",
    "mp_selfie_landscape": "mediapipe/modules/selfie_segmentation/selfie_segmentation_landscape.tflite",
}


def _transpose_conv_bias(path: Path) -> int:
    """Write MediaPipe's custom ``Convolution2DTransposeBias`` (a transposed convolution with its bias; tf2onnx keeps it
    as an unknown ``TFL_Convolution2DTransposeBias`` node, NHWC in and out, weights OHWI) as standard ops: the NHWC input
    back to NCHW, ``ConvTranspose`` (kernel = stride, SAME padding: the output exactly stride x the input, so no pads),
    and NHWC again. The stride is read from the shapes (the custom options are not parsed by tf2onnx). Returns how
    many nodes were replaced."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(path))
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    replaced = 0
    for i, node in enumerate(list(g.node)):
        if node.op_type != "TFL_Convolution2DTransposeBias":
            continue
        x, w, bias = node.input
        kernel = numpy_helper.to_array(inits[w])                       # [O, kH, kW, I]
        wname, bname = f"{node.name}_W", f"{node.name}_B"
        g.initializer.extend([numpy_helper.from_array(np.ascontiguousarray(kernel.transpose(3, 0, 1, 2)), wname),
                              numpy_helper.from_array(numpy_helper.to_array(inits[bias]).reshape(-1), bname)])
        kh, kw = kernel.shape[1:3]
        new = [helper.make_node("Transpose", [x], [f"{node.name}_nchw"], name=f"{node.name}_to_nchw", perm=[0, 3, 1, 2]),
               helper.make_node("ConvTranspose", [f"{node.name}_nchw", wname, bname], [f"{node.name}_out"],
                                name=f"{node.name}_convT", kernel_shape=[kh, kw], strides=[kh, kw]),
               helper.make_node("Transpose", [f"{node.name}_out"], list(node.output), name=f"{node.name}_to_nhwc",
                                perm=[0, 2, 3, 1])]
        g.node.remove(node)
        for k, n in enumerate(new):
            g.node.insert(i + k, n)
        replaced += 1
    read = {i for n in g.node for i in n.input}
    for t in [t for t in g.initializer if t.name not in read]:    # the custom node's OHWI weights and its bias
        g.initializer.remove(t)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return replaced


def export_selfie(src: Path, key: str = "mp_selfie_seg") -> None:
    """tf2onnx's TFLite path with the custom transposed convolution written out, then the file against MediaPipe's own
    ``SelfieSegmentation`` solution (the wheel's graph and TFLite runtime; ``model_selection`` 0 the general model,
    1 the landscape one) on frames of the model's own size (256 x 256, 256 wide x 144 high), whose tensor is the
    frame / 255 as fed here."""
    import tf2onnx

    tfl, out = src / TFLITE[key], src / OUTPUTS[key]
    out.parent.mkdir(parents=True, exist_ok=True)
    tf2onnx.convert.from_tflite(str(tfl), opset=17, output_path=str(out))
    print(f"{out.name}: {_transpose_conv_bias(out)} custom transposed convolution(s) written as ConvTranspose")
    import mediapipe as mp
    from PIL import Image

    landscape = key == "mp_selfie_landscape"
    seg = mp.solutions.selfie_segmentation.SelfieSegmentation(model_selection=int(landscape))
    for name in ("astronaut.png", "camera.png"):
        size = (256, 144) if landscape else (256, 256)
        frame = np.asarray(Image.open(src / "skimage/data" / name).convert("RGB").resize(size, Image.BILINEAR))
        _check(out, {"input_1": (frame.astype(np.float32) / 255.0)[None]}, seg.process(frame).segmentation_mask[None, :, :, None])


def export_rxnfp_dynamo(src: Path) -> None:
    import torch
    from transformers import BertForSequenceClassification

    folder = "bert_ft_10k_25s"
    cls = BertForSequenceClassification.from_pretrained(str(src / f"rxnfp/models/transformers/{folder}"), num_labels=50,
                                                        attn_implementation="sdpa")
    net = logits_module(cls).eval()
    names = ["input_ids", "attention_mask", "token_type_ids"]
    feed = _bert_ids(src, folder, "CC(C)N.O=C(O)c1ccccc1>>CC(C)NC(=O)c1ccccc1")
    feed = {k: np.repeat(v, 2, axis=0) for k, v in feed.items()}
    args = tuple(torch.from_numpy(feed[k]) for k in names)
    batch, tokens = torch.export.Dim("batch", min=1, max=512), torch.export.Dim("tokens", min=2, max=512)
    out = src / OUTPUTS["rxnfp_cls_dynamo"]
    out.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        prog = torch.onnx.export(net, args, input_names=names, output_names=["logits"], dynamo=True,
                                 dynamic_shapes={n: {0: batch, 1: tokens} for n in names}, external_data=False)
    prog.save(str(out), external_data=False)
    check = _bert_ids(src, folder, "Brc1ccccc1.OB(O)c1ccc(C)cc1>>Cc1ccc(-c2ccccc2)cc1")
    with torch.no_grad():
        _check(out, check, net(*(torch.from_numpy(check[k]) for k in names)).numpy())


def _g2p_module(npz: Path):
    import torch

    v = {k: torch.from_numpy(np.asarray(a, np.float32)) for k, a in np.load(npz).items()}

    @torch.jit.script
    def decode(h: torch.Tensor, dec_emb: torch.Tensor, w_ih: torch.Tensor, w_hh: torch.Tensor, b_ih: torch.Tensor,
               b_hh: torch.Tensor, fc_w: torch.Tensor, fc_b: torch.Tensor):
        dec = dec_emb[2:3]                                  # <s>
        preds = torch.zeros(0, dtype=torch.long)
        logits_all = torch.zeros(0, fc_b.shape[0])
        for _ in range(20):
            rzn_ih = torch.matmul(dec, w_ih.t()) + b_ih
            rzn_hh = torch.matmul(h, w_hh.t()) + b_hh
            rz = torch.sigmoid(rzn_ih[:, :512] + rzn_hh[:, :512])
            r, z = rz[:, :256], rz[:, 256:]
            n = torch.tanh(rzn_ih[:, 512:] + r * rzn_hh[:, 512:])
            h = (1 - z) * n + z * h
            logits = torch.matmul(h, fc_w.t()) + fc_b
            pred = torch.argmax(logits, dim=1)
            logits_all = torch.cat([logits_all, logits], 0)
            preds = torch.cat([preds, pred], 0)
            dec = dec_emb[pred]
            if int(pred[0]) == 3:                           # </s>
                break
        ended = (preds[-1:] == 3).long().sum()              # </s> is not a phoneme: cut it
        return preds[: preds.shape[0] - ended], logits_all

    class G2pPredict(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.enc_emb = torch.nn.Parameter(v["enc_emb"])
            self.gru = torch.nn.GRU(256, 256, batch_first=True)
            with torch.no_grad():
                for name in ("w_ih", "w_hh", "b_ih", "b_hh"):
                    getattr(self.gru, f"{name.replace('w_', 'weight_').replace('b_', 'bias_')}_l0").copy_(v[f"enc_{name}"])
            for k in ("dec_emb", "dec_w_ih", "dec_w_hh", "dec_b_ih", "dec_b_hh", "fc_w", "fc_b"):
                self.register_buffer(k, v[k])

        def forward(self, chars):
            enc, _ = self.gru(self.enc_emb[chars])
            return decode(enc[:, -1, :], self.dec_emb, self.dec_w_ih, self.dec_w_hh, self.dec_b_ih, self.dec_b_hh,
                          self.fc_w, self.fc_b)

    return G2pPredict().eval()


def g2p_ids(word: str) -> np.ndarray:
    """``G2p.encode``'s indices: each letter's (``<unk>`` 1 for any other character) and ``</s>`` (2); [1, len + 1]."""
    graphemes = ["<pad>", "<unk>", "</s>"] + list("abcdefghijklmnopqrstuvwxyz")
    return np.asarray([[graphemes.index(c) if c in graphemes[3:] else 1 for c in word] + [2]], np.int64)


def g2p_reference(npz: Path, word: str) -> list[int]:
    """The package's own ``predict`` loop in NumPy (g2p.py without its nltk imports), the phoneme indices."""
    v = np.load(npz)

    def cell(x, h, p):
        ih, hh = x @ v[f"{p}_w_ih"].T + v[f"{p}_b_ih"], h @ v[f"{p}_w_hh"].T + v[f"{p}_b_hh"]
        rz = 1 / (1 + np.exp(-(ih[:, :512] + hh[:, :512])))
        r, z = rz[:, :256], rz[:, 256:]
        return (1 - z) * np.tanh(ih[:, 512:] + r * hh[:, 512:]) + z * h

    h = np.zeros((1, 256), np.float32)
    for i in g2p_ids(word)[0]:
        h = cell(v["enc_emb"][[i]], h, "enc")
    dec, preds = v["dec_emb"][[2]], []
    for _ in range(20):
        h = cell(dec, h, "dec")
        pred = int(np.argmax(h @ v["fc_w"].T + v["fc_b"]))
        if pred == 3:
            break
        preds.append(pred)
        dec = v["dec_emb"][[pred]]
    return preds


def export_g2p(src: Path) -> None:
    import torch

    import onnxruntime as ort

    npz, out = src / "g2p_en/checkpoint20.npz", src / OUTPUTS["g2p_en"]
    out.parent.mkdir(parents=True, exist_ok=True)
    net = _g2p_module(npz)
    with torch.no_grad():
        torch.onnx.export(net, (torch.from_numpy(g2p_ids("onnxruntime")),), str(out), input_names=["chars"],
                          output_names=["phonemes", "logits"], opset_version=17, dynamo=False,
                          dynamic_axes={"chars": {1: "letters"}, "phonemes": {0: "steps"}, "logits": {0: "steps"}})
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    words = ("quantizer", "tokenizer", "kubernetes", "zyxxy", "onnxptq", "schwarzenegger", "a")
    same = [sess.run(None, {"chars": g2p_ids(w)})[0].tolist() == g2p_reference(npz, w) for w in words]
    print(f"{out.name}: the package's phonemes on {sum(same)} of {len(words)} words")


def main() -> None:
    exporters = {"mp_selfie_seg": export_selfie, "mp_selfie_landscape": lambda src: export_selfie(src, "mp_selfie_landscape"),
                 "rxnfp_cls_dynamo": export_rxnfp_dynamo, "g2p_en": export_g2p}
    export_main(__doc__, OUTPUTS, exporters, "NEWMODELS32_SRC")


if __name__ == "__main__":
    main()
