"""How much of float's signal each format family keeps on each output, where the task holds and where it breaks.

Why (issue 27): DeepFilterNet3's encoder (`dfn3_enc`) keeps three 16-bit-family rows (A16W8, BFP16, MXINT8) SILENT:
its `emb` passes the floor (pooled cosine, frames within the 16-bit family's cosine distance, ~17 dB) while the
decoders in other files need ~30 dB. The idea to test: a family rounds activations to at least 8 significant bits, so
an output it keeps at far less SNR than the family reaches elsewhere broke the format's promise, whatever a generic
cosine says. This script reads the floor's records (`floor_verdicts.py record`: the held-out float and quantized
outputs the pipeline judged, and the task metric) and, for every float output of every record, writes:

- its pooled SNR (dB, every held-out feed together) and its worst feed's SNR;
- its frames (vectors along the last axis, as `analysis/recurrent_reads.StepFrames` reads them, a quiet frame
  weighed against 1/100 of its feed's mean frame energy): the 5th percentile of their SNR and the share at >= 30 dB;
- its kind, from the readings the floor has for it (`recurrent`, `class`, `map`, `gain`, `waveform`, else `value`).

and, per family and kind, the lowest figure a row whose task holds shows beside each task-below row's figure: a
family-relative floor at F dB separates the broken rows only where every holding row keeps >= F and the broken row
does not.

    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice python bench/family_fidelity.py --out-dir /tmp/dfn3enc/rec,/tmp/dfn3enc/zoo \
        --json /tmp/dfn3enc/fidelity.json

``--consumers`` reads the outputs one step further, through the float models that read them (a split export: their inputs
are named like the record's outputs, as DeepFilterNet3's decoders read its encoder's `e0`..`e3`, `c0`, `emb`): each
consumer is run on float's and on the quantized model's held-out outputs, and its outputs are judged by the floor
(`measure` with the consumer's own readings, the record's floor) and frame by frame against each frame's own energy
(GainFrames' reading): whether a reading through the next graph would see what the task metric sees.

    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice python bench/family_fidelity.py --out-dir /tmp/dfn3enc/rec \
        --consumers /work/cache/newmodels22/src/dfn3/tmp/export/erb_dec.onnx,/work/cache/newmodels22/src/dfn3/tmp/export/df_dec.onnx
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

#: a frame far quieter than its feed is weighed against this share of the feed's mean frame energy (StepFrames' QUIET)
QUIET = 1e-2
#: the per-frame SNR the DeepFilterNet3 decoders need of `emb` (bench/newmodels.py, `_emb_frames_30db`)
FRAME_DB = 30.0
FIGURES = ("snr", "worst_feed", "frame_p5", "frames_30db")


def output_figures(refs: list[np.ndarray], gots: list[np.ndarray]) -> dict[str, float] | None:
    """The figures of one output over its held-out feeds (module docstring); None where no feed is comparable."""
    err = energy = 0.0
    worst = np.inf
    frames: list[np.ndarray] = []
    for r, g in zip(refs, gots):
        r, g = np.asarray(r, np.float64), np.asarray(g, np.float64)
        if r.shape != g.shape or r.size < 2 or not (np.isfinite(r).all() and np.isfinite(g).all()):
            continue
        e, s = float(((r - g) ** 2).sum()), float((r * r).sum())
        err, energy = err + e, energy + s
        if s > 0:
            worst = min(worst, 10 * np.log10(s / max(e, 1e-300)))
        if r.ndim >= 2 and r.shape[-1] >= 2:
            rr = r.reshape(-1, r.shape[-1])
            gg = g.reshape(rr.shape)
            en = (rr * rr).sum(axis=1)
            if en.mean() > 0:
                rel = ((rr - gg) ** 2).sum(axis=1) / np.maximum(en, QUIET * en.mean())
                frames.append(-10 * np.log10(np.maximum(rel, 1e-30)))
    if energy <= 0:
        return None
    out = {"snr": 10 * np.log10(energy / max(err, 1e-300)), "worst_feed": worst}
    if frames:
        f = np.concatenate(frames)
        out.update(frame_p5=float(np.percentile(f, 5)), frames_30db=float((f >= FRAME_DB).mean()), frames=int(f.size))
    return {k: round(float(v), 3) for k, v in out.items()}


def kind_of(name: str, kwargs: dict, newer: dict) -> str:
    """The output's kind from the readings recorded with it (and those this tree adds, ``newer``)."""
    def has(key: str) -> bool:
        return name in (kwargs.get(key) or newer.get(key) or ())
    if has("recurrent"):
        return "recurrent"
    if has("class_outputs") or has("decoders") or has("selected"):
        return "class"
    if has("gains"):
        return "gain"
    if has("waveforms"):
        return "waveform"
    if has("prob_maps") or has("softmax_maps") or has("spatial_gates"):
        return "map"
    return "value"


def read_records(out_dirs: list[Path]) -> dict[str, dict]:
    """Every record of ``out_dirs`` (the first folder naming a (model, preset)): family, task metric, per-output figures."""
    from floor_verdicts import _newer_readings

    rows: dict[str, dict] = {}
    for out_dir in out_dirs:
        for pkl in sorted(out_dir.glob("*.pkl")):
            if pkl.stem in rows:
                continue
            rec = pickle.loads(pkl.read_bytes())
            (reference, candidate, floor), kwargs = rec["args"][:3], rec["kwargs"]
            meta = json.loads(pkl.with_suffix(".json").read_text())
            try:
                newer = _newer_readings(pkl, {}, {"recurrent", "gains", "waveforms"})
            except Exception:  # noqa: BLE001 - a record whose source model is not on this machine: its own readings only
                newer = {}
            outputs = {}
            for name in reference[0]:
                refs = [f[name] for f in reference if name in f]
                if not refs or not np.issubdtype(np.asarray(refs[0]).dtype, np.floating) or name.startswith("decision"):
                    continue
                figures = output_figures(refs, [f[name] for f in candidate if name in f])
                if figures is not None:
                    outputs[name] = {"kind": kind_of(name, kwargs, newer), **figures}
            rows[pkl.stem] = {"family": floor.family, "agreement": meta["agreement"], "task_floor": meta["task_floor"],
                              "met": meta["agreement"] >= meta["task_floor"], "outputs": outputs}
    return rows


def separation(rows: dict[str, dict], kinds: tuple[str, ...]) -> list[dict]:
    """Per family and figure: the lowest figure an output of ``kinds`` keeps on a row whose task holds (and which row),
    beside every task-below row's lowest; ``separates``: a floor between them breaks every below row and no holding one."""
    found = []
    for family in sorted({r["family"] for r in rows.values()}):
        fam = {k: r for k, r in rows.items() if r["family"] == family}
        for fig in FIGURES:
            def lowest(r: dict) -> tuple[float, str] | None:
                vals = [(o[fig], n) for n, o in r["outputs"].items() if o["kind"] in kinds and fig in o]
                return min(vals) if vals else None
            held = [(low, k) for k, r in fam.items() if r["met"] and (low := lowest(r)) is not None]
            below = [(low, k) for k, r in fam.items() if not r["met"] and (low := lowest(r)) is not None]
            if not held or not below:
                continue
            (good, good_out), good_row = min(held)
            found.append({"family": family, "figure": fig, "holding_rows": len(held), "lowest_holding": good,
                          "lowest_holding_at": f"{good_row}:{good_out}",
                          "below": {k: v for (v, _), k in sorted(below)},
                          "separates": [k for (v, _), k in below if v < good]})
    return found


def frame_figures(refs: list[np.ndarray], gots: list[np.ndarray]) -> dict[str, float] | None:
    """Frames (vectors along the last axis) each against its own energy, as ``analysis/gains.GainFrames`` weighs a gain:
    the 5th percentile of their SNR and the shares at >= 17 (the 16-bit family's cosine distance), 20 and 30 dB."""
    dbs = []
    for r, g in zip(refs, gots):
        r = np.asarray(r, np.float64)
        if r.ndim < 2 or r.shape != np.shape(g):
            continue
        r = r.reshape(-1, r.shape[-1])
        g = np.asarray(g, np.float64).reshape(r.shape)
        energy = (r * r).sum(axis=1)
        live = energy > 0
        dbs.append(-10 * np.log10(np.maximum(((r - g) ** 2).sum(axis=1)[live] / energy[live], 1e-30)))
    if not dbs:
        return None
    x = np.concatenate(dbs)
    return {"frames": int(x.size), "p5": round(float(np.percentile(x, 5)), 2),
            **{f"share_{t}db": round(float((x >= t).mean()), 4) for t in (17, 20, 30)}}


def through_consumers(out_dirs: list[Path], consumers: list[str]) -> list[dict]:
    """Every record's outputs read through each float consumer whose inputs it holds (module docstring, ``--consumers``)."""
    import onnx
    import onnxruntime as ort
    from onnxptq.analysis.floor import measure, readings_of

    found = []
    loaded = [(path, onnx.load(path), ort.InferenceSession(path, providers=["CPUExecutionProvider"])) for path in consumers]
    for out_dir in out_dirs:
        for pkl in sorted(out_dir.glob("*.pkl")):
            rec = pickle.loads(pkl.read_bytes())
            (reference, candidate, floor) = rec["args"][:3]
            meta = json.loads(pkl.with_suffix(".json").read_text())
            for path, model, session in loaded:
                inputs = [i.name for i in session.get_inputs()]
                if not all(n in reference[0] for n in inputs):
                    continue
                names = [o.name for o in session.get_outputs()]
                run = lambda feeds: [dict(zip(names, session.run(None, {n: f[n] for n in inputs}))) for f in feeds]
                refs, gots = run(reference), run(candidate)
                verdict = measure(refs, gots, floor, **readings_of(model))
                frames = {n: frame_figures([f[n] for f in refs], [f[n] for f in gots]) for n in names}
                found.append({"record": pkl.stem, "task": meta["agreement"], "task_floor": meta["task_floor"],
                              "consumer": Path(path).name, "ok": verdict.ok, "verdict": verdict.describe()[:300],
                              "frames": {n: f for n, f in frames.items() if f is not None}})
    return found


def dfn3_paths(presets: list[str], out_dir: Path, held: int) -> dict[str, dict[str, float]]:
    """Which of DeepFilterNet3's two paths carries the quantized encoder's loss into the enhanced spectrum: the bench's
    task (newmodels.dfn_frames: speech frames within 20 dB of float's enhanced spectrum) with both decoders fed the
    quantized encoder's outputs, with only the ERB gain ``m`` from them (the deep filter's ``coefs`` from float's), and
    with only ``coefs``. ``out_dir`` holds ``dfn3_enc.<preset>.onnx`` (newmodels.py --out-dir)."""
    import newmodels as nm
    from testkit import zoo

    feeds = nm.MODELS["dfn3_enc"][1](held, 1000)
    run, names = nm._dfn_runners(), ("e0", "e1", "e2", "e3", "emb", "c0", "lsnr")
    ref = zoo.session_runner(str(nm.DFN3 / "enc.onnx"))
    found = {}
    for preset in presets:
        test = zoo.session_runner(str(out_dir / f"dfn3_enc.{preset}.onnx"))
        counts = {"both": [0, 0], "m only": [0, 0], "coefs only": [0, 0]}
        for f in feeds:
            clip = nm._DFN_CLIPS[nm._DFN_CLIP[id(next(iter(f.values())))]]
            ms, cs = [], []
            for own in (ref, test):
                enc = dict(zip(names, own(f)))
                ms.append(np.asarray(run["erb_dec"]({k: enc[k] for k in ("emb", "e3", "e2", "e1", "e0")})[0]))
                cs.append(np.asarray(run["df_dec"]({"emb": enc["emb"], "c0": enc["c0"]})[0]))
            a = nm._dfn_enhance(clip["spec"], ms[0], cs[0])
            for key, (m, c) in {"both": (ms[1], cs[1]), "m only": (ms[1], cs[0]), "coefs only": (ms[0], cs[1])}.items():
                b = nm._dfn_enhance(clip["spec"], m, c)
                energy, err = (np.abs(a) ** 2).sum(1), (np.abs(a - b) ** 2).sum(1)
                active = energy >= 1e-4 * energy.max()
                counts[key][0] += int((err[active] <= 0.01 * energy[active]).sum())
                counts[key][1] += int(active.sum())
        found[preset] = {k: round(h / max(t, 1), 4) for k, (h, t) in counts.items()}
        print(f"| dfn3_enc.{preset} | " + " | ".join(f"{v:.4f}" for v in found[preset].values()) + " |", flush=True)
    return found


def _named(figures: dict[str, float], keys: list[str]) -> str:
    return ", ".join(f"{k} {figures[k]:.2f}" for k in keys) or "-"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out-dir", required=True, help="record folders (floor_verdicts.py record), comma-separated")
    ap.add_argument("--kinds", default="recurrent,value", help="output kinds the separation reads")
    ap.add_argument("--consumers", default="", help="float models reading the records' outputs (module docstring)")
    ap.add_argument("--frames", default="", help="an output name: its frames, each against its own energy, per record")
    ap.add_argument("--dfn3-paths", default="", help="presets: dfn3_enc's loss by decoder path (dfn3_paths); --out-dir: "
                                                      "the folder of dfn3_enc.<preset>.onnx")
    ap.add_argument("--held", type=int, default=48)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    if a.dfn3_paths:
        print("| record | both decoders | m only | coefs only |\n|---|---|---|---|")
        found = dfn3_paths(a.dfn3_paths.split(","), Path(a.out_dir), a.held)
        if a.json:
            Path(a.json).write_text(json.dumps(found, indent=1))
        return
    if a.frames:
        for out_dir in a.out_dir.split(","):
            for pkl in sorted(Path(out_dir).glob("*.pkl")):
                rec = pickle.loads(pkl.read_bytes())
                reference, candidate = rec["args"][:2]
                if a.frames in reference[0]:
                    task = json.loads(pkl.with_suffix(".json").read_text())["agreement"]
                    figures = frame_figures([f[a.frames] for f in reference], [f[a.frames] for f in candidate])
                    print(f"{pkl.stem} task {task:.4f} {a.frames}: {figures}")
        return
    if a.consumers:
        found = through_consumers([Path(d) for d in a.out_dir.split(",")], a.consumers.split(","))
        print("| record | task (floor) | consumer | floor on its outputs | frames each against its own energy |")
        print("|---|---|---|---|---|")
        for c in found:
            frames = "; ".join(f"{n}: p5 {f['p5']:.1f} dB, >=17 {f['share_17db']:.3f}, >=20 {f['share_20db']:.3f}, "
                               f">=30 {f['share_30db']:.3f}" for n, f in c["frames"].items())
            print(f"| {c['record']} | {c['task']:.3f} ({c['task_floor']:g}) | {c['consumer']} | "
                  f"{'holds' if c['ok'] else 'broken'} | {frames} |")
        if a.json:
            Path(a.json).write_text(json.dumps(found, indent=1))
        return
    rows = read_records([Path(d) for d in a.out_dir.split(",")])
    kinds = tuple(a.kinds.split(","))
    print("| record | family | task (floor) | output | kind | SNR dB | worst feed dB | frame p5 dB | frames >= 30 dB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for key, r in sorted(rows.items(), key=lambda kv: (kv[1]["family"], kv[0])):
        for name, o in sorted(r["outputs"].items(), key=lambda kv: kv[1]["snr"]):
            if o["kind"] not in kinds:
                continue
            print(f"| {key} | {r['family']} | {r['agreement']:.3f} ({'holds' if r['met'] else 'BELOW'}) | {name} | {o['kind']} | "
                  f"{o['snr']:.1f} | {o['worst_feed']:.1f} | {o.get('frame_p5', float('nan')):.1f} | "
                  f"{o.get('frames_30db', float('nan')):.3f} |")
    found = separation(rows, kinds)
    print("\n| family | figure | lowest where the task holds (rows) | below rows a floor there would catch | below rows it misses |")
    print("|---|---|---|---|---|")
    for s in found:
        missed = [k for k in s["below"] if k not in s["separates"]]
        print(f"| {s['family']} | {s['figure']} | {s['lowest_holding']:.3f} at {s['lowest_holding_at']} ({s['holding_rows']}) | "
              f"{_named(s['below'], s['separates'])} | {_named(s['below'], missed)} |")
    if a.json:
        Path(a.json).write_text(json.dumps({"rows": rows, "separation": found}, indent=1))


if __name__ == "__main__":
    main()
