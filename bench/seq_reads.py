"""Sequence and regression readings as their users read them (issue 27, seqreads2): the figures behind
analysis/symbol_reads.py (long CTC reads by their edit distance) and scores.py's entity rows.

    lengths  KEY...            float's collapsed CTC symbols per read as the floor sees them (12 calibration feeds,
                               seed 1): which readers stay exact reads (< symbol_reads.LONG_READ)
    caustic  PRESET...         caustic-nmr without repair: the floor's verdict on pred_mean beside the users' reading
                               (shifts within 0.3 ppm of float's); --long: 5-7 peptides a feed side by side (> scores.MAX_ROWS)
    verdicts KEY... --presets  the floor's verdict without repair (deterministic: no repair search, no time cap)

Run from a checkout with ``PYTHONPATH=src:.`` (or another tree's ``src`` to compare trees) and
``NEWMODELS18_SRC=/work/cache/newmodels18/src``; ``--json`` keeps the rows.
"""

from __future__ import annotations

import argparse
import json
import pickle
import random
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

import newmodels as nm


def _model(key: str) -> tuple[str, object]:
    path, make, _, _ = nm.MODELS[key]
    return (path if str(path).startswith("/") else str(nm.SRC / path)), make


def lengths(keys: list[str]) -> list[dict]:
    from onnxptq.analysis.class_scores import judge_positions
    from onnxptq.analysis.floor import readings_of

    rows = []
    for key in keys:
        path, make = _model(key)
        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        outs = [dict(zip(names, session.run(None, f))) for f in make(12, 1)]
        for name in readings_of(onnx.load(path))["class_outputs"]:
            refs = [np.asarray(o[name]) for o in outs]
            p = judge_positions(refs, refs, strings_only=True) if refs[0].ndim >= 3 else None
            row = {"model": key, "output": name, "ctc": p is not None}
            if p is not None:
                row.update(reads=p.reads, symbols=p.chars, per_read=round(p.chars / p.reads, 1), by_symbols=p.symbols)
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


_ATOMS = ("element", "amino_acid", "atom_role", "bfactor", "pos", "node_normal")
_EDGES = ("edge_dist", "seq_sep", "same_residue", "is_hbond", "hb_cos")
_RESIDUES = ("target_mask", "residue_types", "residue_geometry", "target_environment", "temperature_feature",
             "target_atom_rsasa")


def _side_by_side(parts: list[dict]) -> dict:
    """Peptides as one disconnected graph (atom indices offset): float's output is theirs stacked, exactly
    (checked: max difference 0.0 on five of them), so a feed of more residues than scores.MAX_ROWS costs no embedding."""
    out, offset, edges, targets = {}, 0, [], []
    for f in parts:
        edges.append(f["edge_index"] + offset)
        targets.append(f["target_indices"] + offset)
        offset += f["element"].shape[0]
    out["edge_index"], out["target_indices"] = np.concatenate(edges, 1), np.concatenate(targets, 0)
    for k in _ATOMS + _EDGES + _RESIDUES:
        out[k] = np.concatenate([f[k] for f in parts], 0)
    return out


def _caustic_feeds(n: int, long: bool, cache: Path | None) -> list[dict]:
    """``n`` peptides (caustic_feeds, seed 1; read from / written to ``cache``); ``long``: 8 feeds of 5-7 of them side
    by side, each of more than 64 residues (rdkit's embedding of 66-80 residue peptides took over 16 CPU minutes for 8)."""
    if cache is not None and cache.exists():
        feeds = pickle.loads(cache.read_bytes())
    else:
        feeds = nm.caustic_feeds(n, 1)
        if cache is not None:
            cache.write_bytes(pickle.dumps(feeds))
    if not long:
        return feeds
    rng, merged = random.Random(3), []
    while len(merged) < 8:
        m = _side_by_side([feeds[i] for i in rng.sample(range(len(feeds)), rng.randint(5, 7))])
        rows = m["residue_types"].shape[0]
        if rows > 64 and rows not in [x["residue_types"].shape[0] for x in merged] or len(merged) >= 6:
            merged.append(m)
    return merged


def caustic(presets: list[str], n: int, long: bool, cache: Path | None, out_dir: Path) -> list[dict]:
    import onnxptq

    path, _ = _model("caustic_nmr")
    feeds = _caustic_feeds(n, long, cache)
    float_run = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    ref = [float_run.run(["pred_mean"], f)[0] for f in feeds]
    rows = []
    for preset in presets:
        out = out_dir / f"caustic_{'long_' if long else ''}{preset}.onnx"
        result = onnxptq.quantize(path, onnxptq.get_preset(preset).replace(repair=False), feeds, output=out)
        run = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
        err = np.concatenate([np.abs(r - run.run(["pred_mean"], f)[0])[np.isfinite(r)] for r, f in zip(ref, feeds)])
        check = result.floor.outputs["pred_mean"]
        row = {"preset": preset, "residues": [int(r.shape[0]) for r in ref], "floor_ok": check.ok,
               "scores": check.scores, "cosine": round(check.cosine, 6), "within_0.3ppm": round(float(np.mean(err <= 0.3)), 4)}
        rows.append(row)
        print(json.dumps(row, default=str), flush=True)
    return rows


def verdicts(keys: list[str], presets: list[str], held: int, out_dir: Path) -> list[dict]:
    """The floor's verdict without repair; ``held``: also the bench's task metric on that many held-out
    feeds (seed 1000, as bench/newmodels.py draws them) for the model without repair."""
    import onnxptq

    rows = []
    for key in keys:
        path, make = _model(key)
        calib = make(12, 1)
        others = make(held, 1000) if held else []
        ref = nm._memo(nm.zoo.session_runner(path), others) if held else None
        for preset in presets:
            t = time.process_time()
            output = out_dir / f"{key}.{preset}.norepair.onnx"
            result = onnxptq.quantize(path, onnxptq.get_preset(preset).replace(repair=False), calib, output=output)
            outs = {n: {"ok": c.ok, "top1": c.top1, "rows": c.rows, "unjudged": c.top1_unjudged}
                    for n, c in result.floor.outputs.items()}
            row = {"model": key, "preset": preset, "ok": result.floor.ok, "outputs": outs, "cpu_s": round(time.process_time() - t, 1),
                   "text": result.floor.describe()[:500]}
            if held:
                test = nm._memo(nm.zoo.session_runner(str(output)), others)
                row["task_without_repair"] = round(float(nm.MODELS[key][3](ref, test, others, None)), 4)
            rows.append(row)
            print(json.dumps(row, default=str), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("lengths", "caustic", "verdicts"))
    ap.add_argument("names", nargs="+", help="bench/newmodels.py keys (lengths, verdicts) or presets (caustic)")
    ap.add_argument("--presets", default="BF16,A8W8,MXFP8_E4M3")
    ap.add_argument("--feeds", type=int, default=8, help="caustic: peptides")
    ap.add_argument("--long", action="store_true", help="caustic: 5-7 peptides a feed side by side (74-112 residues)")
    ap.add_argument("--cache", type=Path, help="caustic: the peptides' pickle (made once, then read)")
    ap.add_argument("--held", type=int, default=0, help="verdicts: the task metric on this many held-out feeds too")
    ap.add_argument("--out-dir", type=Path, default=Path("/tmp"))
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if args.what == "lengths":
        rows = lengths(args.names)
    elif args.what == "caustic":
        rows = caustic(args.names, args.feeds, args.long, args.cache, args.out_dir)
    else:
        rows = verdicts(args.names, args.presets.split(","), args.held, args.out_dir)
    if args.json:
        args.json.write_text(json.dumps(rows, default=str, indent=1))


if __name__ == "__main__":
    main()
