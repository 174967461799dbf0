"""Why ddddocr_ocr's strings change under 16-bit formats: which position, which margin, which nodes.

``flips``: quantize with one preset (repair off, so the figure is the format's own), read the zoo's
held-out captchas and list every changed string with, at each flipped time step, float's top two
classes, their logits, float's margin (logit gap), that margin relative to the top logit, and the
quantized model's margin of float's class (negative: flipped).

``bisect``: the same count of changed strings with groups of nodes kept float (``nodes_to_exclude``):
the CNN's first/second half, the LSTM, the CTC head; which part of the plan the flips come from.

``output-rounding``: float's logits with only the head's output rounded to bf16 / fp16 (the last
rounding any 16-bit format applies there): how many strings that alone changes, i.e. how many reads
sit on margins below what the format can hold at the output itself.

    PYTHONPATH=src:. nice -n 5 python bench/ocr_flips.py flips --presets BF16,A16W8,MX9
    PYTHONPATH=src:. nice -n 5 python bench/ocr_flips.py bisect --presets BF16
    PYTHONPATH=src:. nice -n 5 python bench/ocr_flips.py output-rounding
"""

from __future__ import annotations

import argparse
import dataclasses
import logging

import numpy as np
import onnx

from testkit import zoo, zoo_data


def _setup(n: int):
    model = zoo.get("ddddocr_ocr")
    feeds, texts = zoo_data.ddddocr_text_captchas_with_text(model.root(), n, zoo.HELDOUT_SEED)
    charset = zoo_data.load_module(model.root() / "ddddocr" / "charsets.py", "ddddocr_charsets").CHARSET_BETA
    ref = zoo.session_runner(model.path())
    floats = [ref(f)[0].reshape(-1, ref(f)[0].shape[-1]).astype(np.float64) for f in feeds]
    return model, feeds, texts, charset, floats


def _read(logits: np.ndarray, charset) -> str:
    return "".join(charset[i] for i in zoo._ctc_indices(logits))


def _quantized(model, preset: str, exclude: tuple[str, ...] = ()):
    import onnxptq
    from onnxptq.config.presets import get_preset

    cfg = dataclasses.replace(get_preset(preset), repair=False, nodes_to_exclude=exclude)
    return zoo.session_runner(onnxptq.quantize(str(model.path()), cfg, data=model.samples("calibration")).model)


def _outputs(run, feeds):
    return [run(f)[0].reshape(-1, run(f)[0].shape[-1]).astype(np.float64) for f in feeds]


def _score(floats, gots, texts, charset) -> tuple[int, float, list[int]]:
    """(changed strings, float's correct reads kept, indices changed)."""
    changed = [i for i, (a, b) in enumerate(zip(floats, gots)) if zoo._ctc_indices(a) != zoo._ctc_indices(b)]
    correct = [i for i, a in enumerate(floats) if _read(a, charset).lower() == texts[i].lower()]
    kept = np.mean([_read(gots[i], charset).lower() == texts[i].lower() for i in correct])
    return len(changed), float(kept), changed


def flips(presets: list[str], n: int) -> None:
    model, feeds, texts, charset, floats = _setup(n)
    correct = sum(_read(a, charset).lower() == t.lower() for a, t in zip(floats, texts))
    print(f"{n} held-out captchas; float reads {correct} correctly (case-insensitive)")
    for preset in presets:
        gots = _outputs(_quantized(model, preset), feeds)
        count, kept, changed = _score(floats, gots, texts, charset)
        print(f"\n{preset}: {count} of {n} strings changed (agreement {1 - count / n:.4f}); float's correct reads kept {kept:.4f}")
        for i in changed:
            a, b = floats[i], gots[i]
            print(f"  #{i} text {texts[i]!r}: float {_read(a, charset)!r} -> {_read(b, charset)!r}")
            for t in np.nonzero(a.argmax(-1) != b.argmax(-1))[0]:
                order = np.argsort(a[t])[::-1]
                z1, z2 = a[t, order[0]], a[t, order[1]]
                q = b[t, order[0]] - np.max(np.delete(b[t], order[0]))
                print(f"    step {t}: float {charset[order[0]]!r} {z1:.3f} vs {charset[order[1]]!r} {z2:.3f}: margin {z1 - z2:.4f} "
                      f"({(z1 - z2) / abs(z1):.5f} of the top); quantized reads {charset[int(b[t].argmax())]!r}, "
                      f"margin of float's class {q:.4f}")


def _node_groups(model) -> dict[str, tuple[str, ...]]:
    nodes = onnx.load(str(model.path())).graph.node
    lstm = next(i for i, nd in enumerate(nodes) if nd.op_type == "LSTM")
    cnn = [nd.name for nd in nodes[:lstm] if nd.op_type in ("Conv", "Sigmoid", "Mul", "Add")]
    half = len(cnn) // 2
    head = tuple(nd.name for nd in nodes[lstm + 1:] if nd.op_type == "Gemm")
    return {"nothing": (), "CNN first half": tuple(cnn[:half]), "CNN second half": tuple(cnn[half:]),
            "CNN": tuple(cnn), "LSTM": (nodes[lstm].name,), "head (Gemm)": head,
            "LSTM + head": (nodes[lstm].name, *head), "CNN last quarter": tuple(cnn[3 * len(cnn) // 4:])}


def bisect(presets: list[str], n: int) -> None:
    model, feeds, texts, charset, floats = _setup(n)
    groups = _node_groups(model)
    for preset in presets:
        for label, nodes in groups.items():
            count, kept, changed = _score(floats, _outputs(_quantized(model, preset, nodes), feeds), texts, charset)
            print(f"{preset} with {label} float ({len(nodes)} nodes): {count} of {n} strings changed "
                  f"(agreement {1 - count / n:.4f}), float's correct reads kept {kept:.4f}; changed {changed}", flush=True)


def output_rounding(n: int) -> None:
    import ml_dtypes

    model, feeds, texts, charset, floats = _setup(n)
    for name, dtype in (("bf16", ml_dtypes.bfloat16), ("fp16", np.float16)):
        gots = [a.astype(np.float32).astype(dtype).astype(np.float64) for a in floats]
        count, kept, changed = _score(floats, gots, texts, charset)
        print(f"float logits rounded to {name} at the output only: {count} of {n} strings changed, "
              f"float's correct reads kept {kept:.4f}; changed {changed}")
    margins = []
    for a in floats:
        two = np.sort(a, -1)[:, -2:]
        dec = a.argmax(-1) != 0
        margins.append(((two[:, 1] - two[:, 0]) / np.abs(two[:, 1]))[dec])
    rel = np.concatenate(margins)
    for cut in (2.0 ** -10, 2.0 ** -8, 2.0 ** -7, 2.0 ** -6, 2.0 ** -5):
        print(f"non-blank decision steps with float margin ≤ {cut:.5f} of the top logit: {int((rel <= cut).sum())} of {rel.size}")


def main() -> None:
    logging.basicConfig(level=logging.ERROR)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["flips", "bisect", "output-rounding"])
    ap.add_argument("--presets", default="BF16")
    ap.add_argument("--n", type=int, default=zoo.HELDOUT_CAPTCHAS)
    args = ap.parse_args()
    if args.what == "flips":
        flips(args.presets.split(","), args.n)
    elif args.what == "bisect":
        bisect(args.presets.split(","), args.n)
    else:
        output_rounding(args.n)


if __name__ == "__main__":
    main()
