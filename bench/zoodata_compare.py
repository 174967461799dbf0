"""Two runs of the issue-27 zoo side by side (``bench/zoo.py`` JSON files): per (model, preset) the
agreement before and after, what the library's floor said, and every row the must-show counts against
(below the floor, SILENT, refused, raw exception, timeout), so a rerun on one tree can be read against
the merged table it replaces.

Rows measured before ``bench/zoo.py`` recorded the floor's verdict (``verdict``) get it read back from
their "repair kept" column, marked ``(read from repair)``: "-" is a floor that held with nothing to say,
"note: could not confirm …" and "not judged: …" the summary's own words, "N float / stepped up" a repair.

    PYTHONPATH=src:.:bench python bench/zoodata_compare.py bench/RESULTS_zoo.json /work/cache/zoo18/run/*.json
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from pathlib import Path

import _common  # noqa: F401 - the repository root on sys.path

from zoo import PRESETS, floor


def said(row: dict) -> str:
    """The floor's verdict of a row: recorded, or read back from the repair column of an older row."""
    if row.get("verdict"):
        return row["verdict"]
    if row.get("status") in ("refused", "exception", "timeout", "crashed"):
        return "-"
    rep = str(row.get("repair") or "-")
    if rep == "-":
        state = "holds"
    elif "could not confirm" in rep:
        state = "could not confirm"
    elif rep.startswith("not judged"):
        state = "holds (not judged)"
    elif "float" in rep or "stepped up" in rep or rep == "nothing kept":
        state = "repaired"
    else:
        state = "?"
    return f"{state} (read from repair)"


def kind(row: dict) -> str:
    """What the must-show counts: ok, below, SILENT (below while the floor said a bare "holds"), refused, raw, timeout."""
    status = row.get("status", "")
    if status in ("refused", "timeout", "crashed"):
        return status
    if status == "exception":
        return "raw"
    agreement = row.get("agreement")
    if agreement is not None and agreement >= row.get("floor", floor(row["preset"])):
        return "ok"
    return "SILENT" if said(row).split(" (read")[0] == "holds" else "below"


def repaired(row: dict) -> bool:
    """Repair built candidates for this row: its record says so, or the "repair kept" column opens with what it kept
    ("N float: …", "N stepped up …", bench/zoo.py's ``_repair_kept``; a floor's note merely mentions float)."""
    return bool(row.get("repair_search")) or re.match(r"(\d+ (float|stepped up)\b|nothing kept$)", str(row.get("repair") or "")) is not None


def _pair(before, after, spec: str) -> str:
    """"before → after" of one figure ("-" for one not measured)."""
    def fmt(v):
        return "-" if v is None else format(v, spec)
    return f"{fmt(before)} → {fmt(after)}"


def load(paths: list[Path]) -> dict[tuple[str, str], dict]:
    rows: dict[tuple[str, str], dict] = {}
    for path in paths:  # later files win per pair, as zoo.py --merge
        rows.update({(r["model"], r["preset"]): r for r in json.loads(path.read_text())["rows"]})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before", type=Path, help="the merged table's JSON (bench/RESULTS_zoo.json)")
    ap.add_argument("after", type=Path, nargs="+", help="the rerun's JSON files")
    ap.add_argument("--all", action="store_true", help="every pair, not only those the must-show counts or that moved")
    args = ap.parse_args(argv)
    before, after = load([args.before]), load(args.after)
    order = {p: i for i, p in enumerate(PRESETS)}
    counts: dict[str, int] = {}
    print("| model | preset | floor | before (library) | after | moved | floor said (before → after where it changed) | what | quantize CPU s | size × | load (after) | repair kept (after) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for key in sorted(after, key=lambda k: (k[0], order.get(k[1], 99))):
        a, b = after[key], before.get(key, {})
        k = kind(a)
        counts[k] = counts.get(k, 0) + 1
        ag, bg = a.get("agreement"), b.get("agreement")
        moved = None if ag is None or bg is None else round(ag - bg, 4)
        # a row repair acted on in either run is shown with what it cost (CPU s, file) beside the run it replaces
        if not args.all and k == "ok" and (moved is None or abs(moved) < 0.005) and kind(b) in ("ok", "") \
                and not (repaired(a) or repaired(b)):
            continue
        # a verdict that changed is shown as before → after: what the user was told moved with the figure
        told = said(a) if not b or said(b) == said(a) else f"{said(b)} → {said(a)}"
        print(f"| {key[0]} | {key[1]} | {a.get('floor', floor(key[1]))} | {bg} ({b.get('library', '-')}) | {ag if ag is not None else a.get('status')} | "
              f"{moved if moved is not None else '-'} | {told} | **{k}** | "
              f"{_pair(b.get('quantize_cpu_s'), a.get('quantize_cpu_s'), '.1f')} | {_pair(b.get('size_ratio'), a.get('size_ratio'), '.3f')} | "
              f"{a.get('load', '-')} | {str(a.get('repair') or a.get('error') or '-')[:160]} |")
    print()
    print(f"{len(after)} pairs rerun: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    print()
    print("| preset | pairs measured | quantize CPU s median / max | latency × median / max | size × median |")
    print("| --- | --- | --- | --- | --- |")
    for preset in PRESETS:
        got = [r for (m, p), r in after.items() if p == preset and r.get("agreement") is not None]
        cpu = [r["quantize_cpu_s"] for r in got if r.get("quantize_cpu_s") is not None]
        lat = [r["latency_ratio"] for r in got if r.get("latency_ratio") is not None]
        size = [r["size_ratio"] for r in got if r.get("size_ratio") is not None]
        med = lambda v, f: f"{statistics.median(v):{f}}" if v else "-"  # noqa: E731
        print(f"| {preset} | {len(got)} | {med(cpu, '.2f')} / {max(cpu, default=float('nan')):.2f} | "
              f"{med(lat, '.2f')} / {max(lat, default=float('nan')):.2f} | {med(size, '.3f')} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
