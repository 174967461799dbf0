"""Round 19's silent rows and PP-OCRv4 det A8W8, diagnosed (bench/RESULTS.md, "Round 19's silent rows").

Each mode prints what one diagnosis in that section rests on, with the bench's own feeds (bench/newmodels.py):

    # RivaGAN encoder: the mark (output - frame) against float's, per quantized file (cosine, sign agreement)
    NEWMODELS19_SRC=/work/cache/newmodels19/src PYTHONPATH=src:. python bench/silent19_diag.py marks OUT/rivagan_enc.*.onnx
    # RivaGAN decoder: per image, the 32 values' cosine beside the payload bits lost (the task reading)
    NEWMODELS19_SRC=/work/cache/newmodels19/src PYTHONPATH=src:. python bench/silent19_diag.py bits OUT/rivagan_dec.*.onnx
    # ICLabel: which node kept float (repair off, the others as the preset says) gives back the classes
    NEWMODELS19_SRC=/work/cache/newmodels19/src PYTHONPATH=src:. python bench/silent19_diag.py nodes MXFP8_E4M3 --cache DIR
    #   ... nodes MXFP8_E4M3 --cache DIR --plain --scale-search 3     (the ceil exponent for activations, nothing kept float)
    # ICLabel: the PSD input's error under E4M3 and under MXINT8's int8 (blocks of 32 along its last axis), and its first Conv's
    NEWMODELS19_SRC=/work/cache/newmodels19/src PYTHONPATH=src:. python bench/silent19_diag.py psd --cache DIR
    # PP-OCRv4 det: each page's mask IoU (threshold 0.3) beside its background and body font, seeds 1 and 1000
    PYTHONPATH=src:. python bench/silent19_diag.py pages OUT/ppocrv4_det.A8W8.onnx
    # PP-OCRv4 det A8W8 (repair off) calibrated on three page sets, judged on seed 1000's 16 pages by background
    PYTHONPATH=src:. python bench/silent19_diag.py calib
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import newmodels as nm  # noqa: E402
from testkit import zoo  # noqa: E402


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def marks(files: list[str], n: int = 8) -> None:
    """The encoder adds 0.016·tanh(·) to its frame: the mark's cosine and sign agreement vs float, and the output's."""
    held = nm.riva_enc_feeds(n, 1000)
    ref = zoo.session_runner(nm.MODELS["rivagan_enc"][0])
    r_out = [ref(f)[0] for f in held]
    for path in files:
        test = zoo.session_runner(path)
        g_out = [test(f)[0] for f in held]
        r = np.concatenate([(o - f["frame"]).ravel() for o, f in zip(r_out, held)])
        g = np.concatenate([(o - f["frame"]).ravel() for o, f in zip(g_out, held)])
        print(f"{Path(path).name}: mark cosine {_cos(r, g):.4f}, sign agreement {np.mean(np.sign(r) == np.sign(g)):.4f}, "
              f"output cosine {_cos(np.concatenate([o.ravel() for o in r_out]), np.concatenate([o.ravel() for o in g_out])):.5f}")


def bits(files: list[str], n: int = 32) -> None:
    """Per decoder image: the 32 values' cosine vs float's and whether 2+ payload bits more than float's were lost."""
    held = nm.riva_dec_feeds(n, 1000)
    ref = zoo.session_runner(nm.MODELS["rivagan_dec"][0])
    refs = [ref(f)[0] for f in held]
    for path in files:
        test = zoo.session_runner(path)
        rows = []
        for f, r in zip(held, refs):
            g = test(f)[0]
            pay = nm._RIVA_PAYLOADS[f["frame"].tobytes()]
            lost = int(((r[0] > 0.52) == pay).sum()) - int(((g[0] > 0.52) == pay).sum())
            rows.append((_cos(r, g), lost))
        c = np.array([x for x, _ in rows])
        bad = [x for x, lost in rows if lost >= 2]
        print(f"{Path(path).name}: images losing 2+ bits {len(bad)} of {n} (their cosines {np.round(bad, 3).tolist()}); "
              f"images with cosine < 0.98: {int((c < 0.98).sum())}, min {c.min():.4f}")


def _iclabel_feeds(n: int, seed: int, cache: Path) -> list[dict[str, np.ndarray]]:
    """nm.iclabel_feeds (an ICA per recording: minutes), kept in ``cache`` as .npz."""
    f = cache / f"icl_feeds_{n}_{seed}.npz"
    if f.exists():
        z = np.load(f)
        return [{k: z[f"{i}_{k}"] for k in ("topo", "psds", "autocorr")} for i in range(n)]
    out = nm.iclabel_feeds(n, seed)
    np.savez(f, **{f"{i}_{k}": v for i, d in enumerate(out) for k, v in d.items()})
    return out


def nodes(preset: str, cache: Path, scale_search: int | None = None, only_plain: bool = False) -> None:
    """ICLabel quantized with repair off, as the preset says and with each node kept float in turn: classes kept."""
    import onnx
    import onnxptq
    from onnxptq.config.presets import get_preset

    path = nm.MODELS["iclabel"][0]
    cal, held = _iclabel_feeds(12, 1, cache), _iclabel_feeds(32, 1000, cache)
    ref = zoo.session_runner(path)
    refs = [ref(f)[0] for f in held]
    out = cache / "iclabel_nodes.onnx"

    def classes(exclude: tuple[str, ...]) -> tuple[float, float]:
        cfg = dataclasses.replace(get_preset(preset), repair=False, nodes_to_exclude=exclude)
        if scale_search is not None:
            cfg = dataclasses.replace(cfg, mx_activation_scale_search=scale_search)
        onnxptq.quantize(path, cfg, data=cal, output=str(out))
        test = zoo.session_runner(out)
        gots = [test(f)[0] for f in held]
        same = np.concatenate([np.argmax(r, 1) == np.argmax(g, 1) for r, g in zip(refs, gots)])
        return float(same.mean()), _cos(np.concatenate([r.ravel() for r in refs]), np.concatenate([g.ravel() for g in gots]))

    print(f"{preset}, every node as the preset says (mx_activation_scale_search {scale_search}): classes {classes(())[0]:.4f}")
    if only_plain:
        return
    for node in onnx.load(path).graph.node:
        if node.op_type in ("Conv", "Softmax"):
            kept, cosine = classes((node.name,))
            print(f"  {node.name} ({node.op_type}) float: classes {kept:.4f}, cosine {cosine:.4f}", flush=True)


def _mx(x: np.ndarray, element: str) -> np.ndarray:
    """OCP MX rounding of ``x`` in blocks of 32 along its last axis: an E8M0 scale 2^(floor(log2 max|block|) - emax)
    (emax 8 for E4M3, 6 for int8), the elements E4M3 (saturated at 448) or int8 (-127..127)."""
    import ml_dtypes

    b = x.reshape(-1, 32) if x.shape[-1] % 32 == 0 else x.reshape(-1, x.shape[-1])
    amax = np.abs(b).max(1, keepdims=True)
    amax[amax == 0] = 1.0
    if element == "fp8":
        scale = 2.0 ** (np.floor(np.log2(amax)) - 8)
        q = np.clip(b / scale, -448, 448).astype(ml_dtypes.float8_e4m3fn).astype(np.float32) * scale
    else:
        scale = 2.0 ** (np.floor(np.log2(amax)) - 6)
        q = np.clip(np.round(b / scale), -127, 127) * scale
    return q.reshape(x.shape).astype(np.float32)


def psd(cache: Path) -> None:
    """ICLabel's PSD branch: its input (the normalized log-PSD, [N, 1, 1, 100]) rounded as MXFP8_E4M3 and MXINT8 would,
    through its first Conv (1x3 along frequency): the relative error in and out."""
    import onnx
    import onnxruntime as ort
    from onnx import helper, numpy_helper

    model = onnx.load(nm.MODELS["iclabel"][0])
    conv = next(n for n in model.graph.node if n.name == "/psds_conv/sequential/conv1/Conv")
    w = next(numpy_helper.to_array(t) for t in model.graph.initializer if t.name == conv.input[1])
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], **{a.name: helper.get_attribute_value(a) for a in conv.attribute})],
                          "c", [helper.make_tensor_value_info("x", 1, None)], [helper.make_tensor_value_info("y", 1, None)],
                          [numpy_helper.from_array(w, "w")])
    session = ort.InferenceSession(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    x = np.concatenate([f["psds"] for f in _iclabel_feeds(32, 1000, cache)]).astype(np.float32)
    y = session.run(None, {"x": x})[0]
    print(f"psds {x.shape}: range {x.min():.3f}..{x.max():.3f}, mean |x| {np.abs(x).mean():.3f}, mean |neighbour step| "
          f"{np.abs(np.diff(x, axis=-1)).mean():.3f}; conv1 weight {w.shape}")
    for label, q in (("MXFP8_E4M3", _mx(x, "fp8")), ("MXINT8", _mx(x, "int8"))):
        err_in = np.linalg.norm(q - x) / np.linalg.norm(x)
        err_out = np.linalg.norm(session.run(None, {"x": q})[0] - y) / np.linalg.norm(y)
        print(f"  {label}: input relative error {err_in:.4f}, conv1 output {err_out:.4f}")


def _page_attributes(n: int, seed: int) -> list[tuple[str, int, str]]:
    """(background, body font size, family) of each page render_page draws for ``seed`` (its font calls spied)."""
    import testkit.zoo_data as zd

    calls: list[tuple] = []
    real = zd._font
    zd._font = lambda size, family="sans", *a, **k: (calls.append((size, family)), real(size, family, *a, **k))[1]
    try:
        rng, out = random.Random(seed), []
        for _ in range(n):
            calls.clear()
            page = zd.render_page(rng, 480, 640)
            out.append(("white" if page.getpixel((1, 1)) == (255, 255, 255) else "cream", *calls[1]))
        return out
    finally:
        zd._font = real


def pages(quantized: str) -> None:
    """Each page's mask IoU (p > 0.3, float vs quantized) beside its background and body font."""
    ref = zoo.session_runner(nm.SRC / nm.MODELS["ppocrv4_det"][0])
    test = zoo.session_runner(quantized)
    for seed, n in ((1, 24), (1000, 16)):
        by_bg: dict[str, list[float]] = {}
        for i, (f, attrs) in enumerate(zip(nm.ppocr_det_feeds(n, seed), _page_attributes(n, seed))):
            a, b = ref(f)[0] > 0.3, test(f)[0] > 0.3
            iou = float((a & b).sum() / max(1, (a | b).sum()))
            by_bg.setdefault(attrs[0], []).append(iou)
            print(f"seed {seed} page {i}: {attrs[0]}, body {attrs[1]} {attrs[2]}: IoU {iou:.3f}")
        print(f"seed {seed}: " + ", ".join(f"{k} {len(v)} pages mean {np.mean(v):.4f}" for k, v in sorted(by_bg.items())))


def calib() -> None:
    """A8W8 with repair off, calibrated on seed 1's pages 0-11 (the bench's), 12-23, 0-23; IoU on seed 1000 by background."""
    import onnxptq
    from onnxptq.config.presets import get_preset

    path = str(nm.SRC / nm.MODELS["ppocrv4_det"][0])
    seed1, held = nm.ppocr_det_feeds(24, 1), nm.ppocr_det_feeds(16, 1000)
    cream = np.array([a[0] == "cream" for a in _page_attributes(16, 1000)])
    ref = zoo.session_runner(path)
    for label, cal in (("pages 0-11", seed1[:12]), ("pages 12-23", seed1[12:]), ("pages 0-23", seed1)):
        r = onnxptq.quantize(path, dataclasses.replace(get_preset("A8W8"), repair=False), data=cal, output="/tmp/silent19_v4det.onnx")
        test = zoo.session_runner("/tmp/silent19_v4det.onnx")
        ious = []
        for f in held:
            a, b = ref(f)[0] > 0.3, test(f)[0] > 0.3
            ious.append(float((a & b).sum() / max(1, (a | b).sum())))
        x = np.array(ious)
        print(f"calibrated on {label}: floor {'holds' if r.floor.ok else 'broken'}; seed 1000 IoU {x.mean():.4f} "
              f"(cream {x[cream].mean():.4f} on {cream.sum()}, white {x[~cream].mean():.4f} on {(~cream).sum()})")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=("marks", "bits", "nodes", "psd", "pages", "calib"))
    ap.add_argument("args", nargs="*")
    ap.add_argument("--cache", type=Path, default=Path("/tmp"))
    ap.add_argument("--scale-search", type=int, default=None, help="nodes: QuantConfig.mx_activation_scale_search")
    ap.add_argument("--plain", action="store_true", help="nodes: the preset's row only, no node kept float")
    a = ap.parse_args()
    if a.mode == "marks":
        marks(a.args)
    elif a.mode == "bits":
        bits(a.args)
    elif a.mode == "nodes":
        nodes(a.args[0] if a.args else "MXFP8_E4M3", a.cache, a.scale_search, a.plain)
    elif a.mode == "psd":
        psd(a.cache)
    elif a.mode == "pages":
        pages(a.args[0])
    else:
        calib()


if __name__ == "__main__":
    main()
