"""Which models' structure regions (graph/structure.py) a change moves: list, then compare.

    find ~/.cache/onnxptq/models /work/shared/models /work/cache/newmodels*/src -name '*.onnx' > LIST
    PYTHONPATH=<tree>/src python bench/structure_regions.py list LIST OUT.jsonl      # once per tree
    python bench/structure_regions.py compare BASE.jsonl HEAD.jsonl                  # the files whose regions differ

``list`` writes one JSON line per file (regions as kind, x, y, interior, constants; files over 400 MB are
skipped, a failure to load or search is recorded as ``error``). Raw files, before prepare: the plan sees
the prepared graph, so a difference here is where to look, not a change of bytes by itself.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from collections import Counter


def list_regions(listing: str, out_path: str) -> None:
    import onnx

    from onnxptq.graph.structure import find_regions

    logging.disable(logging.WARNING)
    with open(out_path, "w") as out:
        for path in open(listing).read().split():
            if os.path.getsize(path) > 400e6:
                continue
            try:
                regions = find_regions(onnx.load(path))
            except Exception as e:  # noqa: BLE001 (a bench: record and go on)
                out.write(json.dumps({"path": path, "error": repr(e)[:200]}) + "\n")
                continue
            rows = [[r.kind, r.x, r.y, sorted(r.interior), sorted(r.constants)] for r in regions]
            out.write(json.dumps({"path": path, "regions": rows}) + "\n")
            out.flush()


def compare(base_path: str, head_path: str) -> None:
    base = {d["path"]: d for d in map(json.loads, open(base_path))}
    head = {d["path"]: d for d in map(json.loads, open(head_path))}
    print(f"{len(base)} / {len(head)} files; errors {sum('error' in d for d in base.values())} / "
          f"{sum('error' in d for d in head.values())}")
    for path in sorted(base.keys() & head.keys()):
        a, b = base[path].get("regions", []), head[path].get("regions", [])
        if a == b:
            continue
        print(f"{path}: {len(a)} → {len(b)} regions")
        print(f"  kinds: {dict(Counter(r[0] for r in a))} → {dict(Counter(r[0] for r in b))}")
        only_a = {tuple(r[:3]) for r in a} - {tuple(r[:3]) for r in b}
        only_b = {tuple(r[:3]) for r in b} - {tuple(r[:3]) for r in a}
        print(f"  only base ({len(only_a)}): {sorted(only_a)[:3]}")
        print(f"  only head ({len(only_b)}): {sorted(only_b)[:3]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("list")
    a.add_argument("listing")
    a.add_argument("out")
    c = sub.add_parser("compare")
    c.add_argument("base")
    c.add_argument("head")
    args = ap.parse_args()
    if args.cmd == "list":
        list_regions(args.listing, args.out)
    else:
        compare(args.base, args.head)


if __name__ == "__main__":
    main()
