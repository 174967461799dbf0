"""The sin/cos table search of the lean file step (graph/passes/sinusoid_tables.recipe), two trees' modules
side by side on khmersm's position table and on tables made as exporters make them: CPU seconds (best of
``--reps``) and whether both give the same recipe, bit for bit; and the file step's onnxruntime check
(pipeline/lean_file.decodes_exactly) of khmersm's form.

    OMP_NUM_THREADS=1 PYTHONPATH=src:.:bench python bench/blockbody_sinusoid_search.py --base /path/to/base/tree

Why: the search and the check were khmersm's whole ``lean`` excess over BF16 in a block quantize
(+0.11-0.15 CPU s, bench/RESULTS.md lead 2026-11-29 15:56; blockq20).
"""

from __future__ import annotations

import _common  # noqa: F401  (the repository root on sys.path: testkit)
import argparse
import importlib.util
import math
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper


def _module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tables() -> dict[str, np.ndarray]:
    """khmersm's table and exporter-made ones (tests/test_sinusoid_tables.py's layouts, NumPy float32)."""
    from testkit import zoo

    model = onnx.load(zoo.get("khmersm").path())
    out = {"khmersm [1, 2048, 192]": numpy_helper.to_array(next(t for t in model.graph.initializer
                                                                if t.name == "model.pos.pe"))}
    length, width = 512, 64
    pos = np.arange(length, dtype=np.float32)[:, None]
    div = np.exp(np.arange(0, width, 2, dtype=np.float32) * np.float32(-math.log(10000.0) / width)).astype(np.float32)
    inter = np.zeros((length, width), np.float32)
    inter[:, 0::2], inter[:, 1::2] = np.sin(pos * div), np.cos(pos * div)
    out["interleaved [1, 512, 64]"] = inter[None]
    halves = np.concatenate([np.sin(pos * div), np.cos(pos * div)], 1).astype(np.float32)
    out["halves [1, 512, 64]"] = halves[None]
    padded = halves.copy()
    padded[1] = 0
    out["padding row [1, 512, 64]"] = padded[None]
    rng = np.random.default_rng(0)
    out["noisy (no table)"] = np.clip(inter + rng.normal(0, 1e-3, inter.shape).astype(np.float32), -1, 1)[None]
    out["wide [1, 512, 2560] (chunks)"] = np.tile(inter, (1, 40))[None]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, help="the tree whose sinusoid_tables.py is compared with this one's")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    rel = Path("src/onnxptq/graph/passes/sinusoid_tables.py")
    old = _module(Path(args.base) / rel, "base_sinusoid_tables")
    new = _module(Path(__file__).resolve().parents[1] / rel, "new_sinusoid_tables")
    cpu = time.process_time
    print("| table | corrections | base CPU s | this tree CPU s | same recipe |")
    print("|---|---:|---:|---:|---|")
    for name, values in tables().items():
        times = {"old": [], "new": []}
        got = {}
        for _ in range(args.reps):
            for key, module in (("old", old), ("new", new)):  # alternating
                t = cpu()
                got[key] = module.recipe(values)
                times[key].append(cpu() - t)
        a, b = got["old"], got["new"]
        same = (a is None and b is None) or (a is not None and b is not None and all(
            np.array_equal(x.view(np.uint8), y.view(np.uint8)) for x, y in zip(a, b)))
        print(f"| {name} | {'none' if a is None else len(a[2])} | {min(times['old']):.3f} | {min(times['new']):.3f} | "
              f"{'yes' if same else 'NO'} |", flush=True)
    from onnxptq.pipeline.lean_file import decodes_exactly

    values = tables()["khmersm [1, 2048, 192]"]
    kinds, freqs, where, fixes = new.recipe(values)
    stored, nodes = new._form("pe", tuple(values.shape), kinds, freqs, where, fixes)
    spent = []
    for _ in range(args.reps):
        t = cpu()
        assert decodes_exactly(values, stored, nodes, "pe")
        spent.append(cpu() - t)
    print(f"\nkhmersm's form checked in onnxruntime (folded and unfolded): {min(spent):.3f} CPU s (best of {args.reps})")


if __name__ == "__main__":
    main()
