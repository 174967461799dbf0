"""Round 28's table for bench/RESULTS.md from bench/newmodels.py's JSON rows: the floor's verdict and what repair did,
read from the warnings the run captured (no warning: the floor held and repair did not act).

    python bench/round28_rows.py /work/cache/newmodels28/rows_a.json /work/cache/newmodels28/rows_b.json ...
"""
from __future__ import annotations

import json
import re
import sys


def verdict(r: dict) -> tuple[str, str]:
    """(the floor's verdict, what repair did) from the row's warnings."""
    ws = r.get("warnings", [])
    text = " ".join(ws)
    if r.get("status") in ("exception", "timeout"):
        return "-", "-"
    stepped = r.get("repair_stepped") or []
    kept = r.get("repair_kept") or []
    m = re.search(r"repair stepped up (\d+ of \d+) node\(s\) to ([^:]+): (.*?)(?:; after|$)", text)
    # rows run before the bench recorded repair_stepped: the names as the warning gives them (cut at 300 characters)
    names = (", ".join(stepped[:3]) + (", …" if len(stepped) > 3 else "")) if stepped else (m.group(3) if m else "")
    did = (f"stepped up {m.group(1)} to {m.group(2)}: {names}" if m else
           # the warning cut before the step's names (300 characters): the row's own record of them
           f"stepped up {r.get('n_stepped') or len(stepped)}: {names}" if stepped else
           f"kept {r.get('n_kept') or len(kept)} float: {', '.join(kept[:3])}{', …' if len(kept) > 3 else ''}" if kept else "none")
    if "broken" in text:
        # the warning is captured to 300 characters: its "after" may be cut off (the agreement column then tells)
        v = "broken, " + ("holds after repair" if "(holds" in text else "repair acted" if m or kept or stepped else "not repaired")
    elif "could NOT judge" in text:
        v = "could NOT judge (holds where judged)"
    elif "could NOT confirm" in text:
        v = "could NOT confirm (too few held-out samples)"
    else:
        v = "holds"
    if "if a caller ranks" in text:
        v += "; ranking advisory"
    return v, did


def main() -> None:
    rows = [r for path in sys.argv[1:] for r in json.load(open(path))]
    print("| model | preset | agreement | cosine | floor verdict | repair | quantize s (CPU s) | latency x | size x | status |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        v, did = verdict(r)
        ag = r.get("agreement")
        ag_s = "-" if ag is None else (f"**{ag:.4f}**" if ag < float(r.get("floor", 0)) else f"{ag:.4f}")
        cos = r.get("cosine")
        print(f"| {r['model']} | {r['preset']} | {ag_s} | {'-' if cos is None else f'{cos:.5f}'} | {v} | {did} | "
              f"{r.get('quantize_s', '-')} ({r.get('quantize_cpu_s', '-')}) | {r.get('latency_x', '-')} | {r.get('size_x', '-')} | "
              f"{r.get('status')}{': ' + r['error'] if r.get('error') else ''} |")


if __name__ == "__main__":
    main()
