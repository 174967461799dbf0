"""What a quantization holds at repair's top: live allocations by the line that made them (issue 26 item 4).

``python bench/quantize_held.py MODEL PRESET`` quantizes ``MODEL`` (as ``bench/quantize_peak.py`` takes
it; PP-OCRv4 rec on ``bench/quantize.py``'s rendered lines with ``--npz``) once under ``tracemalloc``
and, at the entry of repair's first candidate ``measure`` (its runs done, its session closed: what
the candidate's runs add to is then alive, both sides of the judgement), prints:

* ``VmRSS`` and the traced total (NumPy's buffers are traced; onnxruntime's and protobuf's are not);
* the largest live allocation sites (the first ``--top``), grouped by their innermost library frame
  (``onnxptq/...``), with the count of blocks and their MiB;
* the ``onnx.ModelProto`` objects alive and their serialized size (protobuf memory, untraced).

Why a second script beside ``quantize_peak.py``: that one says *when* the peak comes (a candidate's
runs), this one *what* is held there, so a change can aim at the holder (peak54's section in
bench/RESULTS.md). ``tracemalloc`` slows the run ~2× and adds its own memory: RSS here is not the
peak figure (``quantize_peak.py`` and ``quantize.py`` give those).

    PYTHONPATH=src:. OMP_NUM_THREADS=1 python bench/quantize_held.py rec A8W8 --npz <workdir>/rec_lines_64.npz
"""

from __future__ import annotations

import _common  # noqa: F401  (the repository root on sys.path: testkit)
import argparse
import collections
import dataclasses
import gc
import logging
import tracemalloc
from typing import Any

from quantize_peak import _status  # /proc/self/status in MiB, as the peak's stages read it


def _site(trace: tracemalloc.Traceback) -> str:
    """The innermost frame in the library (else in bench/, else the innermost), with the library caller above it."""
    frames = list(trace)[::-1]  # a Traceback runs oldest first: most recent first here
    mine = [f for f in frames if "/onnxptq/" in f.filename] or [f for f in frames if "/bench/" in f.filename] or frames[:1]
    return " <- ".join(f"{f.filename.split('/src/')[-1].split('/bench/')[-1]}:{f.lineno}" for f in mine[:3])


def held(top: int) -> list[str]:
    """Lines describing what is alive now (see the module docstring)."""
    import onnx

    snap = tracemalloc.take_snapshot()
    sites: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    for stat in snap.statistics("traceback"):
        s = sites[_site(stat.traceback)]
        s[0] += stat.size
        s[1] += stat.count
    total = sum(size for size, _ in sites.values())
    lines = [f"VmRSS {_status('VmRSS')} MiB, traced {total / 2**20:.1f} MiB"]
    for name, (size, count) in sorted(sites.items(), key=lambda kv: -kv[1][0])[:top]:
        lines.append(f"  {size / 2**20:6.1f} MiB {count:6d} blocks  {name}")
    models = [o for o in gc.get_objects() if isinstance(o, onnx.ModelProto)]
    lines.append("  ModelProtos alive (serialized MiB): " + ", ".join(f"{m.ByteSize() / 2**20:.1f}" for m in models))
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    import quantize_stages

    quantize_stages.model_arguments(ap, lines=True)
    ap.add_argument("--top", type=int, default=10)
    args = ap.parse_args()
    logging.disable(logging.WARNING)
    from onnxptq.algorithms import repair
    from onnxptq.api import quantize
    from onnxptq.config.presets import get_preset
    from onnxptq.memory import share_malloc_arena

    report: list[str] = []
    measure = repair.measure

    def first_measure(*a: Any, **k: Any) -> Any:
        if not report:
            report.extend(held(args.top))
        return measure(*a, **k)

    repair.measure = first_measure
    share_malloc_arena()
    cfg = get_preset(args.preset)
    cfg = cfg.replace(calibration=dataclasses.replace(cfg.calibration, progress=False))

    path, data = quantize_stages.model_and_data(args.model, args.samples, args.npz, args.lines)
    tracemalloc.start(16)
    result = quantize(str(path), cfg, data, None)
    tracemalloc.stop()
    print(f"{args.model} {args.preset}: builds {(result.repair or {}).get('evaluations')}; at repair's first measure:")
    print("\n".join(report) if report else "  (no repair candidate was measured)")


if __name__ == "__main__":
    main()
