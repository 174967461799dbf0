"""ddddocr_ocr's captchas: what the float model reads, and what each preset's changed strings are.

issue 27 / zoodata17 item 1. ``float``: the float model's greedy CTC reads of the zoo's held-out captchas
(``testkit.zoo_data.ddddocr_text_captchas_with_text``, seed 2) against the rendered text, strictly and with letter
case aside: whether the model carries case on these glyphs at all. ``flips``: each preset quantized with its defaults
on ``--calib`` calibration captchas (seed 1), the held-out strings that differ from float's, split into those that
differ only in case and the others, each of the others with float's smallest probability margin (top-1 − top-2)
over its non-blank steps, and the library's verdict and repair.

    PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 nice -n 5 python bench/zoodata_captcha.py float
    PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 nice -n 5 python bench/zoodata_captcha.py flips --presets A8W8,MXFP8_E4M3 --calib 48
"""

from __future__ import annotations

import argparse
import logging

import numpy as np

import _common  # noqa: F401  (the repository root on sys.path)

from testkit import zoo, zoo_data


def _setup(n: int):
    model = zoo.get("ddddocr_ocr")
    root = model.root()
    charset = zoo._ddddocr_charset(root)
    held, texts = zoo_data.ddddocr_text_captchas_with_text(root, n, zoo.HELDOUT_SEED)
    return model, root, charset, held, texts


def _read(charset, out: np.ndarray) -> str:
    return "".join(charset[i] for i in zoo._ctc_indices(out))


def _min_margin(out: np.ndarray) -> float:
    """Float's smallest probability margin (top-1 − top-2) over the steps it reads as a character."""
    o = out.reshape(-1, out.shape[-1]).astype(np.float64)
    p = np.exp(o - o.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    top = np.sort(p, 1)[:, -2:]
    steps = p.argmax(1) != 0
    return float((top[:, 1] - top[:, 0])[steps].min()) if steps.any() else 1.0


def float_reads(n: int) -> None:
    model, root, charset, held, texts = _setup(n)
    ref = zoo.session_runner(model.path())
    reads = [_read(charset, ref(f)[0]) for f in held]
    strict = np.mean([r == t for r, t in zip(reads, texts)])
    aside = np.mean([r.lower() == t.lower() for r, t in zip(reads, texts)])
    case_wrong = sum(a != b for r, t in zip(reads, texts) if r.lower() == t.lower() for a, b in zip(r, t))
    letters = sum(c.isalpha() for t, r in zip(texts, reads) if r.lower() == t.lower() for c in t)
    print(f"| held-out captchas | float reads the text exactly | float reads it, case aside | letters read in the wrong case (of those read) |")
    print("|---:|---:|---:|---:|")
    print(f"| {n} | {strict:.4f} | {aside:.4f} | {case_wrong} of {letters} |")


def flips(presets: list[str], calib_n: int, n: int) -> None:
    import onnxptq

    model, root, charset, held, texts = _setup(n)
    calib = model.make(root, calib_n, zoo.CALIBRATION_SEED)
    ref = zoo.session_runner(model.path())
    refs = [ref(f)[0] for f in held]
    print("| preset | calibration | strings changed | case only | other (float's text → float → quantized, float's min margin) | "
          "strict agreement | case aside | floor | repair |")
    print("|---|---:|---:|---:|---|---:|---:|---|---|")
    for preset in presets:
        result = onnxptq.quantize(str(model.path()), preset, data=list(calib))
        test = zoo.session_runner(result.model)
        case_only, other = 0, []
        for f, t, a in zip(held, texts, refs):
            sa, sb = _read(charset, a), _read(charset, test(f)[0])
            if sa == sb:
                continue
            if sa.lower() == sb.lower():
                case_only += 1
            else:
                other.append(f"`{t}` → `{sa}` → `{sb}` ({_min_margin(a):.3f})")
        changed = case_only + len(other)
        floor = result.floor
        verdict = "-" if floor is None else ("holds" if floor.ok else "BROKEN") + ("" if not floor.unconfirmed else ", not confirmed")
        rep = result.repair if isinstance(getattr(result, "repair", None), dict) else {}
        kept = f"{len(rep['kept_float'])} kept" if "kept_float" in rep else ("not judged" if rep.get("unjudged") else "-")
        print(f"| {preset} | {calib_n} | {changed} | {case_only} | {'; '.join(other) or '-'} | {1 - changed / n:.4f} | "
              f"{1 - len(other) / n:.4f} | {verdict} | {kept} |", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=("float", "flips"))
    ap.add_argument("--presets", default="A8W8")
    ap.add_argument("--calib", type=int, default=zoo.CALIBRATION_CAPTCHAS)
    ap.add_argument("--n", type=int, default=zoo.HELDOUT_CAPTCHAS)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    if args.what == "float":
        float_reads(args.n)
    else:
        flips([p for p in args.presets.split(",") if p], args.calib, args.n)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
