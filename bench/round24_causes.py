"""Where a round-24 model's loss sits (bench/RESULTS.md, "The twenty-fourth round of outside models").

For ImageQualityChecker's EfficientNet-B3 (opset 10, BatchNormalization and Swish unfused, squeeze-and-excitation
blocks): the preset with repair off, then with one structural group of nodes left float at a time (the groups are found
by graph structure: the squeeze-excitation paths from each ReduceMean to the Sigmoid gating its block, the depthwise
convolutions, the Swish pairs Sigmoid→Mul, the stem, the classifier), each judged on the same fresh feeds by output
cosine and top-1 agreement with float (``--parts groups``). ``--parts stem`` looks at the stem alone: the float model
with only its input rounded (to the A8W8 input grid, to MX E4M3 with a pixel's three channels as the block, to
BF16), the stem Conv as the only quantized node (A8W8, A16W8), and the per-channel spans of the stem's output (after
the folded BatchNormalization) against the tensor's one 8-bit step. ``--parts sjtu``: pysjtu's letter heads with
repair off, the answers equal to float's and the flips per head on the calibration feeds and on fresh ones, with
float's logit gap at each flip. ``--parts realism``: how often float reads the captchas as drawn (vk_captcha,
pysjtu_nn) and its CTC steps under a 0.5 probability margin.

    NEWMODELS24_SRC=/work/cache/newmodels24/src PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 \\
        python bench/round24_causes.py --presets A8W8,MXFP8_E4M3 --held 48 --out-dir /work/cache/newmodels24/causes
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))

import newmodels as nm  # noqa: E402
from testkit import zoo  # noqa: E402


def _groups(model: onnx.ModelProto) -> dict[str, list[str]]:
    """Node names by structural group: ``se`` every node on a path from a ReduceMean to the Sigmoid whose output
    gates a Mul (the squeeze-excitation branch, gate included), ``depthwise`` Conv nodes whose ``group`` equals
    their input channels (> 1), ``swish`` Sigmoid→Mul pairs whose Mul also reads the Sigmoid's input, ``stem`` the
    first Conv, ``head`` the Gemm and the last Conv."""
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for n, name in ((n, name) for n in g.node for name in n.input):
        consumers.setdefault(name, []).append(n)
    out: dict[str, list[str]] = {"se": [], "depthwise": [], "swish": [], "stem": [], "head": []}
    convs = [n for n in g.node if n.op_type == "Conv"]
    out["stem"] = [convs[0].name]
    out["head"] = [n.name for n in g.node if n.op_type == "Gemm"] + [convs[-1].name]
    for n in convs:
        group = next((a.i for a in n.attribute if a.name == "group"), 1)
        if group > 1 and n.input[1] in inits and inits[n.input[1]].dims[1] == 1:
            out["depthwise"].append(n.name)
    for n in g.node:
        if n.op_type == "Sigmoid":
            for m in consumers.get(n.output[0], []):
                if m.op_type == "Mul" and n.input[0] in m.input:
                    out["swish"] += [n.name, m.name]
    for n in g.node:
        if n.op_type != "ReduceMean":
            continue
        path, frontier = [n], [n]
        while frontier:
            nxt = []
            for p in frontier:
                for m in consumers.get(p.output[0], []):
                    if m in path or m.op_type == "Mul" and p.op_type == "Sigmoid" and p.input[0] not in m.input:
                        continue
                    path.append(m)
                    if not (m.op_type == "Sigmoid" and any(c.op_type == "Mul" and m.input[0] not in c.input
                                                          for c in consumers.get(m.output[0], []))):
                        nxt.append(m)
            frontier = nxt
        out["se"] += [p.name for p in path]
    return out


def _agreement(want: list[np.ndarray], got: list[np.ndarray]) -> str:
    """``cosine mean / min | top-1`` of ``got`` against float's ``want``, one row each."""
    cos = [float(np.dot(x.ravel(), y.ravel()) / (np.linalg.norm(x) * np.linalg.norm(y) + 1e-12)) for x, y in zip(want, got)]
    return f"{np.mean(cos):.4f} / {np.min(cos):.4f} | {np.mean([x.argmax() == y.argmax() for x, y in zip(want, got)]):.3f}"


def _e4m3(v: np.ndarray) -> np.ndarray:
    """Round to the FP8 E4M3 grid (3 mantissa bits, subnormals below 2^-6, saturating at 448)."""
    e = np.maximum(np.floor(np.log2(np.maximum(np.abs(v), 2.0 ** -9))), -6)
    return np.clip(np.round(v / 2.0 ** (e - 3)) * 2.0 ** (e - 3), -448, 448)


def _mx_e4m3(x: np.ndarray, axis: int = 1) -> np.ndarray:
    """MX E4M3 with the block along ``axis`` (one power-of-two scale per block: 2^(floor(log2 amax) - 8))."""
    amax = np.abs(x).max(axis=axis, keepdims=True)
    scale = 2.0 ** (np.floor(np.log2(np.maximum(amax, 1e-30))) - 8)
    return (_e4m3(x / scale) * scale).astype(np.float32)


def _bf16(x: np.ndarray) -> np.ndarray:
    """Round to bfloat16 (nearest, ties to even) and back."""
    b = x.astype(np.float32).view(np.uint32)
    return ((b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(np.float32)


def stem(path: Path, calib: list, held: list, out_dir: Path) -> None:
    """The stem's share of the loss: input rounding alone, the stem Conv alone quantized, its output's channel spans."""
    import onnxptq
    import onnxruntime as ort
    from onnxptq.config.presets import get_preset

    ref = zoo.session_runner(path)
    want = [ref(f)[0] for f in held]
    plain = out_dir / "iqc.A8W8.stem_only.onnx"
    cfg = dataclasses.replace(get_preset("A8W8"), repair=False, nodes_to_quantize=("Conv_0",))
    onnxptq.quantize(str(path), cfg, data=calib, output=str(plain))
    q = onnx.load(str(plain))
    node = next(n for n in q.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "input")
    vals = {t.name: onnx.numpy_helper.to_array(t) for t in q.graph.initializer}
    s, zp = float(vals[node.input[1]]), int(vals[node.input[2]])
    print("| what | output cosine mean / min | top-1 agreement |")
    print("| --- | --- | --- |")
    for tag, fn in ((f"input on the A8W8 input grid (scale {s:.5f}, zero point {zp})",
                     lambda x: ((np.clip(np.round(x / s) + zp, 0, 255) - zp) * s).astype(np.float32)),
                    ("input as MX E4M3 (a pixel's 3 channels a block)", _mx_e4m3), ("input as BF16", _bf16)):
        print(f"| {tag} | {_agreement(want, [ref({'input': fn(f['input'])})[0] for f in held])} |", flush=True)
    for preset in ("A8W8", "A16W8"):
        out = out_dir / f"iqc.{preset}.stem_only.onnx"
        cfg = dataclasses.replace(get_preset(preset), repair=False, nodes_to_quantize=("Conv_0",))
        onnxptq.quantize(str(path), cfg, data=calib, output=str(out))
        test = zoo.session_runner(out)
        print(f"| {preset}, only the stem Conv quantized | {_agreement(want, [test(f)[0] for f in held])} |", flush=True)
    model = onnx.load(str(path))
    names = [model.graph.node[i].output[0] for i in (0, 1, 3)]  # Conv, its BatchNormalization, the Swish's Mul
    for name in names:
        model.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    runs = [sess.run(names, f) for f in held]
    print("| stem tensor | range | one 8-bit step | channel span min / median / max | channels under 4 steps |")
    print("| --- | --- | --- | --- | --- |")
    for k, name in enumerate(names):
        v = np.concatenate([r[k] for r in runs])
        span = v.max((0, 2, 3)) - v.min((0, 2, 3))
        step = (v.max() - min(v.min(), 0.0)) / 255
        print(f"| {name} ({model.graph.node[(0, 1, 3)[k]].op_type}) | {v.min():.2f} .. {v.max():.2f} | {step:.3f} | "
              f"{span.min():.3f} / {np.median(span):.2f} / {span.max():.1f} | {int((span < 4 * step).sum())} of {span.size} |")


def sjtu(presets: list[str], calib_n: int, fresh_n: int, out_dir: Path) -> None:
    """pysjtu_nn with repair off: answers equal to float's on its calibration feeds and on ``fresh_n`` fresh ones,
    flips per head, and float's top-two logit gap where they flip (near-ties or not)."""
    import onnxptq
    from onnxptq.config.presets import get_preset

    path = nm.MODELS["pysjtu_nn"][0]
    calib, fresh = nm.pysjtu_nn_feeds(calib_n, 1), nm.pysjtu_nn_feeds(fresh_n, 2000)
    ref = zoo.session_runner(path)
    print("| preset, repair off | feeds | answers equal | flips per head | float's logit gap at the flips |")
    print("| --- | --- | --- | --- | --- |")
    for preset in presets:
        out = out_dir / f"pysjtu_nn.{preset}.norepair.onnx"
        onnxptq.quantize(path, dataclasses.replace(get_preset(preset), repair=False), data=calib, output=str(out))
        test = zoo.session_runner(out)
        for tag, feeds in (("calibration", calib), ("fresh", fresh)):
            flips, gaps, same = np.zeros(5, int), [], 0
            for f in feeds:
                a, b = ref(f), test(f)
                moved = [k for k in range(5) if a[k].argmax() != b[k].argmax()]
                same += not moved
                for k in moved:
                    flips[k] += 1
                    top = np.sort(a[k][0])
                    gaps.append(float(top[-1] - top[-2]))
            gap = f"{min(gaps):.2f}-{max(gaps):.2f}" if gaps else "-"
            print(f"| {preset} | {len(feeds)} {tag} | {same / len(feeds):.3f} | {' '.join(map(str, flips))} | {gap} |",
                  flush=True)


def realism(n: int) -> None:
    """Float's reads of the captchas against the text drawn on them, and the share of its steps it is unsure of."""
    import random

    vk = zoo.session_runner(nm.MODELS["vk_captcha"][0])
    sj = zoo.session_runner(nm.MODELS["pysjtu_nn"][0])
    vk_exact = sj_exact = 0
    unsure, gaps = [], []
    for seed in range(n):
        img, text = nm._vk_captcha_text(random.Random(seed))
        out = vk({"image": np.ascontiguousarray((np.asarray(img, np.float32)[..., ::-1] / 255.0).transpose(1, 0, 2)[None])})[0]
        top = np.sort(out[0], -1)
        unsure.append(float(np.mean(top[:, -1] - top[:, -2] < 0.5)))
        vk_exact += nm._vk_read(out) == text
        img, letters = nm._jaccount_captcha_text(random.Random(seed))
        outs = sj({"input.1": np.array(nm._jaccount_binary(img), dtype=np.float32)[None, None]})
        sj_exact += "".join(chr(97 + int(o.argmax(1)[0])) for o in outs if int(o.argmax(1)[0]) < 26) == letters
        gaps += [float(np.diff(np.sort(o[0])[-2:])[0]) for o in outs]
    print("| model | captchas | float reads the drawn text | float's uncertain decisions |")
    print("| --- | --- | --- | --- |")
    print(f"| vk_captcha | {n} | {vk_exact / n:.3f} | {np.mean(unsure):.3f} of CTC steps under a 0.5 probability margin |")
    print(f"| pysjtu_nn | {n} | {sj_exact / n:.3f} | {np.mean(np.array(gaps) < 1):.3f} of head decisions under a logit gap "
          f"of 1 (median gap {np.median(gaps):.2f}) |")


def _options() -> argparse.Namespace:
    """The command line: which presets the groups are judged at, how many feeds, where the files go, which parts."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag, default in (("--presets", "A8W8,MXFP8_E4M3"), ("--parts", "groups,stem")):
        ap.add_argument(flag, default=default)
    for flag, default in (("--held", 48), ("--calib", 32)):
        ap.add_argument(flag, type=int, default=default)
    ap.add_argument("--out-dir", type=Path, default=Path("/work/cache/newmodels24/causes"))
    return ap.parse_args()


def main() -> None:
    a = _options()
    import onnxptq
    from onnxptq.config.presets import get_preset

    path = Path(nm.MODELS["iqc_effnet_b3"][0])
    model = onnx.load(str(path))
    groups = _groups(model)
    calib, held = nm.iqc_feeds(a.calib, 1), nm.iqc_feeds(a.held, 1000)
    a.out_dir.mkdir(parents=True, exist_ok=True)
    if "realism" in a.parts.split(","):
        realism(40)
    if "sjtu" in a.parts.split(","):
        sjtu(["BF16", "A8W8", "BFP16"], 40, 200, a.out_dir)
    if "stem" in a.parts.split(","):
        stem(path, calib, held, a.out_dir)
    if "groups" not in a.parts.split(","):
        return
    print({k: len(v) for k, v in groups.items()}, flush=True)
    ref = zoo.session_runner(path)
    want = [ref(f)[0] for f in held]
    print("| preset | left float | nodes | output cosine mean / min | top-1 agreement |")
    print("| --- | --- | --- | --- | --- |")
    for preset in a.presets.split(","):
        for name, nodes in [("nothing", [])] + list(groups.items()):
            cfg = dataclasses.replace(get_preset(preset), repair=False, nodes_to_exclude=tuple(nodes))
            out = a.out_dir / f"iqc.{preset}.{name}.onnx"
            onnxptq.quantize(str(path), cfg, data=calib, output=str(out))
            test = zoo.session_runner(out)
            print(f"| {preset} | {name} | {len(nodes)} | {_agreement(want, [test(f)[0] for f in held])} |", flush=True)


if __name__ == "__main__":
    main()
