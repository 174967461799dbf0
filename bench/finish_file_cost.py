"""finish + save, before and after the session read the file's own bytes (issue 26 item 1; bench/RESULTS.md blockq22).

``python bench/finish_file_cost.py MODEL PRESETS`` quantizes ``MODEL`` (``cls``/``rec`` or a zoo name, as
``bench/quantize_stages.py`` reads it; repair off) once per preset, keeps the arguments complete() gave
``finish_file``, and then times, alternating, best of ``--reps``, CPU seconds (``time.process_time``, every session
with one thread):

* **before**: ``finish`` on the in-memory model (its checker, its session with the decisions appended) and the
  save as it was (the lean rewrites, a second serialization, the write);
* **after**: ``finish_file`` (the lean rewrites once, one serialization, the checker and the session on those
  bytes) and the save of those bytes.

It checks that both saves give the same file and that the two sessions' outputs (the decisions included, under
each one's names) are equal bit for bit on ``--feeds`` calibration feeds.

    OMP_NUM_THREADS=1 PYTHONPATH=src:.:bench python bench/finish_file_cost.py rec BF16,BFP16,MX9,MXINT8,MXFP8_E4M3
"""

from __future__ import annotations

import _common  # noqa: F401  (the repository root on sys.path: testkit)
import argparse
import gc
import logging
import os
import tempfile
import time
from typing import Any

import numpy as np


def _capture(path: Any, preset: str, data: list, folder: str) -> dict[str, Any]:
    """complete()'s arguments to finish_file and the in-memory model, from one quantize (repair off)."""
    import onnxptq.pipeline.complete as complete_mod
    from onnxptq import quantize
    from quantize_stages import quiet_config

    kept: dict[str, Any] = {}
    real = complete_mod.finish_file

    def grab(source, stored, written, also=()):
        kept.update(source=source, stored=stored, written=written, also=tuple(also))
        return real(source, stored, written, also=also)

    complete_mod.finish_file = grab
    try:
        result = quantize(path, quiet_config(preset, repair=False), data, os.path.join(folder, "q.onnx"))
    finally:
        complete_mod.finish_file = real
    kept["model"] = result.model
    return kept


def run(model: str, presets: list[str], samples: int, reps: int, feeds: int) -> None:
    from onnxptq.graph import io
    from onnxptq.pipeline import finish as finish_mod
    from quantize_stages import _data, _one_thread

    path, data = _data(model, samples)
    folder = tempfile.mkdtemp(prefix="finish_file_")
    _one_thread()
    for preset in presets:
        k = _capture(path, preset, data, folder)
        before_path, after_path = os.path.join(folder, "before.onnx"), os.path.join(folder, "after.onnx")

        def before() -> Any:
            _, session = finish_mod.finish(k["model"], k["source"], also=k["also"])
            with k["written"](k["stored"]):
                io.save_model(k["stored"], before_path)
            return session

        def after() -> Any:
            session, names, file = finish_mod.finish_file(k["source"], k["stored"], k["written"], also=k["also"])
            io.save_serialized(file.write, after_path)
            file.close()
            return session, names

        cpu: dict[str, list[float]] = {"before": [], "after": []}
        for _ in range(reps):
            for key, fn in (("before", before), ("after", after)):
                gc.collect()
                t = time.process_time()
                fn()
                cpu[key].append(time.process_time() - t)
        old, (new, names) = before(), after()
        with open(before_path, "rb") as a, open(after_path, "rb") as b:
            same_file = a.read() == b.read()
        asked_old = [o.name for o in old.get_outputs()]
        asked_new = [o.name for o in new.get_outputs()]
        same = all(all(np.array_equal(x, y) for x, y in zip(old.run(asked_old, f), new.run(asked_new, f)))
                   for f in data[:feeds])
        b, a = min(cpu["before"]), min(cpu["after"])
        print(f"| {model} | {preset} | {len(k['also'])} | {b:.3f} | {a:.3f} | {b - a:+.3f} | {a / b:.2f} | "
              f"{'yes' if same_file else 'NO'} | {'yes' if same else 'NO'} | {os.getloadavg()[0]:.0f} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("presets", nargs="?", default="BF16,BFP16,MX9,MXINT8,MXFP8_E4M3")
    ap.add_argument("--samples", type=int, default=16)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--feeds", type=int, default=4)
    ap.add_argument("--header", action="store_true")
    args = ap.parse_args()
    logging.disable(logging.WARNING)
    if args.header:
        print("| model | preset | decisions | before CPU s | after CPU s | saved | after ÷ before | same file | same outputs | load |")
        print("|---|---|---:|---:|---:|---:|---:|---|---|---:|")
    run(args.model, args.presets.split(","), args.samples, args.reps, args.feeds)


if __name__ == "__main__":
    main()
