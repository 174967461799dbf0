"""What repair reaches on an outside model: the ladder rung that held, the nodes stepped or kept, whether
given nodes are among them, the verdict before and after, and the task metric (issue 27, branch seqreads).

Why: lore_detect A8W8 with its heat map declared logits (``--floor-reading hm=logits``) was "held after
repair, 104 stepped" while its cell centres kept F1 0.837 (bench/RESULTS.md, the lead's section of
19:04-22:00): the output Conv kept float was never tried. Each variant is one quantize in this process
(repair on), and ``--exclude`` plans nodes float from the start, to see what keeping them would give.

    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/repair_reach.py --model lore_detect --preset A8W8 \
        --reading hm=logits --watch Conv_76 --variants plain,exclude:Conv_76 --held 8 --json /work/cache/seqreads/lore.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import newmodels  # noqa: E402  (the outside models, their feeds and task metrics)
from testkit import zoo  # noqa: E402


def one(name: str, preset: str, readings: dict[str, str], exclude: list[str], watch: list[str], calib, held,
        out: Path, agreements: dict | None = None) -> dict:
    import onnxptq
    from onnxptq.config.presets import resolve_config

    rel, _, metric_name, metric = newmodels.MODELS[name]
    path = newmodels.SRC / rel
    config = resolve_config(preset).replace(floor_output_reading=readings)
    if agreements:
        config = config.replace(floor_output_agreement=agreements)
    if exclude:
        config = config.replace(nodes_to_exclude=(*config.nodes_to_exclude, *exclude))
    c0 = time.process_time()
    result = onnxptq.quantize(str(path), config, data=list(calib), output=str(out))
    cpu = time.process_time() - c0
    rep = result.repair if isinstance(result.repair, dict) else {}
    stepped, kept = dict(rep.get("stepped_up") or {}), dict(rep.get("kept_float") or {})
    ref, test = zoo.session_runner(path), zoo.session_runner(out)
    before = (rep.get("before_text") or "")[:600]
    after = result.floor.describe() if result.floor is not None else None
    return {"model": name, "preset": preset, "declared": readings, "exclude": exclude, "cpu_s": round(cpu, 1),
            "floor_ok": None if result.floor is None else result.floor.ok, "before": before, "after": (after or "")[:600],
            "ladder": rep.get("ladder"), "stepped": len(stepped), "kept": len(kept),
            "rung": next(iter(stepped.values()), "").rpartition(": ")[2][:80] if stepped else None,
            "watched": {w: ("stepped" if w in stepped else "kept float" if w in kept else "excluded" if w in exclude
                            else "planned") for w in watch},
            "evaluations": rep.get("evaluations"), "finished": rep.get("finished"), "note": rep.get("note"),
            "order": rep.get("order") or {},
            "metric": metric_name, "agreement": round(float(metric(ref, test, held, None)), 4),
            "size_x": round(out.stat().st_size / path.stat().st_size, 3)}


def peak_f1(pairs) -> float:
    """bench/newmodels.py ``peak_f1``'s matching (greedy, within 1.5 cells) of (float's, candidate's) peak lists."""
    import numpy as np

    tp = n_a = n_b = 0
    for a, b in pairs:
        n_a, n_b = n_a + len(a), n_b + len(b)
        if len(a) and len(b):
            dist = np.hypot(*(a[:, None, :] - b[None, :, :]).transpose(2, 0, 1))
            used: set[int] = set()
            for i in np.argsort(dist.min(1)):
                j = next((j for j in np.argsort(dist[i]) if dist[i, j] <= 1.5 and j not in used), None)
                if j is not None:
                    used.add(j)
                    tp += 1
    return 1.0 if n_a + n_b == 0 else 2 * tp / (n_a + n_b)


def peaks_agreement(channel: int, thresh: float):
    """A ``floor_output_agreement`` function: one feed's peak F1 of channel ``channel`` (the package's decode)."""
    import numpy as np

    def agreement(ref, got) -> float:
        r, g = np.asarray(ref, np.float64)[0, channel], np.asarray(got, np.float64)[0, channel]
        return peak_f1([(newmodels._peaks(r, thresh), newmodels._peaks(g, thresh))])

    return agreement


def peaks_split(model: str, delivered: Path, held: list, channel: int = 0, thresh: float = 0.15) -> dict:
    """A CenterNet heat map's peaks (bench/newmodels.py ``_peaks``: 3x3 local maxima of the sigmoid at or over
    ``thresh``), float's against ``delivered``'s: how many float's has, how many of them sit on a saturated plateau
    (sigmoid exactly 1.0 in float64, ties every neighbour), and the peak F1 of all and of the unsaturated ones."""
    import numpy as np

    rel = newmodels.MODELS[model][0]
    ref, test = zoo.session_runner(newmodels.SRC / rel), zoo.session_runner(delivered)

    every, sharp, counts = [], [], [0, 0, 0]
    for f in held:
        hr, hq = ref(f)[0][0, channel].astype(np.float64), test(f)[0][0, channel].astype(np.float64)
        a, b = newmodels._peaks(hr, thresh), newmodels._peaks(hq, thresh)
        every.append((a, b))
        flat_a = 1 / (1 + np.exp(-hr[tuple(a.T)])) >= 1.0 if len(a) else np.zeros(0, bool)
        flat_b = 1 / (1 + np.exp(-hq[tuple(b.T)])) >= 1.0 if len(b) else np.zeros(0, bool)
        sharp.append((a[~flat_a], b[~flat_b]))
        counts = [counts[0] + len(a), counts[1] + int(flat_a.sum()), counts[2] + len(b)]
    return {"float_peaks": counts[0], "float_plateau_peaks": counts[1], "delivered_peaks": counts[2],
            "peak_f1": round(peak_f1(every), 4), "unsaturated_peak_f1": round(peak_f1(sharp), 4)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--preset", required=True)
    ap.add_argument("--reading", action="append", default=[], metavar="OUT=KIND")
    ap.add_argument("--watch", default="", help="nodes whose fate in repair is reported")
    ap.add_argument("--variants", default="plain", help="plain and/or exclude:NODE+NODE, comma separated")
    ap.add_argument("--calib", type=int, default=12)
    ap.add_argument("--held", type=int, default=32)
    ap.add_argument("--json")
    ap.add_argument("--keep", default="", help="a folder to keep the delivered models in (default: a temporary one)")
    ap.add_argument("--agreement", default="", metavar="OUT=peaks:CHANNEL:THRESH",
                    help="the package's peak decode of OUT as a floor_output_agreement (repair answers it)")
    ap.add_argument("--peaks-of", default="", help="no quantize: the peaks of this delivered model against float's")
    a = ap.parse_args()
    if a.peaks_of:
        held = newmodels.MODELS[a.model][1](a.held, 1000)
        print(json.dumps({"model": a.model, "delivered": a.peaks_of, **peaks_split(a.model, Path(a.peaks_of), held)}))
        return
    readings = dict(item.rsplit("=", 1) for item in a.reading)
    make = newmodels.MODELS[a.model][1]
    calib, held = make(a.calib, 1), make(a.held, 1000)
    watch = [w for w in a.watch.split(",") if w]
    agreements = {}
    if a.agreement:
        out, _, spec = a.agreement.partition("=")
        _, channel, thresh = spec.split(":")
        agreements[out] = peaks_agreement(int(channel), float(thresh))
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        tmp = a.keep or scratch
        Path(tmp).mkdir(parents=True, exist_ok=True)
        for variant in a.variants.split(","):
            exclude = variant.partition(":")[2].split("+") if variant.startswith("exclude:") else []
            row = one(a.model, a.preset, readings, exclude, watch, calib, held, Path(tmp) / f"{variant.replace(':', '_')}.onnx",
                      agreements)
            row["agreement_fn"] = a.agreement or None
            print(json.dumps(row), flush=True)
            rows.append(row)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
