"""Issue 27 (branch readers): where PP-OCRv5 rec and PP-OCRv6 tiny rec lose their strings, by measurement.

Four subcommands, all on the same lines (``bench/newmodels.py``'s feeds: 12 calibration lines of
seed 1, 32 held-out lines of seed 1000, testkit's PP-OCR renderer at 48x320), read with greedy CTC:

``table``: every preset with defaults and with ``repair=False``; per row the exact-string agreement
with float, exact strings and CER against the rendered truth (float's own beside it), and the
flipped time steps binned by float's top-2 probability margin (< 0.2, 0.2-0.5, >= 0.5), how many of
the changed strings are wrong in float too, and float's correct reads kept.

``control``: the float model against itself with only its input disturbed: rounded to bf16, or
+-half an 8-bit grey level of uniform noise (1/255 in the model's [-1, 1] units) -- disturbances a
user never notices, to set the quantized rows beside; with ``--json`` (the table's rows) it also
lists each preset's changed lines against those 16 draws of such noise change.

``ablate``: bf16 rounding (a Cast pair after the tensor; weights rounded in place) applied to the
float model by groups: everything, all but one group, one group alone. Groups by structure: the
first conv (pixels), weights, the head (its weight, input, logits), the written-out LayerNorm
internals (ReduceMean/Sub/Pow/Sqrt/Div), the attention internals (MatMul of two activations,
Softmax but the last), HardSigmoid/Sigmoid and their Mul (hard-swish/swish), residual/affine Adds,
BatchNormalization, the rest. Weights computed from constants (a w8 export's ``Cast(int8) * scale``)
are rounded where they are made.

``exclude``: the quantizer itself (``repair=False``) with one structural node group at a time in
``nodes_to_exclude`` (the head, the stem, attention internals, squeeze-excite gates, other linear
layers, residual Adds, depthwise / pointwise convs, the rest), per preset.

    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/readers.py table --models ppocrv5_rec,tinyocr_rec --json /work/cache/readers/table.json
    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/readers.py control --json /work/cache/readers/table.json
    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/readers.py ablate --models ppocrv5_rec,tinyocr_rec
    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/readers.py exclude --models tinyocr_rec --presets A8W8,MXFP8_E4M3

Findings: bench/RESULTS.md "Text recognizers under every preset: where PP-OCRv5/v6 rec lose".
"""

from __future__ import annotations

import _common  # noqa: F401  (puts the repository root on sys.path)

import argparse
import dataclasses
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import newmodels as nm  # noqa: E402
from testkit import zoo  # noqa: E402
from testkit.ocr import levenshtein  # noqa: E402

BINS = ((0.0, 0.2), (0.2, 0.5), (0.5, 1.01))


def model_path(name: str) -> Path:
    return nm.SRC / nm.MODELS[name][0]


def characters(name: str) -> list[str]:
    """Class i's text (class 0: CTC blank). tinyocr carries its dictionary in the model's metadata;
    ocrspine ships ``ppocr_keys_v5.txt`` beside the model (its first line is the blank) and PaddleOCR
    appends the space class."""
    path = model_path(name)
    keys = path.parent / "ppocr_keys_v5.txt"
    if keys.exists():
        return [line.rstrip("\n") for line in keys.open(encoding="utf8")] + [" "]
    from testkit.ocr import load_characters

    return ["<blank>"] + load_characters(str(path))


def lines(name: str) -> tuple[list[dict], list[dict], list[str]]:
    from testkit.ocr import render_lines

    make = nm.MODELS[name][1]
    _, texts = render_lines(32, seed=1000, width=320)
    return make(12, 1), make(32, 1000), texts


def decode(probs: np.ndarray, chars: list[str]) -> str:
    return "".join(chars[i] if i < len(chars) else "?" for i in zoo._ctc_indices(probs))


def cer(a: str, b: str) -> float:
    return levenshtein(a, b) / max(len(b), 1)


def compare(ref_out: list[np.ndarray], test_out: list[np.ndarray], texts: list[str], chars: list[str]) -> dict:
    """String agreement with float, accuracy against the truth, flipped steps by float's margin."""
    flips = [0] * len(BINS)
    positions = [0] * len(BINS)
    agree = right_f = right_t = 0
    cer_f = cer_t = 0.0
    changed_float_wrong = changed_near_tie = kept = 0
    changed_lines = []
    for line, (a, b, txt) in enumerate(zip(ref_out, test_out, texts)):
        a2, b2 = a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1])
        top = np.sort(a2, -1)
        margin = top[:, -1] - top[:, -2]
        flipped = a2.argmax(-1) != b2.argmax(-1)
        for k, (lo, hi) in enumerate(BINS):
            sel = (margin >= lo) & (margin < hi)
            positions[k] += int(sel.sum())
            flips[k] += int((sel & flipped).sum())
        sf, st = decode(a, chars), decode(b, chars)
        agree += sf == st
        right_f += sf == txt
        right_t += st == txt
        kept += sf == txt and st == txt
        cer_f += cer(sf, txt)
        cer_t += cer(st, txt)
        changed_float_wrong += sf != st and sf != txt
        if sf != st:
            changed_lines.append(line)
        changed_near_tie += sf != st and bool((margin[flipped] < 0.5).all())
    n = len(texts)
    return {"agreement": agree / n, "truth_float": right_f / n, "truth": right_t / n, "cer_float": cer_f / n,
            "cer": cer_t / n, "changed": n - agree, "changed_float_wrong": changed_float_wrong, "changed_near_tie": changed_near_tie,
            "kept_reads": kept / max(right_f, 1), "changed_lines": changed_lines,
            "flips": flips, "positions": positions}


def run_all(model, feeds) -> list[np.ndarray]:
    run = zoo.session_runner(model)
    return [run(f)[0] for f in feeds]


def fmt_row(label: str, r: dict) -> str:
    fl = " / ".join(f"{f} of {p}" for f, p in zip(r["flips"], r["positions"]))
    return (f"| {label} | {r['agreement']:.3f} | {r['changed']} ({r['changed_float_wrong']}; {r['changed_near_tie']}) | {r['truth']:.3f} "
            f"({r['truth_float']:.3f}) | {r['kept_reads']:.3f} | {r['cer']:.4f} ({r['cer_float']:.4f}) | {fl} |")


HEADER = ("| row | agreement with float | strings changed (float wrong too; every flip at float margin < 0.5) | exact vs truth (float) | "
          "float's correct reads kept | CER vs truth (float) | flipped steps at float margin < 0.2 / 0.2-0.5 / >= 0.5 |\n|---|---|---|---|---|---|---|")


def cmd_table(a) -> None:
    import onnxptq
    from onnxptq.config.presets import resolve_config

    logging.basicConfig(level=logging.ERROR)
    rows = json.loads(Path(a.json).read_text()) if a.json and Path(a.json).exists() else []
    for name in a.models.split(","):
        calib, held, texts = lines(name)
        chars = characters(name)
        ref = run_all(model_path(name), held)
        print(f"\n{name}\n{HEADER}", flush=True)
        for preset in a.presets.split(","):
            for repair in (True, False):
                cfg = dataclasses.replace(resolve_config(preset), repair=repair)
                with tempfile.TemporaryDirectory(dir=a.tmp) as tmp:
                    out = Path(tmp) / "q.onnx"
                    t0, c0 = time.perf_counter(), time.process_time()
                    res = onnxptq.quantize(str(model_path(name)), cfg, data=list(calib), output=str(out))
                    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                    r = compare(ref, run_all(out, held), texts, chars)
                rep = res.repair or {}
                kept = len(rep.get("kept_float", []) or []) if isinstance(rep, dict) else 0
                r.update(model=name, preset=preset, repair=repair, kept=kept, cpu_s=round(cpu, 1), wall_s=round(wall, 1))
                label = f"{preset} {'defaults' if repair else 'repair=False'}" + (f" (repair kept {kept})" if kept else "")
                print(fmt_row(label, r), flush=True)
                rows = [x for x in rows if (x["model"], x["preset"], x["repair"]) != (name, preset, repair)] + [r]
                if a.json:
                    Path(a.json).write_text(json.dumps(rows, indent=1))


def cmd_control(a) -> None:
    import ml_dtypes

    for name in a.models.split(","):
        _, held, texts = lines(name)
        chars = characters(name)
        ref = run_all(model_path(name), held)
        rng = np.random.default_rng(7)
        print(f"\n{name}\n{HEADER}", flush=True)
        variants = {
            "float, input rounded to bf16": [{k: v.astype(ml_dtypes.bfloat16).astype(np.float32) for k, v in f.items()} for f in held],
            "float, input +-1/2 grey level": [{k: (v + rng.uniform(-1 / 255, 1 / 255, v.shape)).astype(np.float32) for k, v in f.items()}
                                              for f in held],
        }
        for label, feeds in variants.items():
            print(fmt_row(label, compare(ref, run_all(model_path(name), feeds), texts, chars)), flush=True)
        # Which lines are fragile: changed by some draw of half a grey level of noise (16 draws).
        counts: dict[int, int] = {}
        for seed in range(16):
            noise = np.random.default_rng(100 + seed)
            feeds = [{k: (v + noise.uniform(-1 / 255, 1 / 255, v.shape)).astype(np.float32) for k, v in f.items()} for f in held]
            for i in compare(ref, run_all(model_path(name), feeds), texts, chars)["changed_lines"]:
                counts[i] = counts.get(i, 0) + 1
        print(f"lines changed by half a grey level of noise (line: draws of 16): {dict(sorted(counts.items()))}", flush=True)
        if a.json and Path(a.json).exists():
            for r in json.loads(Path(a.json).read_text()):
                if r["model"] == name and not r["repair"]:
                    lost = [i for i in r["changed_lines"] if i not in counts]
                    print(f"{r['preset']}: changed lines {r['changed_lines']}; not changed by any noise draw: {lost}", flush=True)


def groups(model) -> dict[str, tuple[set[str], set[str]]]:
    """(activations, weights) per structural group of the float model."""
    import onnx
    from onnx import TensorProto

    inits = {i.name: i for i in model.graph.initializer}
    inferred = onnx.shape_inference.infer_shapes(model)
    floats = {v.name for v in [*inferred.graph.value_info, *inferred.graph.output]
              if v.type.tensor_type.elem_type == TensorProto.FLOAT}
    producer = {o: n for n in model.graph.node for o in n.output}
    consts = set(inits)  # weights stored another way (tinyocr: Cast(int8) * scale) are computed constants
    for n in model.graph.node:
        if n.op_type == "Constant" or all(i in consts for i in n.input if i):
            consts.update(n.output)
    nodes = [n for n in model.graph.node if n.op_type not in ("Identity", "Shape", "Constant") and not set(n.output) <= consts]
    softmaxes = [n for n in nodes if n.op_type == "Softmax"]
    head_mm = next(n for n in reversed(nodes) if n.op_type in ("MatMul", "Gemm", "Conv") and any(i in consts for i in n.input))
    first_conv = next(n for n in nodes if n.op_type == "Conv")
    out: dict[str, tuple[set[str], set[str]]] = {}

    def add(group, acts=(), weights=()):
        g = out.setdefault(group, (set(), set()))
        g[0].update(o for o in acts if o in floats)
        g[1].update(w for w in weights if w in inits and inits[w].data_type == TensorProto.FLOAT)
        g[0].update(w for w in weights if w not in inits and w in floats)  # a computed weight: rounded where it is made

    def act_in(n):
        return [i for i in n.input if i and i not in consts]

    for n in nodes:
        ws = [i for i in n.input if i in consts]
        if n is first_conv:
            add("first conv (pixels, weight, output)", [*n.output], ws)
            continue
        if n is head_mm or (n.op_type == "Add" and producer.get(act_in(n)[0] if act_in(n) else "") is head_mm):
            add("head (input, weight, logits)", [*n.output, *act_in(head_mm)], ws)
            continue
        if n is softmaxes[-1]:
            add("head (input, weight, logits)", n.output)
            continue
        if n.op_type in ("ReduceMean", "Sub", "Pow", "Sqrt", "Div"):
            add("written-out norm internals", n.output, ws)
        elif n.op_type == "Softmax" or (n.op_type == "MatMul" and not ws):
            add("attention internals (QK^T, softmax, P@V)", n.output, ws)
        elif n.op_type in ("HardSigmoid", "Sigmoid") or (
                n.op_type == "Mul" and any(producer.get(i) is not None and producer[i].op_type in ("HardSigmoid", "Sigmoid") for i in n.input)):
            add("gates (HardSigmoid/Sigmoid and their Mul)", n.output, ws)
        elif n.op_type == "Add":
            add("Adds (residual, affine, bias)", n.output, ws)
        elif n.op_type == "BatchNormalization":
            add("BatchNormalization", n.output, ws)
        elif n.op_type in ("Conv", "MatMul", "Gemm"):
            add("other Conv/MatMul outputs and weights", n.output, ws)
        else:
            add("the rest (Mul by constants, pools, reshapes)", n.output, ws)
    return out


def rounded(model, acts: set[str], weights: set[str]):
    """The float model with bf16 rounding after ``acts`` and on ``weights`` (opset raised to 13 for bf16 Cast)."""
    import ml_dtypes
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    m = onnx.ModelProto()
    m.CopyFrom(model)
    for w in m.graph.initializer:
        if w.name in weights:
            w.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(w).astype(ml_dtypes.bfloat16).astype(np.float32), w.name))
    new = []
    for n in m.graph.node:
        new.append(n)
        for k, o in enumerate(list(n.output)):
            if o in acts:
                n.output[k] = o + "__f32"
                new += [helper.make_node("Cast", [o + "__f32"], [o + "__bf16"], to=TensorProto.BFLOAT16),
                        helper.make_node("Cast", [o + "__bf16"], [o], to=TensorProto.FLOAT)]
    del m.graph.node[:]
    m.graph.node.extend(new)
    return m


def cmd_ablate(a) -> None:
    import onnx
    import onnx.version_converter

    for name in a.models.split(","):
        _, held, texts = lines(name)
        chars = characters(name)
        base = onnx.load(str(model_path(name)))
        if max(o.version for o in base.opset_import if o.domain in ("", "ai.onnx")) < 13:
            base = onnx.version_converter.convert_version(base, 13)
        ref = run_all(base, held)
        gs = groups(base)
        all_a = set().union(*(g[0] for g in gs.values()))
        all_w = set().union(*(g[1] for g in gs.values()))
        print(f"\n{name}\n{HEADER}", flush=True)
        print(fmt_row(f"bf16 everywhere ({len(all_a)} tensors, {len(all_w)} weights)", compare(ref, run_all(rounded(base, all_a, all_w), held), texts, chars)), flush=True)
        print(fmt_row("bf16 weights only", compare(ref, run_all(rounded(base, set(), all_w), held), texts, chars)), flush=True)
        print(fmt_row("bf16 activations only", compare(ref, run_all(rounded(base, all_a, set()), held), texts, chars)), flush=True)
        for g, (acts, ws) in gs.items():
            r_but = compare(ref, run_all(rounded(base, all_a - acts, all_w - ws), held), texts, chars)
            print(fmt_row(f"all but {g} ({len(acts)} tensors, {len(ws)} weights)", r_but), flush=True)
            r_only = compare(ref, run_all(rounded(base, acts, ws), held), texts, chars)
            print(fmt_row(f"only {g}", r_only), flush=True)


def node_groups(model) -> dict[str, list[str]]:
    """Node names per structural group, for ``nodes_to_exclude`` (names survive prepare)."""
    inits = {i.name for i in model.graph.initializer}
    alias: dict[str, str] = {}
    for n in model.graph.node:  # constants: initializers and what is computed from them alone
        if n.op_type == "Constant" or all(i in inits for i in n.input if i):  # folds (w8 weights: Cast * scale)
            inits.update(n.output)
        elif n.op_type == "Identity":
            alias[n.output[0]] = alias.get(n.input[0], n.input[0])
    nodes = [n for n in model.graph.node if n.op_type not in ("Identity", "Constant") and not set(n.output) <= inits]
    readers: dict[str, list] = {}
    for n in nodes:
        for i in n.input:
            readers.setdefault(alias.get(i, i), []).append(n)
    softmaxes = [n for n in nodes if n.op_type == "Softmax"]
    head = next(n for n in reversed(nodes) if n.op_type in ("MatMul", "Gemm") and any(i in inits for i in n.input))
    out: dict[str, list[str]] = {"head (MatMul, bias Add, Softmax)": [head.name, softmaxes[-1].name]}
    out["head (MatMul, bias Add, Softmax)"] += [r.name for r in readers.get(head.output[0], []) if r.op_type == "Add"]
    first = next(n for n in nodes if n.op_type == "Conv")
    out["first conv (+BN)"] = [first.name] + [r.name for r in readers.get(first.output[0], []) if r.op_type == "BatchNormalization"]
    out["attention internals (QK^T, softmax, P@V)"] = [n.name for n in nodes if (n.op_type == "MatMul" and not any(i in inits for i in n.input))
                                                      or (n.op_type == "Softmax" and n is not softmaxes[-1])]
    se = []
    for g in (n for n in nodes if n.op_type in ("GlobalAveragePool", "ReduceMean")):
        frontier, seen = [g], []
        while frontier:
            n = frontier.pop()
            seen.append(n)
            for r in readers.get(n.output[0], []):
                if r.op_type == "Mul" and alias.get(g.input[0], g.input[0]) in {alias.get(i, i) for i in r.input}:
                    seen.append(r)
                elif r not in seen and len(seen) < 12:
                    frontier.append(r)
        if seen[-1].op_type == "Mul" and len(seen) > 2:  # back to the gated tensor: a squeeze-excite
            se += [n.name for n in seen]
    out["squeeze-excite gates (GAP ... Mul)"] = se
    conv_g = {n.name: next((a.i for a in n.attribute if a.name == "group"), 1) for n in nodes if n.op_type == "Conv"}
    linears = [n.name for n in nodes if n.op_type in ("MatMul", "Gemm") and any(i in inits for i in n.input) and n is not head]
    out["other linear layers (MatMul/Gemm with a weight)"] = linears
    out["residual Adds (two activations)"] = [n.name for n in nodes if n.op_type == "Add" and n.name not in se
                                              and not any(alias.get(i, i) in inits for i in n.input)]
    out["depthwise convs"] = [k for k, g in conv_g.items() if g > 1]
    out["pointwise/other convs"] = [k for k, g in conv_g.items() if g == 1 and k != first.name]
    taken = {x for v in out.values() for x in v}
    out["the rest (Adds, Muls, HardSigmoid, BN, reshapes)"] = [n.name for n in nodes if n.name not in taken]
    return out


def cmd_exclude(a) -> None:
    """Per preset (repair=False): the float model's nodes kept float by structural group."""
    import onnx
    import onnxptq
    from onnxptq.config.presets import resolve_config

    logging.basicConfig(level=logging.ERROR)
    for name in a.models.split(","):
        calib, held, texts = lines(name)
        chars = characters(name)
        ref = run_all(model_path(name), held)
        gs = node_groups(onnx.load(str(model_path(name))))
        print(f"\n{name}\n{HEADER}", flush=True)
        for preset in a.presets.split(","):
            for label, excl in [("plain", []), *[(f"{g} float ({len(v)} nodes)", v) for g, v in gs.items()]]:
                cfg = dataclasses.replace(resolve_config(preset), repair=False, nodes_to_exclude=tuple(excl))
                with tempfile.TemporaryDirectory(dir=a.tmp) as tmp:
                    out = Path(tmp) / "q.onnx"
                    onnxptq.quantize(str(model_path(name)), cfg, data=list(calib), output=str(out))
                    r = compare(ref, run_all(out, held), texts, chars)
                print(fmt_row(f"{preset}: {label}", r), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=("table", "control", "ablate", "exclude"))
    ap.add_argument("--models", default="ppocrv5_rec,tinyocr_rec")
    ap.add_argument("--presets", default=",".join(nm.PRESETS))
    ap.add_argument("--json", default=None)
    ap.add_argument("--tmp", default=os.environ.get("TMPDIR", "/tmp"))
    a = ap.parse_args()
    {"table": cmd_table, "control": cmd_control, "ablate": cmd_ablate, "exclude": cmd_exclude}[a.command](a)


if __name__ == "__main__":
    main()
