"""detrange diagnosis: per-tensor statistics of the 8-bit activations a weighted layer reads, and the range each
method gives (issue 27 item 6). Calibrates a bench/newmodels.py model once with histograms on every activation,
prints per tensor the tail statistics and the histogram error of the preset's range against MinMSE's.

    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/det_range_diag.py stats ppocrv4_det
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import newmodels as nm  # noqa: E402


def hist_error(h, lo, hi, qmin=0, qmax=255):
    from onnxptq.calibration.methods import _weighted_errors
    from onnxptq.formats.integer import grid_scales_zero_points

    s, z = grid_scales_zero_points(np.array([lo]), np.array([hi]), qmin, qmax, False)
    return float(_weighted_errors(h.hist.centres, h.hist.counts, s, z, qmin, qmax, 2)[0] / max(h.hist.counts.sum(), 1))


def stats(model: str, calib_n: int, preset: str) -> None:
    from onnxptq.calibration import methods
    from onnxptq.config.presets import get_preset
    from onnxptq.pipeline.calibrate import calibrate_once

    rel, make, _, _ = nm.MODELS[model]
    path = str(nm.SRC / rel)
    base = get_preset(preset)
    cfg = dataclasses.replace(base, repair=False, activation=dataclasses.replace(base.activation, calibration="minmse"))
    cal = calibrate_once(path, cfg, make(calib_n, 1))
    g = cal.prepared.graph
    readers: dict[str, list] = {}
    for n in g.node:
        for i in n.input:
            readers.setdefault(i, []).append(n.op_type)
    rows = []
    for name, t in cal.plan.tensors.items():
        if t.role != "activation" or name not in cal.stats:
            continue
        h = cal.stats[name]
        if not hasattr(h, "hist") or h.hist.counts.sum() == 0:
            continue
        c, x = h.hist.counts, h.hist.centres
        tot = c.sum()
        mean = (c * x).sum() / tot
        var = (c * (x - mean) ** 2).sum() / tot
        kurt = (c * (x - mean) ** 4).sum() / tot / max(var * var, 1e-30)
        pct = methods._percentile_range(h, 99.9999, False, True)
        pct = methods._cover_recurring(h, *pct, False)
        mse = methods.compute_range(h, "minmse", symmetric=False, qmin=0, qmax=255)
        amax = max(abs(h.min), abs(h.max))
        folded, edges = h.hist.folded()
        cdf = np.cumsum(folded) / folded.sum()
        p999 = float(edges[min(np.searchsorted(cdf, 0.999), edges.size - 1)])
        p99 = float(edges[min(np.searchsorted(cdf, 0.99), edges.size - 1)])
        rows.append({"tensor": name, "readers": ",".join(sorted(set(readers.get(name, [])))),
                     "min": round(h.min, 3), "max": round(h.max, 3), "kurt": round(float(kurt), 1),
                     "max/p99.9": round(amax / max(p999, 1e-12), 1), "max/p99": round(amax / max(p99, 1e-12), 1),
                     "pct": [round(v, 3) for v in pct], "minmse": [round(v, 3) for v in mse],
                     "err_pct": hist_error(h, *pct), "err_minmse": hist_error(h, *mse), "err_minmax": hist_error(h, h.min, h.max)})
    for r in sorted(rows, key=lambda r: -r["kurt"]):
        r["gain"] = round(r["err_pct"] / max(r["err_minmse"], 1e-30), 2)
        print(json.dumps({k: (round(v, 6) if isinstance(v, float) else v) for k, v in r.items()}))


def variants(model: str, calib_n: int, held_n: int, preset: str, sets: list[str]) -> None:
    """The bench metric of ``model`` (held-out feeds of seed 1000), repair off, with the activations named by each
    set calibrated by MinMSE (``tensor_overrides``): ``none``, ``all``, ``conv`` (every activation a weighted layer
    reads), or a comma list of tensor names."""
    import time

    import onnxptq
    from onnxptq.config.presets import get_preset
    from testkit import zoo

    rel, make, metric_name, metric = nm.MODELS[model]
    path = str(nm.SRC / rel)
    calib, held = make(calib_n, 1), make(held_n, 1000)
    base = dataclasses.replace(get_preset(preset), repair=False)
    mse = dataclasses.replace(base.activation, calibration="minmse")
    stats_rows = [json.loads(l) for l in open(f"/work/cache/detrange/stats_{model}.jsonl")] if sets != ["none"] else []
    ref = nm._memo(zoo.session_runner(path), held)
    for s in sets:
        if s == "none":
            names = []
        elif s == "all":
            names = [r["tensor"] for r in stats_rows]
        elif s.startswith("conv"):
            names = [r["tensor"] for r in stats_rows if r["readers"] in ("Conv", "MatMul", "Gemm")]
            if ":" in s:  # conv:GAIN: only those whose MinMSE error gain is at least GAIN
                names = [r["tensor"] for r in stats_rows if r["readers"] in ("Conv", "MatMul", "Gemm") and r["gain"] >= float(s.split(":")[1])]
        else:
            names = s.split(",")
        cfg = dataclasses.replace(base, tensor_overrides={n: mse for n in names})
        out = f"/tmp/detrange_{model}.onnx"
        c0 = time.process_time()
        onnxptq.quantize(path, cfg, data=calib, output=out)
        cpu = time.process_time() - c0
        test = nm._memo(zoo.session_runner(out), held)
        print(json.dumps({"model": model, "set": s, "n": len(names), "metric": metric_name,
                          "value": round(float(metric(ref, test, held, None)), 4), "cpu_s": round(cpu, 1)}), flush=True)


def _input_channel_norms(model, name: str) -> tuple[int, np.ndarray] | None:
    """(channel axis, per input channel sum of squared weights over every weighted reader of ``name``, each
    reader's norms scaled to mean 1), or None where a reader is not a weighted layer reading ``name`` as its data."""
    from onnx import numpy_helper

    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    total, axis = None, None
    for n in model.graph.node:
        if name not in n.input:
            continue
        if n.op_type not in ("Conv", "MatMul", "Gemm") or n.input[0] != name or n.input[1] not in inits:
            return None
        w = inits[n.input[1]].astype(np.float64)
        if n.op_type == "Conv":
            group = next((a.i for a in n.attribute if a.name == "group"), 1)
            m, cg = w.shape[0], w.shape[1]
            per = (w.reshape(group, m // group, cg, -1) ** 2).sum(axis=(1, 3)).reshape(-1)  # [group * cg]
            ax = 1
        else:
            trans_b = n.op_type == "Gemm" and next((a.i for a in n.attribute if a.name == "transB"), 0)
            per = (w ** 2).sum(axis=1 if not trans_b else 0) if w.ndim == 2 else None
            if per is None:
                return None
            ax = -1
        per = per / max(per.mean(), 1e-30)
        if axis is not None and ax != axis:
            return None
        axis, total = ax, per if total is None else total + per
    return None if total is None else (axis, total)


def weighted(model: str, calib_n: int, held_n: int, preset: str, gains: list[float]) -> None:
    """The weighted MinMSE range (each value's squared error weighted by its input channel's weight norm in
    the layers that read it) for every activation only weighted layers read; the bench metric with those
    ranges forced on the tensors whose weighted error falls at least GAIN-fold (each of ``gains``)."""
    import time

    import onnx
    import onnxruntime as ort

    import onnxptq
    from onnxptq.calibration import methods
    from onnxptq.config.presets import get_preset
    from onnxptq.formats.integer import grid_scales_zero_points
    from onnxptq.pipeline.prepare import prepare_for_quantization
    from testkit import zoo

    rel, make, metric_name, metric = nm.MODELS[model]
    path = str(nm.SRC / rel)
    calib, held = make(calib_n, 1), make(held_n, 1000)
    base = dataclasses.replace(get_preset(preset), repair=False)
    rows = {r["tensor"]: r for r in map(json.loads, open(f"/work/cache/detrange/stats_{model}.jsonl"))}
    prepared = prepare_for_quantization(onnx.load(path), base)
    norms = {t: _input_channel_norms(prepared, t) for t in rows}
    norms = {t: v for t, v in norms.items() if v is not None}
    m = onnx.ModelProto()
    m.CopyFrom(prepared)
    del m.graph.output[:]
    for t in norms:
        m.graph.output.append(onnx.helper.make_empty_tensor_value_info(t))
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    bins = 4096
    hists = {t: np.zeros(bins) for t in norms}
    plain = {t: np.zeros(bins) for t in norms}
    edges = {t: (rows[t]["min"] - 1e-6, rows[t]["max"] + 1e-6) for t in norms}
    names = list(norms)
    for f in calib:
        for t, x in zip(names, sess.run(names, f)):
            axis, w = norms[t]
            lo, hi = edges[t]
            b = np.clip(((x - lo) / (hi - lo) * bins).astype(np.int64), 0, bins - 1)
            shape = [1] * x.ndim
            shape[axis] = -1
            ww = np.broadcast_to(w.reshape(shape), x.shape)
            hists[t] += np.bincount(b.ravel(), weights=ww.ravel(), minlength=bins)
            plain[t] += np.bincount(b.ravel(), minlength=bins)
    forced_all = {}
    for t in names:
        lo, hi = edges[t]
        centres = lo + (np.arange(bins) + 0.5) * (hi - lo) / bins
        lo0, hi0 = min(rows[t]["min"], 0.0), max(rows[t]["max"], 0.0)
        fr = np.arange(100, 0, -1, dtype=np.float64) / 100
        s, z = grid_scales_zero_points(fr * lo0, fr * hi0, 0, 255, False)
        err_w = methods._weighted_errors(centres, hists[t], s, z, 0, 255, 2)
        err_p = methods._weighted_errors(centres, plain[t], s, z, 0, 255, 2)
        s1, z1 = grid_scales_zero_points(np.array([rows[t]["pct"][0]]), np.array([rows[t]["pct"][1]]), 0, 255, False)
        cur_w = float(methods._weighted_errors(centres, hists[t], s1, z1, 0, 255, 2)[0])
        k = int(np.argmin(err_w))
        rng = (float(fr[k] * lo0), float(fr[k] * hi0))
        gain = cur_w / max(float(err_w[k]), 1e-30)
        forced_all[t] = (rng, gain)
        print(json.dumps({"tensor": t, "pct": rows[t]["pct"], "wmse": [round(v, 3) for v in rng],
                          "f_w": float(fr[k]), "f_plain": float(fr[int(np.argmin(err_p))]), "wgain": round(gain, 2),
                          "gain": rows[t]["gain"], "kurt": rows[t]["kurt"]}), flush=True)
    ref = nm._memo(zoo.session_runner(path), held)
    real = methods.compute_range
    for g in gains:
        forced = {t: r for t, (r, gain) in forced_all.items() if gain >= g}

        def patched(collector, method, **options):
            name = getattr(collector, "name", "")
            return forced[name] if name in forced else real(collector, method, **options)

        methods.compute_range = patched
        out = f"/tmp/detrange_w_{model}.onnx"
        c0 = time.process_time()
        onnxptq.quantize(path, base, data=calib, output=out)
        cpu = time.process_time() - c0
        methods.compute_range = real
        test = nm._memo(zoo.session_runner(out), held)
        print(json.dumps({"model": model, "set": f"weighted gain>={g}", "n": len(forced), "tensors": sorted(forced)[:6],
                          "value": round(float(metric(ref, test, held, None)), 4), "cpu_s": round(cpu, 1)}), flush=True)


def channels(model: str, calib_n: int, min_gain: float) -> None:
    """Per weighted-layer input whose MinMSE error gain is at least ``min_gain``: how the values beyond MinMSE's
    clip spread over channels and feeds (channel axis 1 for rank-4 tensors, the last otherwise)."""
    import onnx
    import onnxruntime as ort

    from onnxptq.config.presets import get_preset
    from onnxptq.pipeline.prepare import prepare_for_quantization

    rel, make, _, _ = nm.MODELS[model]
    path = str(nm.SRC / rel)
    rows = [r for r in map(json.loads, open(f"/work/cache/detrange/stats_{model}.jsonl"))
            if r["readers"] in ("Conv", "MatMul", "Gemm") and r["gain"] >= min_gain]
    prepared = prepare_for_quantization(onnx.load(path), get_preset("A8W8"))
    m = onnx.ModelProto()
    m.CopyFrom(prepared)
    del m.graph.output[:]
    for r in rows:
        m.graph.output.append(onnx.helper.make_empty_tensor_value_info(r["tensor"]))
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [r["tensor"] for r in rows]
    acc = {t: {"cmax": None, "beyond": None, "feeds_beyond": 0, "n": 0} for t in names}
    for f in make(calib_n, 1):
        for r, x in zip(rows, sess.run(names, f)):
            a = acc[r["tensor"]]
            axis = 1 if x.ndim == 4 else x.ndim - 1
            xm = np.moveaxis(x, axis, 0).reshape(x.shape[axis], -1)
            clip = r["minmse"][1]
            cmax = xm.max(axis=1)
            beyond = (xm > clip).sum(axis=1).astype(np.float64)
            a["cmax"] = cmax if a["cmax"] is None else np.maximum(a["cmax"], cmax)
            a["beyond"] = beyond if a["beyond"] is None else a["beyond"] + beyond
            a["feeds_beyond"] += int(beyond.sum() > 0)
            a["n"] += xm.size
    for r in rows:
        a = acc[r["tensor"]]
        cmax, beyond = np.sort(a["cmax"])[::-1], np.sort(a["beyond"])[::-1]
        share = np.cumsum(beyond) / max(beyond.sum(), 1)
        print(json.dumps({"model": model, "tensor": r["tensor"], "C": int(cmax.size), "gain": r["gain"], "kurt": r["kurt"],
                          "max": r["max"], "clip": r["minmse"][1], "cmax_top3": [round(float(v), 2) for v in cmax[:3]],
                          "cmax_median": round(float(np.median(cmax)), 2), "max/cmax_p90": round(float(cmax[0] / max(np.quantile(cmax, 0.9), 1e-9)), 2),
                          "beyond_frac": float(beyond.sum() / a["n"]), "ch_for_90pct": int(np.searchsorted(share, 0.9) + 1),
                          "feeds_beyond": a["feeds_beyond"]}), flush=True)


#: page backgrounds for :func:`backgrounds` (the renderer's own: white and (245, 242, 232))
BACKGROUNDS = ((255, 255, 255), (245, 242, 232), (250, 248, 240), (240, 240, 240), (235, 235, 225), (255, 250, 235),
               (245, 245, 250), (230, 225, 215), (248, 244, 236), (238, 242, 246), (225, 225, 225), (250, 240, 245))


def backgrounds(model: str, per: int, sets: list[str]) -> None:
    """Is a range's gain on a text detector the page colour's luck? The same page layouts (seed 1000) rendered on
    each of :data:`BACKGROUNDS`; per set of tensors calibrated by MinMSE (as ``variants``; ``rule_off`` / ``rule_on``:
    the heavy-tail rule off / on, nothing overridden), mean IoU per colour."""
    import onnxptq
    from onnxptq.config.presets import get_preset
    from testkit import zoo, zoo_data

    rel, make, _, metric = nm.MODELS[model]
    path = str(nm.SRC / rel)
    calib = make(12, 1)
    base = dataclasses.replace(get_preset("A8W8"), repair=False)
    mse = dataclasses.replace(base.activation, calibration="minmse")
    real_new = zoo_data._pil
    held = {}
    for bg in BACKGROUNDS:
        Image, *rest = real_new()

        class _Img:
            @staticmethod
            def new(mode, size, colour, _bg=bg, _I=Image):
                return _I.new(mode, size, _bg)

            def __getattr__(self, k, _I=Image):
                return getattr(_I, k)

        zoo_data._pil = lambda _i=_Img(), _r=rest: (_i, *_r)
        held[bg] = make(per, 1000)
        zoo_data._pil = real_new
    ref = zoo.session_runner(path)
    from onnxptq.calibration import methods

    kurtosis = methods.TAIL_KURTOSIS
    for s in sets:
        # "rule_off" / "rule_on": the heavy-tail rule (methods.TAIL_KURTOSIS infinite / as shipped); else tensor names
        names = [] if s in ("none", "rule_off", "rule_on") else s.split(",")
        cfg = dataclasses.replace(base, tensor_overrides={n: mse for n in names})
        out = f"/tmp/detrange_bg_{model}.onnx"
        methods.TAIL_KURTOSIS = kurtosis if s == "rule_on" else float("inf")
        try:
            onnxptq.quantize(path, cfg, data=calib, output=out)
        finally:
            methods.TAIL_KURTOSIS = kurtosis
        test = zoo.session_runner(out)
        vals = {str(bg): round(float(metric(nm._memo(ref, feeds), nm._memo(test, feeds), feeds, None)), 4) for bg, feeds in held.items()}
        print(json.dumps({"model": model, "set": s, "mean": round(float(np.mean(list(vals.values()))), 4), "per_bg": vals}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=("stats", "variants", "weighted", "channels", "backgrounds"))
    ap.add_argument("model")
    ap.add_argument("--calib", type=int, default=12)
    ap.add_argument("--held", type=int, default=16)
    ap.add_argument("--preset", default="A8W8")
    ap.add_argument("--sets", nargs="*", default=["none"])
    ap.add_argument("--min-gain", type=float, default=1.3)
    ap.add_argument("--gains", nargs="*", type=float, default=[1e9, 1.0, 1.2, 1.5, 2.0])
    a = ap.parse_args()
    if a.mode == "stats":
        stats(a.model, a.calib, a.preset)
    elif a.mode == "backgrounds":
        backgrounds(a.model, a.held, a.sets)
    elif a.mode == "channels":
        channels(a.model, a.calib, a.min_gain)
    elif a.mode == "weighted":
        weighted(a.model, a.calib, a.held, a.preset, a.gains)
    else:
        variants(a.model, a.calib, a.held, a.preset, a.sets)


if __name__ == "__main__":
    main()
