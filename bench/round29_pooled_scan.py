"""Round 29: which known models have an output analysis/curves.pooled_features reads (a global pooling of a feature
volume read through data movement), the only outputs whose floor verdict the round's change can move.

    PYTHONPATH=src python bench/round29_pooled_scan.py [/work/cache/newmodels*/src /root/.cache/onnxptq/models/zoo ...]
"""
from __future__ import annotations

import sys
from pathlib import Path

import onnx

from onnxptq.analysis.curves import pooled_features

ROOTS = ("/work/shared/models", "/root/.cache/onnxptq/models/zoo", *sorted(str(p) for p in Path("/work/cache").glob("newmodels*/src")))


def main() -> None:
    roots = sys.argv[1:] or ROOTS
    scanned = 0
    for path in sorted({p for r in roots for p in Path(r).rglob("*.onnx")}):
        try:
            model = onnx.load(str(path), load_external_data=False)
        except Exception as e:  # a file that is no ONNX model (a Git LFS pointer, a truncated download): said, skipped
            print(f"skipped {path}: {type(e).__name__}", file=sys.stderr)
            continue
        scanned += 1
        found = pooled_features(model)
        if found:
            print(f"{path}: {sorted(found)}")
    print(f"{scanned} ONNX files scanned")


if __name__ == "__main__":
    main()
