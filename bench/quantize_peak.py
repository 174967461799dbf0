"""Where a quantization's peak RSS sits: each stage's RSS at entry and its VmHWM (issue 26 item 4).

``python bench/quantize_peak.py MODEL PRESET`` quantizes ``MODEL`` (as ``bench/quantize_stages.py``
takes it: ``cls``/``rec``/``det`` on random feeds, ``new:<name>``, a zoo name; or PP-OCRv4 rec on
``bench/quantize.py``'s rendered lines with ``--npz``) once in this process, after
:func:`onnxptq.memory.share_malloc_arena` (as the ``onnxptq`` command and ``bench/quantize.py``'s
child do), and prints one line per stage call in call order:

* **enter** — ``VmRSS`` when the stage was entered;
* **peak** — ``VmHWM`` when it returned, the high-water mark reset (``/proc/self/clear_refs`` 5)
  at its entry and at each inner stage's entry, so a stage's peak is its own since the last
  inner stage began (Linux only: the reset needs ``clear_refs``); a ``(before STAGE)`` line gives
  the peak between the previous reset and that stage's entry (code no stage wraps: a repair
  candidate's runs, the plan, the search's bookkeeping).

The stages are the ones holding a quantization's large buffers: preparation, calibration (its
augmented session and runs), each build, finish's session, the verification's runs and
judgement, repair's order estimate and candidates (build, session, floor measure) and the delivered build; then the
process's CPU seconds, its peak (the highest stage's: ``VmHWM`` is reset at each) and the delivered model's sha256 (trees compared file for file). Used for PP-OCRv4 rec A8W8's peak against
``quantize_static`` (bench/RESULTS.md, quanttime7):

    PYTHONPATH=src:. OMP_NUM_THREADS=1 python bench/quantize_peak.py rec A8W8 --npz <workdir>/rec_lines_64.npz
"""

from __future__ import annotations

import _common  # noqa: F401  (the repository root on sys.path: testkit)
import argparse
import dataclasses
import functools
import hashlib
import importlib
import logging
import time
from typing import Any

#: (module, function): wrapped where they are looked up from
STAGES = [("onnxptq.pipeline.calibrate", "prepare_for_quantization"), ("onnxptq.pipeline.calibrate", "collect_statistics"),
          ("onnxptq.pipeline.complete", "build_model"), ("onnxptq.pipeline.complete", "finish"),
          ("onnxptq.pipeline.complete", "_verify"), ("onnxptq.pipeline.verify", "judgement"),
          ("onnxptq.algorithms.repair", "build_model"), ("onnxptq.algorithms.repair", "judge_session"),
          ("onnxptq.algorithms.repair", "measure"), ("onnxptq.algorithms.repair_order", "tensor_errors"),
          ("onnxptq.pipeline.complete", "deliver")]


def _status(key: str) -> int:
    """``key`` of /proc/self/status in MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) // 1024
    raise KeyError(key)


def _reset_hwm() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _wrap(log: list[tuple[str, int, int]]) -> None:
    for mod, name in STAGES:
        module = importlib.import_module(mod)
        f = getattr(module, name)

        def stage(*a: Any, f: Any = f, label: str = f"{mod.rsplit('.', 1)[-1]}.{name}", **k: Any) -> Any:
            enter = _status("VmRSS")
            log.append((f"  (before {label})", enter, _status("VmHWM")))  # the peak since the last reset
            _reset_hwm()
            try:
                return f(*a, **k)
            finally:
                log.append((label, enter, _status("VmHWM")))

        setattr(module, name, functools.wraps(f)(stage))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    import quantize_stages

    quantize_stages.model_arguments(ap, lines=True)
    args = ap.parse_args()
    logging.disable(logging.WARNING)
    log: list[tuple[str, int, int]] = []
    _wrap(log)
    from onnxptq.api import quantize
    from onnxptq.config.presets import get_preset
    from onnxptq.memory import share_malloc_arena

    share_malloc_arena()
    cfg = get_preset(args.preset)
    cfg = cfg.replace(calibration=dataclasses.replace(cfg.calibration, progress=False))

    path, data = quantize_stages.model_and_data(args.model, args.samples, args.npz, args.lines)
    cpu = time.process_time()
    result = quantize(str(path), cfg, data, None)
    cpu = time.process_time() - cpu
    log.append(("  (after the last stage)", _status("VmRSS"), _status("VmHWM")))
    for label, enter, peak in log:
        print(f"{label:42s} enter {enter:5d} MiB  peak {peak:5d} MiB")
    sha = hashlib.sha256(result.model.SerializeToString()).hexdigest()[:16]
    print(f"{args.model} {args.preset}: CPU {cpu:.2f} s, builds {(result.repair or {}).get('evaluations')}, "
          f"highest stage peak {max((p for _, _, p in log), default=0)} MiB (the process's), model sha256 {sha}")


if __name__ == "__main__":
    main()
