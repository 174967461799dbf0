"""Repair's cost where it acted on the fuzz (issue 27, repaircurse): builds and CPU per quantization.

bench/fuzz_silent.py classifies what repair delivered but does not keep its count of builds. This script
takes a fuzz campaign file (``--json`` of fuzz_silent), quantizes again every (module, preset) where the
floor broke and repair acted, on the same exported module (``src``) and calibration feeds
(``export_fuzz.draw(index, seed).feeds(calib, 1)``), and prints the repair record's builds
(``evaluations``), its CPU s (``cpu_seconds``) and the nodes kept float or stepped up, with the totals;
whether the delivered verdict left an output unjudged, and (repairjudge) how many candidates the margins
on such an output ruled out (``ruled_by_measure``).
Run it once per source tree (PYTHONPATH) to compare: the modules are the same files.

Run::

    PYTHONPATH=<src>:. OMP_NUM_THREADS=1 python bench/repair_curse.py --json full_seed1.before.json --seed 1
"""

from __future__ import annotations

import _common  # noqa: F401  (puts the repository root on sys.path)
import argparse
import json
import logging
import re
import time

import export_fuzz as ef


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", nargs="+", help="fuzz_silent campaign files")
    ap.add_argument("--calib", type=int, default=32)
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"),
                    help="two outputs of this script (one tree each): print the rows whose builds or nodes moved, and totals")
    args = ap.parse_args()
    if args.compare:
        return compare(*args.compare)
    if not args.json:
        ap.error("--json is required (or --compare)")
    logging.disable(logging.WARNING)
    import onnxptq
    from onnxptq.config.presets import resolve_config

    builds = cpu = rows = 0
    for path in args.json:
        data = json.loads(open(path).read())
        seed = data["seed"]
        for row in data["rows"]:
            if row.get("status") != "ok" or "small_text" not in row.get("plain", {}) or row["plain"].get("small_ok"):
                continue  # repair did not act (the plain build held)
            index = int(re.match(r"m(\d+)", row["module"]).group(1))
            spec = ef.draw(index, seed)
            spec.dynamic_seq = row["dynamic_seq"]  # as fuzz_silent found the export (a specialised sequence axis)
            calib = spec.feeds(args.calib, 1)
            c0 = time.process_time()
            res = onnxptq.quantize(row["src"], resolve_config(row["preset"]), data=list(calib))
            spent = time.process_time() - c0
            rep = res.repair if isinstance(res.repair, dict) else {}
            n = rep.get("evaluations", 0)
            builds, cpu, rows = builds + n, cpu + spent, rows + 1
            print(json.dumps({"seed": seed, "module": row["module"][:40], "preset": row["preset"], "builds": n,
                              "cpu_s": round(spent, 2), "repaired": len(rep.get("kept_float", {})) + len(rep.get("stepped_up", {})),
                              "ok": bool(res.floor and res.floor.ok), "unconfirmed": bool(res.floor and res.floor.unconfirmed),
                              # repairjudge: unjudged outputs, and candidates ruled out by their margins there (absent on older trees)
                              "unjudged": bool(res.floor and res.floor.unjudged), "ruled_by_measure": rep.get("ruled_by_measure")}),
                  flush=True)
    print(json.dumps({"rows": rows, "builds": builds, "cpu_s": round(cpu, 1)}))
    return 0


def _rows_of(path: str) -> tuple[dict[tuple, dict], dict]:
    rows, total = {}, {}
    for line in open(path):
        if line.startswith("{"):
            d = json.loads(line)
            if "module" in d:
                rows[(d["seed"], d["module"], d["preset"])] = d
            else:
                total = d
    return rows, total


def compare(before_path: str, after_path: str) -> int:
    """The rows two runs of this script (before / after trees) differ on: builds, nodes held, and the totals."""
    before, tb = _rows_of(before_path)
    after, ta = _rows_of(after_path)
    both = [k for k in before if k in after]
    print(json.dumps({"before": tb, "after": ta, "rows": len(both),
                      "most_builds": [max(before[k]["builds"] for k in both), max(after[k]["builds"] for k in both)],
                      "more_builds": sum(after[k]["builds"] > before[k]["builds"] for k in both),
                      "fewer_builds": sum(after[k]["builds"] < before[k]["builds"] for k in both),
                      "nodes_held": [sum(before[k]["repaired"] for k in both), sum(after[k]["repaired"] for k in both)],
                      "unconfirmed": [sum(before[k]["unconfirmed"] for k in both), sum(after[k]["unconfirmed"] for k in both)],
                      "unjudged": [sum(bool(before[k].get("unjudged")) for k in both), sum(bool(after[k].get("unjudged")) for k in both)],
                      "rows_ruled_by_measure": sum(bool(after[k].get("ruled_by_measure")) for k in both)}))
    for k in both:
        b, a = before[k], after[k]
        if (b["builds"], b["repaired"]) != (a["builds"], a["repaired"]):
            print(f"seed {k[0]} {k[1][:36]} {k[2]}: builds {b['builds']} -> {a['builds']}, nodes held {b['repaired']} -> "
                  f"{a['repaired']}, ruled by measure {a.get('ruled_by_measure')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
