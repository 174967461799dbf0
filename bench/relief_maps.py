"""The relief cosine (analysis/relief.py) of saved value maps, beside the pooled cosine the floor judged before it.

relief21 (issue 27): reads the float and delivered maps ``bench/zoodata_value_maps.py --save`` wrote (``NAME.PRESET.npz``,
``ref<output>_<feed>`` / ``got<output>_<feed>``, the bench's held-out feeds) with the library's own
:func:`onnxptq.analysis.relief.relief_cosine`: whether float's values are a field (neighbour correlation along both axes,
each map centred), the relief cosine pooled over the maps, the worst map's, and the pooled cosine around the origin. An
output that is not a field prints "not a field". With ``--verdicts`` (the JSON lines the same run appended), the
library's own verdict on its held-out split beside it.

    PYTHONPATH=src:.:bench python bench/relief_maps.py /work/cache/relief21/vm/npz [--verdicts /work/cache/relief21/vm/vm.jsonl]
"""

from __future__ import annotations

import argparse
import glob
import json
import re
import sys
from pathlib import Path

import numpy as np

import _common  # noqa: F401  (the repository root on sys.path)

from onnxptq.analysis.relief import relief_cosine


def _pairs(path: str) -> dict[str, list[tuple[np.ndarray, np.ndarray]]]:
    """Each saved output's (float, delivered) maps, feed by feed."""
    z = np.load(path)
    out: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    for key in sorted(z, key=lambda k: (k.split("_")[0], int(k.split("_")[1]))):
        if key.startswith("ref"):
            index = key[3:].split("_")[0]
            out.setdefault(index, []).append((z[key], z["got" + key[3:]]))
    return out


def _pooled(pairs: list[tuple[np.ndarray, np.ndarray]]) -> float:
    x = np.concatenate([r.ravel() for r, _ in pairs]).astype(np.float64)
    y = np.concatenate([g.ravel() for _, g in pairs]).astype(np.float64)
    return float(x @ y / np.sqrt((x @ x) * (y @ y)))


def _verdicts(path: str | None) -> dict[tuple[str, str], str]:
    """``(model, preset)`` → the library's words on its value map(s) (its own held-out split)."""
    found: dict[tuple[str, str], str] = {}
    if not path:
        return found
    for line in Path(path).read_text().splitlines():
        row = json.loads(line)
        words = []
        for out, r in row.get("outputs", {}).items():
            m = re.search(r"relief cosine ([0-9.]+) over (\d+) maps", r.get("floor_says", ""))
            words.append(f"{out}: {r['verdict']}" + (f", relief {m.group(1)} on {m.group(2)} maps" if m else ", no relief reading"))
        found[(row["model"], row["preset"])] = "; ".join(words) + (f" (repair: {row.get('repair')})" if row.get("repair") != "-" else "")
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+")
    ap.add_argument("--verdicts", default=None, help="zoodata_value_maps.py's JSON lines: the library's verdicts")
    args = ap.parse_args(argv)
    said = _verdicts(args.verdicts)
    print("| model | preset | output | run shape | neighbour corr. | pooled cosine | relief cosine (bench held-out) | worst map | maps | library's verdict |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for folder in args.folders:
        for path in sorted(glob.glob(str(Path(folder) / "*.npz"))):
            model, preset = Path(path).name[:-4].rsplit(".", 1)
            for index, pairs in _pairs(path).items():
                found = relief_cosine([r for r, _ in pairs], [g for _, g in pairs])
                head = f"| {model} | {preset} | {index} | {list(pairs[0][0].shape)} |"
                if found is None:
                    print(f"{head} not a field | {_pooled(pairs):.5f} | - | - | - | {said.get((model, preset), '')} |")
                    continue
                print(f"{head} {found.correlation[0]:.3f}, {found.correlation[1]:.3f} | {_pooled(pairs):.5f} | {found.cosine:.5f} | "
                      f"{found.worst:.4f} | {found.maps} | {said.get((model, preset), '')} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
