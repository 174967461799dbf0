"""Why ddddocr_ocr's strings change under 16-bit formats: which position, which margin, which nodes.

``flips``: quantize with one preset (repair off, so the figure is the format's own), read the zoo's
held-out captchas and list every changed string with, at each flipped time step, float's top two
classes, their logits, float's margin (logit gap), that margin relative to the top logit, and the
quantized model's margin of float's class (negative: flipped).

``bisect``: the same count of changed strings with groups of nodes kept float (``nodes_to_exclude``):
the CNN's first/second half, the LSTM, the CTC head; which part of the plan the flips come from.

``first-conv``: the float model with only its input rounded to bf16, only one 8-bit grey level of
noise added, or only the first Conv's weights rounded to bf16; and how much those weights cancel.

``bias-correction``: changed strings per preset with ``bias_correction`` off and on (on: the
correction also covers float-format weights, pipeline/refine/bias_correction.py).

``output-rounding``: float's logits with only the head's output rounded to bf16 / fp16 (the last
rounding any 16-bit format applies there): how many strings that alone changes, i.e. how many reads
sit on margins below what the format can hold at the output itself.

    PYTHONPATH=src:. nice -n 5 python bench/ocr_flips.py flips --presets BF16,A16W8,MX9
    PYTHONPATH=src:. nice -n 5 python bench/ocr_flips.py bisect --presets BF16
    PYTHONPATH=src:. nice -n 5 python bench/ocr_flips.py output-rounding
    PYTHONPATH=src:. nice -n 5 python bench/ocr_flips.py first-conv
    PYTHONPATH=src:. nice -n 5 python bench/ocr_flips.py bias-correction --presets BF16,BFP16,MX9,A16W8
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


def _quantized(model, preset: str, exclude: tuple[str, ...] = (), **changes):
    import onnxptq
    from onnxptq.config.presets import get_preset

    cfg = dataclasses.replace(get_preset(preset), repair=False, nodes_to_exclude=exclude, **changes)
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
            "LSTM + head": (nodes[lstm].name, *head), "CNN last quarter": tuple(cnn[3 * len(cnn) // 4:]),
            "CNN first quarter": tuple(cnn[:len(cnn) // 4]), "CNN second quarter": tuple(cnn[len(cnn) // 4:half]),
            "first Conv, its Sigmoid and Mul": tuple(cnn[:3]), "first Conv": tuple(cnn[:1])}


def bisect(presets: list[str], n: int) -> None:
    model, feeds, texts, charset, floats = _setup(n)
    groups = _node_groups(model)
    for preset in presets:
        for label, nodes in groups.items():
            count, kept, changed = _score(floats, _outputs(_quantized(model, preset, nodes), feeds), texts, charset)
            print(f"{preset} with {label} float ({len(nodes)} nodes): {count} of {n} strings changed "
                  f"(agreement {1 - count / n:.4f}), float's correct reads kept {kept:.4f}; changed {changed}", flush=True)


def first_conv(n: int) -> None:
    import ml_dtypes
    from onnx import numpy_helper

    model, feeds, texts, charset, floats = _setup(n)
    ref = zoo.session_runner(model.path())

    def bf16(a):
        return a.astype(ml_dtypes.bfloat16).astype(np.float32)

    def report(label, gots):
        count, kept, changed = _score(floats, gots, texts, charset)
        print(f"float model, {label}: {count} of {n} strings changed, float's correct reads kept {kept:.4f}; changed {changed}")

    report("input rounded to bf16", _outputs(lambda f: ref({"input1": bf16(f["input1"])}), feeds))
    noisy = {id(f): (np.round(f["input1"] * 255) + np.random.default_rng(i).uniform(-0.5, 0.5, f["input1"].shape))
             .astype(np.float32) / 255 for i, f in enumerate(feeds)}
    report("input plus uniform noise of one 8-bit grey level", _outputs(lambda f: ref({"input1": noisy[id(f)]}), feeds))
    proto = onnx.load(str(model.path()))
    conv = proto.graph.node[0]
    w = next(numpy_helper.to_array(t) for t in proto.graph.initializer if t.name == conv.input[1])
    for t in proto.graph.initializer:
        if t.name == conv.input[1]:
            t.CopyFrom(numpy_helper.from_array(bf16(w), t.name))
    report(f"only {conv.name}'s weights rounded to bf16", _outputs(zoo.session_runner(proto), feeds))
    flat = w.reshape(w.shape[0], -1).astype(np.float64)
    ratio = np.abs(flat.sum(1)) / np.abs(flat).sum(1)
    print(f"{conv.name} {list(w.shape)}: max |w| {np.abs(w).max():.2f}; per output channel |Σw| / Σ|w|: median {np.median(ratio):.4f}, "
          f"min {ratio.min():.5f}")


def bias_correction(presets: list[str], n: int) -> None:
    model, feeds, texts, charset, floats = _setup(n)
    for preset in presets:
        for flag in (False, True):
            count, kept, changed = _score(floats, _outputs(_quantized(model, preset, bias_correction=flag), feeds), texts, charset)
            print(f"{preset} bias_correction={flag}: {count} of {n} strings changed (agreement {1 - count / n:.4f}), "
                  f"float's correct reads kept {kept:.4f}; changed {changed}", flush=True)


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
    ap.add_argument("what", choices=["flips", "bisect", "output-rounding", "first-conv", "bias-correction"])
    ap.add_argument("--presets", default="BF16")
    ap.add_argument("--n", type=int, default=zoo.HELDOUT_CAPTCHAS)
    args = ap.parse_args()
    if args.what == "flips":
        flips(args.presets.split(","), args.n)
    elif args.what == "bisect":
        bisect(args.presets.split(","), args.n)
    elif args.what == "first-conv":
        first_conv(args.n)
    elif args.what == "bias-correction":
        bias_correction(args.presets.split(","), args.n)
    else:
        output_rounding(args.n)


if __name__ == "__main__":
    main()
