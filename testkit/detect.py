"""YOLO-style detection decode, NumPy NMS and detection F1 against the float model's detections.

A YOLOv8/YOLO11 ONNX export has one output ``[1, 4 + classes, anchors]``: rows 0..3 are box
centre x, centre y, width and height in input pixels, the rest per-class Sigmoid scores. Decoding
follows Ultralytics' ``non_max_suppression`` as ``model.predict`` runs it (what mk8dx-table-reader
calls): best class per anchor, keep scores ≥ ``conf``, class-aware NMS at IoU ``iou`` (Ultralytics'
default 0.7), at most ``max_det`` boxes. F1 compares two detection sets (the quantized model's
against the float model's): greedy one-to-one matching, highest score first, same class and
IoU ≥ 0.5. Shared by ``bench/yolo.py`` and the detector-head tests, so both count the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: mk8dx-table-reader's player detector calls ``model.predict(conf=0.6)``; IoU is Ultralytics' default
CONF = 0.6
IOU = 0.7
MAX_DET = 300


@dataclass
class Detections:
    """Boxes as x1, y1, x2, y2 [n, 4], their scores [n] and classes [n] of one image."""

    boxes: np.ndarray
    scores: np.ndarray
    classes: np.ndarray

    def __len__(self) -> int:
        return int(self.scores.shape[0])


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box in ``a`` [n, 4] with every box in ``b`` [m, 4] (x1, y1, x2, y2)."""
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(rb - lt, 0, None), axis=2)
    area_a = np.prod(np.clip(a[:, 2:] - a[:, :2], 0, None), axis=1)
    area_b = np.prod(np.clip(b[:, 2:] - b[:, :2], 0, None), axis=1)
    union = area_a[:, None] + area_b[None, :] - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0)


def nms(boxes: np.ndarray, scores: np.ndarray, iou: float) -> np.ndarray:
    """Indices kept by greedy NMS, highest score first."""
    order = np.argsort(-scores, kind="stable")
    keep: list[int] = []
    while order.size:
        i = int(order[0])
        keep.append(i)
        if order.size == 1:
            break
        overlaps = iou_matrix(boxes[i:i + 1], boxes[order[1:]])[0]
        order = order[1:][overlaps <= iou]
    return np.asarray(keep, dtype=np.int64)


def decode(output: np.ndarray, conf: float = CONF, iou: float = IOU, max_det: int = MAX_DET) -> Detections:
    """Detections of one image from a ``[4 + classes, anchors]`` (or ``[1, ...]``) YOLO output."""
    out = np.asarray(output, dtype=np.float32)
    if out.ndim == 3:
        out = out[0]
    cxcywh, cls_scores = out[:4].T, out[4:].T
    classes = np.argmax(cls_scores, axis=1)
    scores = cls_scores[np.arange(cls_scores.shape[0]), classes]
    keep = scores >= conf
    xywh, scores, classes = cxcywh[keep], scores[keep], classes[keep]
    boxes = np.concatenate([xywh[:, :2] - xywh[:, 2:] / 2, xywh[:, :2] + xywh[:, 2:] / 2], axis=1)
    # Class-aware NMS as Ultralytics does it: boxes of different classes offset so they never overlap.
    offset = classes[:, None].astype(np.float32) * 7680.0
    kept = nms(boxes + offset, scores, iou)[:max_det]
    return Detections(boxes[kept], scores[kept], classes[kept])


def match_counts(reference: Detections, got: Detections, iou: float = 0.5) -> tuple[int, int, int]:
    """(true positives, false positives, false negatives) of ``got`` against ``reference``."""
    if len(reference) == 0 or len(got) == 0:
        return 0, len(got), len(reference)
    ious = iou_matrix(got.boxes, reference.boxes)
    ious[got.classes[:, None] != reference.classes[None, :]] = 0.0
    used = np.zeros(len(reference), dtype=bool)
    tp = 0
    for i in np.argsort(-got.scores, kind="stable"):
        candidates = np.where(~used & (ious[i] >= iou))[0]
        if candidates.size:
            used[candidates[np.argmax(ious[i, candidates])]] = True
            tp += 1
    return tp, len(got) - tp, len(reference) - tp


def f1(reference: list[Detections], got: list[Detections], iou: float = 0.5) -> float:
    """Detection F1 of ``got`` against ``reference`` over all images (1.0 when both are empty)."""
    tp = fp = fn = 0
    for r, g in zip(reference, got, strict=True):
        a, b, c = match_counts(r, g, iou)
        tp, fp, fn = tp + a, fp + b, fn + c
    return 1.0 if tp + fp + fn == 0 else 2 * tp / (2 * tp + fp + fn)
