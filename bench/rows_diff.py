"""Two runs of bench/newmodels.py (or bench/zoo.py rows) side by side: what a change moved.

Why: a floor change must show, per (model, preset), that the verdicts, the repair and its cost did
not move where they should not, and what moved where they should; the JSON rows of a run on each
source tree hold all of it (agreement, status, warnings, nodes kept float, quantize CPU s), and
reading two tables by eye misses a moved warning. Rows are matched by (model, preset); a row whose
status, nodes kept, agreement or warnings differ is marked ``moved``.

    python bench/rows_diff.py BEFORE.json AFTER.json [--md OUT.md]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def _cell(row: dict | None) -> str:
    if row is None:
        return "-"
    if row.get("status") in ("exception", "timeout"):
        return f"{row['status']}: {str(row.get('error', ''))[:60]}"
    warned = len(row.get("warnings") or [])
    kept = row.get("n_kept")
    return (f"{row.get('agreement', '-')} / {row.get('status', '-')} / kept {kept if kept is not None else '-'} / "
            f"{warned} warning{'s' if warned != 1 else ''} / {row.get('quantize_cpu_s', '-')} CPU s")


def _moved(a: dict | None, b: dict | None) -> bool:
    if a is None or b is None:
        return True
    keys = ("status", "n_kept", "agreement")
    return any(a.get(k) != b.get(k) for k in keys) or len(a.get("warnings") or []) != len(b.get("warnings") or [])


def table(before: list[dict], after: list[dict]) -> str:
    """The markdown table: one line per (model, preset) of either run, in the after run's order."""
    index_b = {(r["model"], r["preset"]): r for r in before}
    index_a = {(r["model"], r["preset"]): r for r in after}
    keys = list(index_a) + [k for k in index_b if k not in index_a]
    lines = ["| model | preset | before: agreement / status / kept / warnings / CPU s | after | |",
             "| --- | --- | --- | --- | --- |"]
    for key in keys:
        a, b = index_b.get(key), index_a.get(key)
        lines.append(f"| {key[0]} | {key[1]} | {_cell(a)} | {_cell(b)} | {'**moved**' if _moved(a, b) else 'same'} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--md", default="")
    a = ap.parse_args()
    text = table(json.loads(Path(a.before).read_text()), json.loads(Path(a.after).read_text()))
    if a.md:
        Path(a.md).write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
