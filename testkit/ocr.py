"""Evaluation data for the real PP-OCR models: text lines we render ourselves, and their metrics.

Quantization damage is only visible on a task metric when the float model is *nearly* right, so the
renderer aims for lines the float recogniser reads well but not perfectly (varied DejaVu faces and
sizes, mild blur and noise, some colour and polarity variety). Everything is deterministic per seed,
so a test threshold or a benchmark figure means the same thing on every machine with the same
Pillow/FreeType.

* ``render_lines`` / ``rec_cer`` feed ``ch_PP-OCRv4_rec_infer.onnx`` (CTC recogniser, input
  ``x`` [N,3,48,W], output [N,T,C] probabilities, class 0 = blank).
* ``render_cls`` / ``cls_accuracy`` feed ``ch_ppocr_mobile_v2.0_cls_infer.onnx`` (0° vs 180°).
* ``save_npz`` / ``save_folder`` write the arrays in the layouts the CLI and
  :mod:`onnxptq.calibration.readers` accept.

Texts use only printable ASCII (Latin letters, digits, punctuation): the recogniser's dictionary is
mostly Chinese, which DejaVu lacks, and ASCII is the part both cover completely (a test checks it).

Pillow is an optional extra; it is imported inside the functions that need it.
"""

from __future__ import annotations

import functools
import logging
import os
import string
import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

import numpy as np

from onnxptq.analysis.class_scores import edit_distance

if TYPE_CHECKING:  # pragma: no cover
    import onnx
    import onnxruntime as ort
    from PIL import Image as PILImage

log = logging.getLogger(__name__)

#: Where Debian/Ubuntu's fonts-dejavu-core and fonts-dejavu-extra put the faces.
FONT_DIR = Path(os.environ.get("ONNXPTQ_DEJAVU_DIR", "/usr/share/fonts/truetype/dejavu"))

#: Faces used by the renderer with their relative weights. Condensed and oblique faces are the
#: harder cases; ExtraLight is left out because at small sizes it falls apart into noise.
FONT_FACES: tuple[tuple[str, float], ...] = (
    ("DejaVuSans.ttf", 3.0),
    ("DejaVuSans-Bold.ttf", 2.0),
    ("DejaVuSans-Oblique.ttf", 1.0),
    ("DejaVuSans-BoldOblique.ttf", 1.0),
    ("DejaVuSansCondensed.ttf", 1.0),
    ("DejaVuSansCondensed-Bold.ttf", 1.0),
    ("DejaVuSerif.ttf", 2.0),
    ("DejaVuSerif-Bold.ttf", 1.0),
    ("DejaVuSerif-Italic.ttf", 1.0),
    ("DejaVuSerifCondensed.ttf", 1.0),
    ("DejaVuSansMono.ttf", 2.0),
    ("DejaVuSansMono-Bold.ttf", 1.0),
    ("DejaVuSansMono-Oblique.ttf", 1.0),
)

#: Characters the renderer draws: printable ASCII without the space (the space is its own class
#: in the recogniser and appears between words).
LATIN_ALPHABET: str = "".join(c for c in string.printable if c.isprintable() and not c.isspace())

REC_HEIGHT = 48
REC_WIDTH = 320
CLS_WIDTH = 192

_WORDS = (
    "the of and to in is for on that with as by at from this be are or an it not was have all "
    "new more one can will about your which their has its out time data model value total price "
    "order page user file test line text input output layer weight scale batch graph node tensor "
    "quantize float integer north south east west river market street station office invoice "
    "number account amount balance date name address phone email report result error status "
    "server client version update system memory device driver signal filter window table column "
    "green black white orange yellow purple silver golden winter summer spring autumn morning "
    "evening coffee bread water paper pencil garden kitchen bottle ticket museum library hotel "
    "Monday Friday January March October London Paris Berlin Tokyo Sydney Oxford Boston Quebec"
).split()

_PUNCT_WRAP = (("(", ")"), ("[", "]"), ('"', '"'), ("'", "'"), ("<", ">"), ("{", "}"))
_PUNCT_TAIL = ".,;:!?"


def _require_pillow() -> Any:
    """Import Pillow lazily: it is an optional extra, needed only to render images."""
    try:
        import PIL.Image  # noqa: F401
        import PIL.ImageDraw  # noqa: F401
        import PIL.ImageFilter  # noqa: F401
        import PIL.ImageFont  # noqa: F401
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ImportError(
            "rendering OCR test data needs Pillow: pip install onnxptq[images]"
        ) from exc
    import PIL

    return PIL


@functools.lru_cache(maxsize=256)
def _font(face: str, size: int) -> Any:
    """A cached FreeType font: loading a face costs far more than drawing a line with it."""
    PIL = _require_pillow()
    path = FONT_DIR / face
    if not path.is_file():
        raise FileNotFoundError(
            f"DejaVu font {path} not found; install fonts-dejavu (fonts-dejavu-core and "
            "fonts-dejavu-extra) or point ONNXPTQ_DEJAVU_DIR at a folder holding the DejaVu faces"
        )
    return PIL.ImageFont.truetype(str(path), size)


# ---------------------------------------------------------------------------------------------
# text generation


def _token(rng: np.random.Generator, alphabet: str) -> str:
    """One random token: mostly words in varied case, also numbers, codes and punctuated words.

    Words give the transformer-based recogniser realistic context; codes and random characters
    make it read glyph by glyph, which is where quantization damage shows.
    """
    kind = rng.random()
    if kind < 0.45:
        word = str(rng.choice(_WORDS))
        case = rng.random()
        if case < 0.2:
            word = word.capitalize()
        elif case < 0.3:
            word = word.upper()
        tail = rng.random()
        if tail < 0.15:
            word += str(rng.choice(list(_PUNCT_TAIL)))
        elif tail < 0.22:
            left, right = _PUNCT_WRAP[int(rng.integers(len(_PUNCT_WRAP)))]
            word = left + word + right
        return word
    if kind < 0.65:
        form = int(rng.integers(5))
        if form == 0:
            return str(int(rng.integers(0, 100000)))
        if form == 1:
            return f"{rng.uniform(0, 1000):.{int(rng.integers(1, 3))}f}"
        if form == 2:
            return f"{int(rng.integers(1990, 2031))}-{int(rng.integers(1, 13)):02d}-{int(rng.integers(1, 29)):02d}"
        if form == 3:
            return f"{int(rng.integers(0, 24)):02d}:{int(rng.integers(0, 60)):02d}"
        return f"${rng.uniform(0, 500):.2f}"
    if kind < 0.85:
        pool = string.ascii_uppercase + string.digits
        pool = "".join(c for c in pool if c in alphabet)
        n = int(rng.integers(3, 8))
        code = "".join(rng.choice(list(pool), size=n))
        if rng.random() < 0.5 and n > 3:
            cut = int(rng.integers(1, n))
            code = code[:cut] + str(rng.choice(list("-/_."))) + code[cut:]
        return code
    n = int(rng.integers(2, 7))
    return "".join(rng.choice(list(alphabet), size=n))


def _text(rng: np.random.Generator, alphabet: str, max_chars: int) -> str:
    """Tokens joined by single spaces, up to ``max_chars`` characters (at least one token)."""
    words: list[str] = []
    length = 0
    while True:
        tok = "".join(c for c in _token(rng, alphabet) if c in alphabet)
        if not tok:
            continue
        extra = len(tok) + (1 if words else 0)
        if words and length + extra > max_chars:
            break
        words.append(tok)
        length += extra
        if length >= max_chars:
            break
    return " ".join(words)


# ---------------------------------------------------------------------------------------------
# rendering


def _colours(rng: np.random.Generator, invert_prob: float) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(background, ink): dark on light mostly, with tints, low contrast and some inverted lines."""
    if rng.random() < invert_prob:
        bg = tuple(int(v) for v in rng.integers(0, 70, size=3))
        ink = tuple(int(v) for v in rng.integers(190, 256, size=3))
        return bg, ink  # type: ignore[return-value]
    base = int(rng.integers(170, 256))
    tint = rng.integers(-25, 26, size=3) if rng.random() < 0.4 else np.zeros(3, dtype=np.int64)
    bg = tuple(int(np.clip(base + t, 0, 255)) for t in tint)
    if rng.random() < 0.25:  # coloured ink (blue, red, green-ish)
        ink_arr = rng.integers(0, 90, size=3)
        ink_arr[int(rng.integers(3))] = int(rng.integers(90, 160))
    else:
        ink_arr = np.full(3, int(rng.integers(0, 90)))
    return bg, tuple(int(v) for v in ink_arr)  # type: ignore[return-value]


def _draw_line(
    rng: np.random.Generator,
    text: str,
    face: str,
    size: int,
    bg: tuple[int, int, int],
    ink: tuple[int, int, int],
) -> PILImage.Image:
    """Draw ``text`` tightly cropped with random margins; returns an RGB image of natural size."""
    PIL = _require_pillow()
    font = _font(face, size)
    left, top, right, bottom = font.getbbox(text)
    ascent, descent = font.getmetrics()
    # Vertical extent from the font metrics, not the ink box, so "ace" and "Ajg" get the same
    # baseline placement, as in a real line crop.
    height = ascent + descent
    mx = int(rng.integers(1, max(2, size // 2)))
    mt = int(round(height * rng.uniform(0.05, 0.25)))
    mb = int(round(height * rng.uniform(0.05, 0.25)))
    width = (right - left) + 2 * mx
    img = PIL.Image.new("RGB", (max(width, 1), height + mt + mb), bg)
    draw = PIL.ImageDraw.Draw(img)
    draw.text((mx - left, mt), text, font=font, fill=ink)
    return img


def _finish(rng: np.random.Generator, img: PILImage.Image, noise_scale: float) -> np.ndarray:
    """Blur and noise a line image; returns uint8 HWC."""
    PIL = _require_pillow()
    r = rng.random()
    if r < 0.35 * noise_scale:
        img = img.filter(PIL.ImageFilter.GaussianBlur(radius=float(rng.uniform(0.4, 1.2) * noise_scale)))
    arr = np.asarray(img, dtype=np.float32)
    sigma = float(rng.uniform(0.0, 12.0) * noise_scale)
    if sigma > 0:
        arr = arr + rng.normal(0.0, sigma, size=arr.shape).astype(np.float32)
    return np.clip(np.rint(arr), 0, 255).astype(np.uint8)


def _fit(img: PILImage.Image, height: int, width: int, bg: tuple[int, int, int]) -> PILImage.Image | None:
    """Scale to ``height`` keeping the aspect ratio and pad right to ``width`` with the background.

    Returns None when the line is wider than ``width`` even after a mild (≤15 %) horizontal squeeze,
    so the caller can shorten the text instead of distorting it.
    """
    PIL = _require_pillow()
    w, h = img.size
    new_w = max(1, int(round(w * height / h)))
    if new_w > width:
        if new_w > width * 1.15:
            return None
        new_w = width
    img = img.resize((new_w, height), PIL.Image.Resampling.BILINEAR)
    if new_w == width:
        return img
    canvas = PIL.Image.new("RGB", (width, height), bg)
    canvas.paste(img, (0, 0))
    return canvas


def _to_input(lines: Sequence[np.ndarray]) -> np.ndarray:
    """uint8 HWC lines → float32 NCHW scaled as PP-OCR expects: (p/255 − 0.5)/0.5."""
    batch = np.stack(lines).astype(np.float32)
    batch = batch.transpose(0, 3, 1, 2)
    return batch / 127.5 - 1.0


def _render_one(
    rng: np.random.Generator,
    alphabet: str,
    width: int,
    max_chars: int,
    noise_scale: float,
    invert_prob: float,
    faces: Sequence[str],
    face_p: np.ndarray,
    size_range: tuple[int, int],
) -> tuple[np.ndarray, str]:
    face = str(rng.choice(list(faces), p=face_p))
    size = int(rng.integers(size_range[0], size_range[1] + 1))
    bg, ink = _colours(rng, invert_prob)
    text = _text(rng, alphabet, int(rng.integers(3, max_chars + 1)))
    while True:
        line = _fit(_draw_line(rng, text, face, size, bg, ink), REC_HEIGHT, width, bg)
        if line is not None:
            break
        # Too wide: drop the last word, or the last character of a lone long token.
        text = text.rsplit(" ", 1)[0] if " " in text else text[:-1]
    return _finish(rng, line, noise_scale), text


def _alphabet(characters: Sequence[str] | None) -> str:
    if characters is None:
        return LATIN_ALPHABET
    known = set(characters)
    alphabet = "".join(c for c in LATIN_ALPHABET if c in known)
    if not alphabet:
        raise ValueError("none of the printable ASCII characters is in the given character list")
    return alphabet


def render_lines(
    n: int,
    seed: int = 0,
    *,
    width: int = REC_WIDTH,
    max_chars: int = 18,
    noise: float = 1.0,
    invert_prob: float = 0.08,
    size_range: tuple[int, int] = (14, 40),
    characters: Sequence[str] | None = None,
) -> tuple[np.ndarray, list[str]]:
    """Render ``n`` text lines for the PP-OCRv4 recogniser.

    Returns ``(images, texts)``: ``images`` float32 [n, 3, 48, width] scaled to [-1, 1], ready for
    the model's input ``x``; ``texts`` the ground truth. Deterministic per ``seed``.

    Each line gets a random DejaVu face, a font size from ``size_range`` (small sizes are scaled
    up, which blurs them the way a low-resolution crop is blurred), random margins, colours
    (``invert_prob`` of lines light on dark), and with ``noise`` = 1 mild blur and Gaussian noise
    (0 turns both off; larger values make the lines harder). Lines are scaled to height 48 and
    padded on the right with their background to ``width``, so batches stack; text that does not
    fit is shortened rather than squeezed. ``characters`` (e.g. ``load_characters(model)``)
    restricts the alphabet to characters the model can output.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = np.random.default_rng(seed)
    alphabet = _alphabet(characters)
    faces = [f for f, _ in FONT_FACES]
    weights = np.array([w for _, w in FONT_FACES], dtype=np.float64)
    face_p = weights / weights.sum()
    lines: list[np.ndarray] = []
    texts: list[str] = []
    for _ in range(n):
        img, text = _render_one(rng, alphabet, width, max_chars, noise, invert_prob, faces, face_p, size_range)
        lines.append(img)
        texts.append(text)
    if not lines:
        return np.zeros((0, 3, REC_HEIGHT, width), np.float32), []
    return _to_input(lines), texts


def render_cls(
    n: int,
    seed: int = 0,
    *,
    noise: float = 1.0,
    invert_prob: float = 0.08,
    size_range: tuple[int, int] = (14, 40),
) -> tuple[np.ndarray, np.ndarray]:
    """Render ``n`` lines for the PP-OCR angle classifier, every other one rotated by 180°.

    Returns ``(images, labels)``: float32 [n, 3, 48, 192] scaled to [-1, 1] and int64 labels
    (0 = upright, 1 = rotated 180°). Labels alternate 0, 1, 0, … so exactly half (rounded down) are
    rotated whatever ``n``. The line is rotated *before* it is padded on the right, as PaddleOCR
    rotates the crop and then pads it, so the padding's side gives the label away to nobody.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    PIL = _require_pillow()
    rng = np.random.default_rng(seed)
    faces = [f for f, _ in FONT_FACES]
    weights = np.array([w for _, w in FONT_FACES], dtype=np.float64)
    face_p = weights / weights.sum()
    lines: list[np.ndarray] = []
    labels = np.arange(n, dtype=np.int64) % 2
    for i in range(n):
        face = str(rng.choice(faces, p=face_p))
        size = int(rng.integers(size_range[0], size_range[1] + 1))
        bg, ink = _colours(rng, invert_prob)
        text = _text(rng, LATIN_ALPHABET, int(rng.integers(4, 16)))
        img = _draw_line(rng, text, face, size, bg, ink)
        if labels[i]:
            img = img.transpose(PIL.Image.Transpose.ROTATE_180)
        w, h = img.size
        if w * REC_HEIGHT / h > CLS_WIDTH:  # too long for the classifier: squeeze, as PaddleOCR does
            img = img.resize((CLS_WIDTH, REC_HEIGHT), PIL.Image.Resampling.BILINEAR)
        fitted = _fit(img, REC_HEIGHT, CLS_WIDTH, bg)
        assert fitted is not None
        lines.append(_finish(rng, fitted, noise))
    if not lines:
        return np.zeros((0, 3, REC_HEIGHT, CLS_WIDTH), np.float32), labels
    return _to_input(lines), labels


# ---------------------------------------------------------------------------------------------
# decoding and metrics

SessionLike = Union["ort.InferenceSession", str, os.PathLike]


def load_characters(model: onnx.ModelProto | str | os.PathLike | ort.InferenceSession) -> list[str]:
    """The recogniser's output alphabet: ``chars[i]`` is the text of class ``i + 1``.

    Read from the model's ``metadata_props["character"]`` (one character per line), plus the
    final space class that PaddleOCR appends (``use_space_char``). Class 0, the CTC blank, has no
    entry. Accepts a ModelProto, a path, or an onnxruntime session (whose custom metadata holds
    the same key), so quantized models are decoded with their own copy of the dictionary.
    """
    if hasattr(model, "get_modelmeta"):
        meta = dict(model.get_modelmeta().custom_metadata_map)
    else:
        import onnx

        proto = model if isinstance(model, onnx.ModelProto) else onnx.load(str(model), load_external_data=False)
        meta = {p.key: p.value for p in proto.metadata_props}
    if "character" not in meta:
        raise KeyError(
            "model has no metadata_props key 'character' (the CTC dictionary); a quantized model "
            "must keep the float model's metadata_props"
        )
    return meta["character"].split("\n") + [" "]


def ctc_greedy_decode(probs: np.ndarray, characters: Sequence[str]) -> list[str]:
    """Best-path CTC decoding: argmax per time step, merge repeats, drop blanks (class 0).

    ``probs`` is [N, T, C] (probabilities or logits; only the argmax matters). ``characters[i]``
    is the text of class ``i + 1``, as returned by :func:`load_characters`.
    """
    probs = np.asarray(probs)
    if probs.ndim != 3:
        raise ValueError(f"expected [N, T, C] class scores, got shape {probs.shape}")
    if probs.shape[2] > len(characters) + 1:
        raise ValueError(
            f"model has {probs.shape[2]} classes but the character list covers only "
            f"{len(characters) + 1} (blank + {len(characters)})"
        )
    best = probs.argmax(axis=2)
    keep = best != 0
    keep[:, 1:] &= best[:, 1:] != best[:, :-1]
    return ["".join(characters[c - 1] for c in row[mask]) for row, mask in zip(best, keep)]


def levenshtein(a: str, b: str) -> int:
    """Edit distance (insertions, deletions, substitutions each cost 1): the floor's own
    :func:`onnxptq.analysis.class_scores.edit_distance`, so a CER here counts as the floor does."""
    return edit_distance(a, b)


def cer(preds: Sequence[str], refs: Sequence[str]) -> float:
    """Character error rate: total edit distance over total reference characters (corpus CER).

    Pooling (rather than averaging per-line rates) weights every character equally, so short
    lines do not dominate. Empty references with non-empty predictions count their insertions;
    all-empty references give 0.0 when predictions are empty too, else inf.
    """
    if len(preds) != len(refs):
        raise ValueError(f"{len(preds)} predictions for {len(refs)} references")
    edits = sum(levenshtein(p, r) for p, r in zip(preds, refs))
    total = sum(len(r) for r in refs)
    if total == 0:
        return 0.0 if edits == 0 else float("inf")
    return edits / total


def _session(obj: SessionLike, threads: int | None = None) -> ort.InferenceSession:
    """Use a session as given, or open a CPU session on a model path."""
    if hasattr(obj, "run") and hasattr(obj, "get_inputs"):
        return obj  # type: ignore[return-value]
    from onnxptq.sessions import open_session

    return open_session(str(obj), threads=threads)


def _run_batches(sess: ort.InferenceSession, images: np.ndarray, batch_size: int) -> list[np.ndarray]:
    name = sess.get_inputs()[0].name
    return [sess.run(None, {name: images[i : i + batch_size]})[0] for i in range(0, len(images), batch_size)]


def rec_predict(
    session_or_model_path: SessionLike,
    images: np.ndarray,
    *,
    batch_size: int = 32,
    characters: Sequence[str] | None = None,
) -> list[str]:
    """Run the recogniser on ``images`` and decode greedily; the dictionary comes from the model
    unless ``characters`` is given."""
    sess = _session(session_or_model_path)
    chars = list(characters) if characters is not None else load_characters(sess)
    preds: list[str] = []
    for out in _run_batches(sess, images, batch_size):
        preds += ctc_greedy_decode(out, chars)
    return preds


def normalize_text(text: str) -> str:
    """NFKC-fold, strip leading/trailing spaces and merge runs of spaces into one.

    The recogniser emits stray space classes over the padded right part of a line and over wide
    gaps, and its dictionary holds both ASCII and full-width punctuation (``,`` and ``，``), which
    look alike in a Latin line. Neither is something a quantizer should be scored on, while a
    space lost *between* two words or a wrong letter still counts as an error.
    """
    text = unicodedata.normalize("NFKC", text)
    return " ".join(word for word in text.split(" ") if word)


def rec_cer(
    session_or_model_path: SessionLike,
    images: np.ndarray,
    texts: Sequence[str],
    batch_size: int = 32,
    *,
    characters: Sequence[str] | None = None,
    normalize: bool = True,
) -> float:
    """CER of the recogniser on rendered ``images`` against ``texts`` (see :func:`cer`).

    With ``normalize`` (the default) predictions and references go through
    :func:`normalize_text` first.
    """
    if len(images) != len(texts):
        raise ValueError(f"{len(images)} images for {len(texts)} texts")
    preds = rec_predict(session_or_model_path, images, batch_size=batch_size, characters=characters)
    if normalize:
        preds = [normalize_text(p) for p in preds]
        texts = [normalize_text(t) for t in texts]
    score = cer(preds, texts)
    log.debug("rec CER %.4f on %d lines", score, len(texts))
    return score


def cls_accuracy(
    session_or_model_path: SessionLike,
    images: np.ndarray,
    labels: Sequence[int] | np.ndarray,
    batch_size: int = 64,
) -> float:
    """Top-1 accuracy of the angle classifier (argmax of its [N, 2] output) against ``labels``."""
    labels = np.asarray(labels)
    if len(images) != len(labels):
        raise ValueError(f"{len(images)} images for {len(labels)} labels")
    if len(labels) == 0:
        raise ValueError("no samples to score")
    sess = _session(session_or_model_path)
    pred = np.concatenate([out.argmax(axis=1) for out in _run_batches(sess, images, batch_size)])
    return float((pred == labels).mean())


# ---------------------------------------------------------------------------------------------
# files for the CLI and the calibration readers


def save_npz(path: str | os.PathLike, images: np.ndarray, input_name: str = "x", *, compress: bool = False) -> Path:
    """Write ``images`` as one ``.npz`` keyed by the model's input name, samples on axis 0.

    That is the single-file layout :func:`onnxptq.calibration.readers.as_feed_iterator` and the
    CLI read. The write goes to a temporary file that is then renamed, so a reader never sees half
    a file.
    """
    path = Path(path)
    if path.suffix != ".npz":
        raise ValueError(f"{path}: the file name must end in .npz")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part.npz")
    (np.savez_compressed if compress else np.savez)(tmp, **{input_name: np.asarray(images)})
    os.replace(tmp, path)
    return path


def save_folder(
    folder: str | os.PathLike,
    images: np.ndarray,
    input_name: str = "x",
    *,
    samples_per_file: int = 1,
    fmt: str = "npy",
) -> list[Path]:
    """Write ``images`` as a folder of files, ``samples_per_file`` samples each (axis 0 kept).

    ``fmt="npy"`` writes bare arrays (for single-input models); ``fmt="npz"`` writes arrays keyed
    by ``input_name``. File names are zero-padded so that sorted order is sample order, which is
    the order the folder reader uses.
    """
    if fmt not in ("npy", "npz"):
        raise ValueError(f"fmt must be 'npy' or 'npz', got {fmt!r}")
    if samples_per_file < 1:
        raise ValueError(f"samples_per_file must be >= 1, got {samples_per_file}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    images = np.asarray(images)
    n_files = -(-len(images) // samples_per_file)
    digits = max(5, len(str(n_files)))
    paths = []
    for k in range(n_files):
        chunk = images[k * samples_per_file : (k + 1) * samples_per_file]
        path = folder / f"sample_{k:0{digits}d}.{fmt}"
        if fmt == "npy":
            np.save(path, chunk)
        else:
            np.savez(path, **{input_name: chunk})
        paths.append(path)
    return paths
