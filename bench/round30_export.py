"""Round 30 of the outside models: kraken's layout segmenter (a CoreML VGSL net) and tempocnn's Keras tempo classifiers.

* kraken 7.1.1 ships ``kraken/blla.mlmodel``, its default baseline and region segmenter (``kraken segment -bl``): the
  VGSL net ``[1,1800,0,3 Cr7,7,64,2,2 Gn32 Cr3,3,128,2,2 Gn32 Cr3,3,128 Gn32 Cr3,3,256 Gn32 Cr3,3,256 Gn32 Lbx32 Lby32
  Cr1,1,32 Gn32 Lby32 Lbx32 O2l4]`` stored as a CoreML protobuf. It is loaded with kraken's own
  ``TorchVGSLModel.load_model`` (coremltools reads the protobuf, each kraken layer's ``deserialize`` takes its weights)
  and its ``nn`` exported as ``compute_segmentation_map`` runs it: an inverted RGB page [1, 3, 1800, W] in, the 4
  heat-map logits at a quarter of the page's size out (the package upsamples and applies the sigmoid after the net).
  kraken imports lightning, shapely, torchvision, scikit-image and others at module level for training, vectorisation
  and I/O; none is used by loading or running the net, so absent ones are stood in by empty modules for the export.
  The class mapping and padding the reading needs are saved beside the file (``kraken_blla.json``).
* tempocnn 0.0.8 ships Keras 2 ``.h5`` tempo classifiers (``models/fcn.h5``, ``TempoClassifier``'s default, and
  ``cnn.h5``): 40-band mel windows [N, 40, 256, 1] in, a softmax over 256 tempo classes (30-285 BPM) out. Each is
  loaded as the package loads it (``load_model(file, compile=False)``) and converted with tf2onnx (opset 17).
* retinaface 1.1.1 ships ``retinaface/src/frozen_graph.pb``, a TF2 RetinaFace face detector (MobileNetV2 backbone,
  separate score/box/landmark heads, prior decoding and NMS in the graph), which ``RetinaFace`` imports and prunes to
  ``x:0`` -> ``Identity:0`` ([faces, 16]: box, five landmarks, a validity flag, the score); converted with tf2onnx.

    python bench/round30_export.py --src /work/cache/newmodels30/src [--only kraken_blla ...]   # PYTHONPATH=<round pydeps>

Each file is checked against the framework that ran it (PyTorch, Keras) on random input; the max absolute difference
is printed.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import json
import sys
import types
from pathlib import Path

import numpy as np

from round28_export import _check, export_main   # _check: onnxruntime against the framework's own output, the max difference printed

#: (the file written under src)
OUTPUTS = {
    "kraken_blla": "round30_onnx/kraken_blla.onnx",
    "tempocnn_fcn": "round30_onnx/tempocnn_fcn.onnx",
    "tempocnn_cnn": "round30_onnx/tempocnn_cnn.onnx",
    "retinaface": "round30_onnx/retinaface_mbv2.onnx",
}

#: top-level packages kraken imports at module level for training, vectorisation, I/O and its CLI, not for loading
#: or running a net: stood in by empty modules when this interpreter lacks them
_KRAKEN_STANDINS = ("lightning", "shapely", "torchvision", "skimage", "sklearn", "torchmetrics", "pyarrow", "lxml",
                    "rich", "platformdirs", "htrmopo", "iso639", "bidi", "scipy", "jsonschema", "regex", "click",
                    "PIL", "jinja2", "safetensors", "requests")


class _Anything(types.ModuleType):
    """A stand-in module: any attribute is another stand-in (a class when capitalised, so ``class X(Base)`` and
    decorators still work); calling it returns None."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        value = type(name, (), {"__init__": lambda s, *a, **k: None}) if name[:1].isupper() else _Anything(
            f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value

    def __call__(self, *a, **k):
        if len(a) == 1 and callable(a[0]) and not k:
            return a[0]          # used as a decorator
        return lambda f: f


class _StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds a stand-in for any module under the given top-level names that this interpreter lacks (an installed one is
    imported as it is)."""

    def __init__(self, tops: tuple[str, ...]) -> None:
        self.tops = tuple(t for t in tops if importlib.util.find_spec(t) is None)

    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] not in self.tops:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        module = _Anything(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module) -> None:
        pass


def _load_kraken(src: Path):
    sys.meta_path.insert(0, _StandInFinder(_KRAKEN_STANDINS))
    sys.path.insert(0, str(src))
    from kraken.lib.vgsl.model import TorchVGSLModel

    return TorchVGSLModel.load_model(str(src / "kraken/blla.mlmodel"))


class _Net:
    """``model.nn`` as compute_segmentation_map calls it: ``o, _ = model.nn(x)``; the logits only."""

    @staticmethod
    def wrap(nn):
        import torch

        class Wrapped(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.nn = nn

            def forward(self, x):
                return self.nn(x)[0]

        return Wrapped().eval()


def export_kraken(src: Path) -> None:
    import torch

    model = _load_kraken(src)
    model.eval()
    out = src / OUTPUTS["kraken_blla"]
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"input": list(model.input), "class_mapping": model.user_metadata.get("class_mapping"),
            "padding": model.user_metadata.get("hyper_params", {}).get("padding"), "vgsl": model.spec,
            "bounding_regions": model.user_metadata.get("bounding_regions")}
    out.with_name("kraken_blla.json").write_text(json.dumps(meta, indent=1))
    net = _Net.wrap(model.nn)
    x = torch.rand(1, 3, 1800, 160)
    with torch.no_grad():
        torch.onnx.export(net, (x,), str(out), input_names=["page"], output_names=["heatmap_logits"], opset_version=17,
                          dynamic_axes={"page": {3: "width"}, "heatmap_logits": {3: "out_width"}}, dynamo=False)
        y = torch.rand(1, 3, 1800, 200)
        _check(out, {"page": y.numpy()}, net(y).numpy())


def export_tempocnn(src: Path, which: str, key: str) -> None:
    import tensorflow as tf
    import tf2onnx

    model = tf.keras.models.load_model(str(src / f"tempocnn/models/{which}.h5"), compile=False)
    out = src / OUTPUTS[key]
    out.parent.mkdir(parents=True, exist_ok=True)
    spec = (tf.TensorSpec((None, 40, 256, 1), tf.float32, name="mel"),)
    tf2onnx.convert.from_keras(model, input_signature=spec, opset=17, output_path=str(out))
    y = np.random.default_rng(0).uniform(0, 1, (3, 40, 256, 1)).astype(np.float32)
    _check(out, {"mel": y}, model(y, training=False).numpy())


def export_retinaface(src: Path) -> None:
    """retinaface 1.1.1's ``src/frozen_graph.pb`` (a TF2 RetinaFace: backbone, FPN, SSH context modules, separate
    class/box/landmark heads, the prior-box decoding and NMS inside the graph), imported as ``RetinaFace.__init__``
    imports it and cut at the tensors it prunes to (``x:0`` in, ``Identity:0`` out), then converted by tf2onnx."""
    import tensorflow as tf
    from PIL import Image

    from round29_export import convert_graph_def

    graph = tf.compat.v1.GraphDef()
    graph.ParseFromString((src / "retinaface/src/frozen_graph.pb").read_bytes())
    # a real face (random input leaves no detection after the graph's NMS, nothing to compare): scikit-image's
    # astronaut, 320 x 320 as RetinaFace('speed') resizes it, RGB float 0-255
    y = np.asarray(Image.open(src / "skimage/data/astronaut.png").convert("RGB").resize((320, 320)), np.float32)[None]
    convert_graph_def(graph, "x:0", "Identity:0", src / OUTPUTS["retinaface"], y)


def main() -> None:
    exporters = {"kraken_blla": export_kraken, "retinaface": export_retinaface,
                 "tempocnn_fcn": lambda src: export_tempocnn(src, "fcn", "tempocnn_fcn"),
                 "tempocnn_cnn": lambda src: export_tempocnn(src, "cnn", "tempocnn_cnn")}
    export_main(__doc__, OUTPUTS, exporters, "NEWMODELS30_SRC")


if __name__ == "__main__":
    main()
