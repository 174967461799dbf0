"""Evaluation data and metric for the DB text detector (PP-OCRv4 det from ``rapidocr-onnxruntime``).

Pages are rendered with Pillow (DejaVu faces) with the box of every text line known, fed as
RapidOCR 1.4.4's ``TextDetector`` feeds them (its ``config.yaml``: ``limit_type: min``,
``limit_side_len: 736``, sides rounded to multiples of 32, ``(pixel/255 − 0.5)/0.5``), and decoded
as its ``DBPostProcess`` decodes the probability map (``thresh`` 0.3, 2×2 dilation, ``box_thresh``
0.5 on the mean probability inside the box, ``unclip_ratio`` 1.6, ``min_size`` 3). The
package does this with OpenCV, pyclipper and shapely; the lines here are axis-aligned, so the
minimum-area rectangle of a region is its bounding rectangle and unclipping a rectangle by
``d = area·ratio/perimeter`` grows each side by ``d`` — the same boxes, with NumPy only.

``hmean`` is the ICDAR detection measure: one-to-one matches at IoU ≥ 0.5, the harmonic mean of
precision and recall, against the rendered line boxes (or against another detector's boxes).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .ocr import FONT_DIR

#: RapidOCR 1.4.4 det settings (config.yaml, ch_ppocr_det/utils.py)
LIMIT_SIDE_LEN = 736
THRESH, BOX_THRESH, UNCLIP_RATIO, MIN_SIZE = 0.3, 0.5, 1.6, 3

_FACES = ("DejaVuSans.ttf", "DejaVuSans-Bold.ttf", "DejaVuSerif.ttf", "DejaVuSansMono.ttf",
          "DejaVuSansCondensed.ttf", "DejaVuSerif-Italic.ttf", "DejaVuSans-Oblique.ttf")
_WORDS = ("invoice", "total", "amount", "date", "customer", "order", "number", "shipping", "address", "the",
          "of", "and", "report", "quarterly", "results", "revenue", "growth", "market", "product", "service",
          "page", "section", "table", "figure", "summary", "account", "balance", "payment", "due", "contact",
          "phone", "email", "street", "city", "north", "south", "model", "quantity", "price", "unit")


def _line_text(rng: np.random.Generator) -> str:
    words = []
    for _ in range(int(rng.integers(1, 8))):
        kind = rng.random()
        if kind < 0.7:
            w = str(rng.choice(_WORDS))
            words.append(w.title() if rng.random() < 0.3 else w.upper() if rng.random() < 0.1 else w)
        elif kind < 0.9:
            words.append(f"{rng.integers(0, 100000)}" if rng.random() < 0.5 else f"{rng.integers(1, 999)}.{rng.integers(0, 99):02d}")
        else:
            words.append(f"#{rng.integers(100, 9999)}-{chr(65 + int(rng.integers(0, 26)))}")
    return " ".join(words)


def render_page(rng: np.random.Generator, width: int = 736, height: int = 960, *, hard: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """One page (RGB uint8 [H, W, 3]) and its line boxes ([n, 4] x0, y0, x1, y1, pixel-inclusive:
    the ink's horizontal extent, the font's line height — ascent to descent — as line annotations
    are drawn; an ink-tight box of a lowercase line is half the height a detector outputs). Lines
    of one block share a face and size and sit close (gaps of 0.15-0.7 of the size); blocks
    differ (titles to 9 px print), ink is black, dark colour or faint grey, the paper sometimes
    tinted, a third of the pages softly blurred, all with sensor noise. ``hard``: a phone photo of a
    page — uneven light (up to 40 % darker in one corner), faint ink on a third of the blocks, blur
    on half the pages, stronger noise (the caller picks a smaller page, which the package's
    preprocessing then upsamples)."""
    from PIL import Image, ImageDraw, ImageFont

    paper = (255, 255, 255) if rng.random() < 0.6 else tuple(int(v) for v in rng.integers(225, 250, 3))
    page = Image.new("RGB", (width, height), paper)
    draw = ImageDraw.Draw(page)
    boxes = []
    y = int(rng.integers(20, 50))
    while y < height - 40:
        size = int(rng.choice([9, 10, 11, 12, 13, 14, 16, 18, 22, 28, 34]))
        font = ImageFont.truetype(str(FONT_DIR / str(rng.choice(_FACES))), size)
        faint = rng.random() < (0.35 if hard else 0.2)
        ink = ((int(rng.integers(110, 190 if hard else 170)),) * 3 if faint  # faint grey
               else (0, 0, 0) if rng.random() < 0.6 else tuple(int(v) for v in rng.integers(0, 120, 3)))
        x0 = int(rng.integers(20, 120))
        for _ in range(int(rng.integers(1, 5))):
            text = _line_text(rng)
            l, t, r, b = draw.textbbox((x0, y), text, font=font)
            if b >= height - 10:
                break
            if r >= width - 10:  # too long for the page: drop words until it fits
                while r >= width - 10 and " " in text:
                    text = text.rsplit(" ", 1)[0]
                    l, t, r, b = draw.textbbox((x0, y), text, font=font)
                if r >= width - 10:
                    continue
            draw.text((x0, y), text, font=font, fill=ink)
            ascent, descent = font.getmetrics()
            boxes.append((l, y, r - 1, y + ascent + descent - 1))
            y = b + int(size * rng.uniform(0.15, 0.7))
        y += int(rng.integers(10, 40))
    if rng.random() < (0.5 if hard else 0.3):  # a soft scan / photo
        from PIL import ImageFilter

        page = page.filter(ImageFilter.GaussianBlur(float(rng.uniform(0.4, 1.2 if hard else 1.0))))
    img = np.asarray(page, np.float32)
    if hard:  # light falling off towards one corner
        yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
        fx, fy = (xx / width, yy / height) if rng.random() < 0.5 else (1 - xx / width, 1 - yy / height)
        img *= (1 - float(rng.uniform(0.1, 0.4)) * (fx + fy) / 2)[..., None]
    img = np.clip(img + rng.normal(0, float(rng.uniform(4.0, 12.0) if hard else rng.uniform(2.0, 8.0)), img.shape), 0, 255).astype(np.uint8)
    return img, np.asarray(boxes, np.float64).reshape(-1, 4)


def to_feed(img: np.ndarray) -> dict[str, np.ndarray]:
    """RapidOCR's DetPreProcess: ``limit_type: min`` (scale up so the short side is ≥ 736),
    sides rounded to multiples of 32, ``(x/255 − 0.5)/0.5``, CHW, batch 1. Our pages are
    736 × 960 already, so no resampling happens (the package uses cv2.resize when it does)."""
    h, w = img.shape[:2]
    ratio = LIMIT_SIDE_LEN / min(h, w) if min(h, w) < LIMIT_SIDE_LEN else 1.0
    rh, rw = max(int(round(h * ratio / 32) * 32), 32), max(int(round(w * ratio / 32) * 32), 32)
    if (rh, rw) != (h, w):
        from PIL import Image

        img = np.asarray(Image.fromarray(img).resize((rw, rh), Image.BILINEAR))
    x = (img.astype(np.float32) / 255.0 - 0.5) / 0.5
    return {"x": x.transpose(2, 0, 1)[None].astype(np.float32)}


def _dilate2x2(mask: np.ndarray) -> np.ndarray:
    """cv2.dilate with a 2×2 kernel of ones (anchor at its centre, (1, 1)): a pixel is set when it
    or its upper, left or upper-left neighbour is."""
    out = mask.copy()
    out[1:, :] |= mask[:-1, :]
    out[:, 1:] |= mask[:, :-1]
    out[1:, 1:] |= mask[:-1, :-1]
    return out


def _regions(mask: np.ndarray) -> list[tuple[int, int, int, int]]:
    """Bounding rectangles (y0, y1, x0, x1, inclusive) of the 8-connected regions of ``mask``, as
    cv2.findContours' outer contours bound them: runs of each row joined to the runs of the row
    above that touch them (diagonals included) with a union-find."""
    parent: list[int] = []

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    runs: list[tuple[int, int, int]] = []  # (row, start, end)
    prev: list[int] = []
    for y, row in enumerate(mask):
        d = np.diff(np.concatenate(([0], row.view(np.int8), [0])))
        starts, ends = np.nonzero(d == 1)[0], np.nonzero(d == -1)[0] - 1
        cur = []
        j = 0
        for s, e in zip(starts.tolist(), ends.tolist()):
            k = len(runs)
            runs.append((y, s, e))
            parent.append(k)
            while j < len(prev) and runs[prev[j]][2] < s - 1:
                j += 1
            t = j
            while t < len(prev) and runs[prev[t]][1] <= e + 1:
                a, b = find(k), find(prev[t])
                if a != b:
                    parent[a] = b
                t += 1
            cur.append(k)
        prev = cur
    boxes: dict[int, list[int]] = {}
    for k, (y, s, e) in enumerate(runs):
        b = boxes.setdefault(find(k), [y, y, s, e])
        b[1], b[2], b[3] = max(b[1], y), min(b[2], s), max(b[3], e)
    return [tuple(b) for b in sorted(boxes.values())]


def boxes_from_map(prob: np.ndarray, dest_hw: tuple[int, int]) -> np.ndarray:
    """DBPostProcess (score_mode fast) on one [H, W] probability map: boxes [n, 4] in the
    original image's pixels."""
    h, w = prob.shape
    out = []
    for y0, y1, x0, x1 in _regions(_dilate2x2(prob > THRESH))[:1000]:
        bw, bh = x1 - x0, y1 - y0  # minAreaRect of the contour's pixel centres
        if min(bw, bh) < MIN_SIZE:
            continue
        if prob[y0:y1 + 1, x0:x1 + 1].mean() < BOX_THRESH:
            continue
        d = bw * bh * UNCLIP_RATIO / (2 * (bw + bh))
        if min(bw, bh) + 2 * d < MIN_SIZE + 2:
            continue
        sx, sy = dest_hw[1] / w, dest_hw[0] / h
        out.append((np.clip(round((x0 - d) * sx), 0, dest_hw[1]), np.clip(round((y0 - d) * sy), 0, dest_hw[0]),
                    np.clip(round((x1 + d) * sx), 0, dest_hw[1]), np.clip(round((y1 + d) * sy), 0, dest_hw[0])))
    boxes = np.asarray(out, np.float64).reshape(-1, 4)
    keep = ((boxes[:, 2] - boxes[:, 0]) > 3) & ((boxes[:, 3] - boxes[:, 1]) > 3)  # filter_tag_det_res
    return boxes[keep]


def _iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    ix = np.clip(np.minimum(a[:, None, 2], b[None, :, 2]) - np.maximum(a[:, None, 0], b[None, :, 0]), 0, None)
    iy = np.clip(np.minimum(a[:, None, 3], b[None, :, 3]) - np.maximum(a[:, None, 1], b[None, :, 1]), 0, None)
    inter = ix * iy
    area = lambda r: (r[:, 2] - r[:, 0]) * (r[:, 3] - r[:, 1])  # noqa: E731
    return inter / np.maximum(area(a)[:, None] + area(b)[None, :] - inter, 1e-9)


def matches(truth: np.ndarray, found: np.ndarray, iou: float = 0.5) -> int:
    """One-to-one matches at IoU ≥ ``iou``, greedily by IoU."""
    if not len(truth) or not len(found):
        return 0
    m = _iou(truth, found)
    hits = 0
    while True:
        i, j = np.unravel_index(np.argmax(m), m.shape)
        if m[i, j] < iou:
            return hits
        hits += 1
        m[i, :] = -1
        m[:, j] = -1


def hmean(truth: Sequence[np.ndarray], found: Sequence[np.ndarray]) -> tuple[float, float, float]:
    """(precision, recall, hmean) pooled over pages."""
    hit = sum(matches(t, f) for t, f in zip(truth, found))
    n_t, n_f = sum(len(t) for t in truth), sum(len(f) for f in found)
    p, r = hit / max(n_f, 1), hit / max(n_t, 1)
    return p, r, (2 * p * r / (p + r) if p + r else 0.0)


def pages(n: int, seed: int, *, hard: bool = False) -> tuple[list[dict[str, np.ndarray]], list[np.ndarray], list[tuple[int, int]]]:
    """``n`` pages: feeds, line boxes, image sizes. ``hard``: photo-like pages (see
    :func:`render_page`) of 480-640 px width, upsampled by the preprocessing to a 736 short side."""
    rng = np.random.default_rng(seed)
    feeds, truth, sizes = [], [], []
    for _ in range(n):
        if hard:
            w = int(rng.choice([480, 552, 640]))
            img, boxes = render_page(rng, w, int(w * 1.3), hard=True)
        else:
            img, boxes = render_page(rng)
        feeds.append(to_feed(img))
        truth.append(boxes)
        sizes.append(img.shape[:2])
    return feeds, truth, sizes


def detect(run, feeds: Sequence[dict[str, np.ndarray]], sizes: Sequence[tuple[int, int]]) -> list[np.ndarray]:
    """Boxes per page from a runner (feed -> outputs; output 0 is [1, 1, H, W])."""
    return [boxes_from_map(run(f)[0][0, 0], hw) for f, hw in zip(feeds, sizes)]
