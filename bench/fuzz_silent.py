"""Issue 27 ("never silent"): is a verdict that says "holds" true on data the floor never saw?

``bench/export_fuzz.py`` counts raw exceptions over random small torch modules as exporters spell
them; this script asks the next question of the same modules. Each module is first given
trained-like statistics (random weights make weak models whose arg-max margins are coin flips, so
agreement would mean nothing): a few Adam steps on a synthetic task of its domain (per position,
the arg-max of a fixed random teacher over the input and its neighbours, token ids included; per
pixel, a fixed random 3×3 teacher conv), BatchNorm in train mode so its running statistics are the
data's. Then, per (module, preset), like a user: ``onnxptq.quantize`` with defaults on a small
calibration set (``--calib``, 32: 8 held out by the floor), and the delivered model is judged again
on a large fresh set (``--fresh``, 256 feeds of the same distribution) by the floor's own
``measure`` with the readings the quantization used (captured from its ``Calibrated``: the same
prepared model, the same ``readings_of``, the graph's inner decisions read the same way).

Each row is classified:

- ``held-true``: the floor held, nothing repaired, and it holds on the fresh set;
- ``SILENT``: the floor held, nothing repaired, and it breaks on the fresh set (no warning named it);
- ``warned``: the delivered model's verdict broke (a warning), or the output that breaks on the fresh
  set was said to be unjudged/advised on;
- ``repaired-and-holds`` / ``repaired-but-below``: repair kept nodes float or stepped them up, and
  the delivered model holds / breaks on the fresh set.

A SILENT (or repaired-but-below) row gets its cause's first split: the share of random subsets of
the fresh set, as large as the feeds the floor judged on (held-out and calibration feeds pooled), on which the verdict holds (``p_hold``). A
``p_hold`` well above 0 is the sample-size effect (a few held-out feeds; floormargin's lane); near 0
the small verdict and the large one disagree for another reason (a reading, a placement that breaks
on feeds unlike the held-out ones) and the row keeps a reproducer.

    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/fuzz_silent.py --modules 40 --seed 1 \\
        --json /work/cache/fuzzsilent/seed1.json
    python bench/fuzz_silent.py --markdown /work/cache/fuzzsilent/seed1.json ...
"""

from __future__ import annotations

import _common  # noqa: F401  (puts the repository root on sys.path)
import argparse
import collections
import copy
import json
import logging
import multiprocessing as mp
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

import export_fuzz as ef

CLASSES = ("held-true", "SILENT", "warned", "repaired-and-holds", "repaired-but-below")


# ----------------------------------------------------------------------------- trained-like weights

def _batch(spec: ef.ModuleSpec, n: int, seed: int) -> dict[str, Any]:
    """``n`` feeds of the spec's distribution at its fixed length, stacked into one float32 batch (torch)."""
    import torch

    fixed = copy.copy(spec)
    fixed.dynamic_seq, fixed.fp16 = False, False
    feeds = fixed.feeds(n, seed)
    return {k: torch.from_numpy(np.concatenate([f[k] for f in feeds])) for k in spec.inputs}


def _labels(spec: ef.ModuleSpec, feed: dict[str, Any], teacher: dict[str, Any]) -> Any:
    """The synthetic task's classes: per position (seq) the arg-max of a random teacher over the
    position, its neighbours and its token; per pixel (img) of a random 3×3 conv."""
    import torch
    import torch.nn.functional as F

    if spec.domain == "seq":
        x = feed["x"]
        ctx = F.avg_pool1d(x.transpose(1, 2), 3, 1, 1, count_include_pad=False).transpose(1, 2)
        logits = x @ teacher["w"] + ctx @ teacher["w2"]
        if "ids" in feed:
            logits = logits + teacher["emb"][feed["ids"]]
        return logits.argmax(-1)
    return F.conv2d(feed["x"], teacher["conv"], padding=1).argmax(1)


def train(net: Any, spec: ef.ModuleSpec, steps: int, seed: int) -> dict[str, float]:
    """A few Adam steps of ``net`` on the synthetic task (in place); its accuracy before and after."""
    import torch
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(seed)
    classes = 6 if spec.domain == "seq" else 4
    teacher = {"w": torch.randn(ef.D, classes, generator=g), "w2": torch.randn(ef.D, classes, generator=g),
               "emb": torch.randn(ef.VOCAB, classes, generator=g) * 2, "conv": torch.randn(classes, 3, 3, 3, generator=g)}
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)

    def step_loss(feed: dict[str, Any]) -> tuple[Any, float]:
        y = net(*(feed[k] for k in spec.inputs))[0]
        lab = _labels(spec, feed, teacher)
        if spec.domain == "seq":
            keep = torch.ones_like(lab, dtype=torch.bool)
            if "mask" in feed:
                keep = ~((feed["mask"] < 0.5) & (torch.arange(lab.shape[1]) > 0))
            loss = F.cross_entropy(y[keep], lab[keep])
            acc = (y[keep].argmax(-1) == lab[keep]).float().mean().item()
        else:
            loss = F.cross_entropy(y, lab)
            acc = (y.argmax(1) == lab).float().mean().item()
        return loss, acc

    net.train()
    with torch.no_grad():
        _, acc0 = step_loss(_batch(spec, 64, 10_000 + seed))
    for i in range(steps):
        loss, _ = step_loss(_batch(spec, 16, 20_000 + seed * 1000 + i))
        opt.zero_grad()
        loss.backward()
        opt.step()
    net.eval()
    with torch.no_grad():
        loss, acc1 = step_loss(_batch(spec, 64, 10_000 + seed))
    return {"acc_before": round(acc0, 3), "acc_after": round(acc1, 3), "loss_after": round(float(loss), 3)}


def _export_trained_child(spec: ef.ModuleSpec, src: Path, steps: int, queue) -> None:
    import warnings

    import torch

    torch.set_num_threads(1)
    try:
        net = ef._composite(spec)
        stats = train(net, spec, steps, spec.seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ef.export(spec, src, net=net)
        queue.put(("", stats))
    except Exception as exc:  # noqa: BLE001
        queue.put((f"{type(exc).__name__}: {ef._first(exc)}", {}))


def _forked(target, args: tuple, timeout: float, default: Any) -> Any:
    """``target(*args, queue)`` in a forked child; its answer, or ``default(exitcode)`` when it died or timed out."""
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=target, args=(*args, q))
    p.start()
    try:
        got = q.get(timeout=timeout)
    except Exception:  # noqa: BLE001 - no answer: the child died or ran past the limit
        got = None
    p.join(5)
    if p.is_alive():
        p.kill()
        p.join(5)
    return got if got is not None else default(p.exitcode)


# ----------------------------------------------------------------------------- one quantization, judged twice

def _typed(session: Any, feeds: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    """``feeds`` cast to the dtypes ``session``'s float inputs declare (a delivered fp16 model's own)."""
    want = {i.name: {"tensor(float16)": np.float16, "tensor(float)": np.float32}.get(i.type) for i in session.get_inputs()}
    return [{k: (v.astype(want[k]) if want.get(k) is not None and v.dtype.kind == "f" else v) for k, v in f.items()} for f in feeds]


def _quantize(src: Path, config: Any, calib: list[dict], out: Path | None) -> tuple[Any, Any]:
    """``onnxptq.quantize`` with the ``Calibrated`` it judged with (its prepared model and readings)."""
    import onnxptq
    import onnxptq.api as api

    captured: dict[str, Any] = {}
    calibrate_once = api.calibrate_once

    def spy(*args: Any, **kwargs: Any) -> Any:
        captured["c"] = calibrate_once(*args, **kwargs)
        return captured["c"]

    api.calibrate_once = spy
    try:
        res = onnxptq.quantize(str(src), config, data=list(calib), output=None if out is None else str(out))
    finally:
        api.calibrate_once = calibrate_once
    return res, captured["c"]


def _fresh_verdict(res: Any, cal: Any, fresh: list[dict], subsets: int) -> tuple[Any, dict[str, Any]]:
    """The floor's verdict on ``res``'s delivered model over ``fresh``, with the readings quantize used; where it
    breaks, ``p_hold``: the share of random subsets as large as the feeds quantize judged on that hold."""
    from onnxptq.analysis.decisions import DecisionReader
    from onnxptq.analysis.floor import floor_for, measure
    from onnxptq.graph.walk import compared_outputs
    from onnxptq.pipeline.calibrate import float_outputs_of
    from onnxptq.sessions import open_session, run_feeds

    readings = cal.readings
    names = compared_outputs(cal.prepared.graph)
    ref = float_outputs_of(cal.prepared, fresh, res.config)
    decisions = readings["decisions"]
    if decisions:
        ref = [dict(o, **e) for o, e in zip(ref, DecisionReader(cal.prepared, decisions)(fresh))]
    session = open_session(res.model, threads=1)
    typed = _typed(session, fresh)
    got = [dict(zip(names, o)) for o in run_feeds(session, names, typed)]
    got = [dict(g, **e) for g, e in zip(got, DecisionReader(res.model, decisions)(typed))]
    floor = floor_for(res.config)
    big = measure(ref, got, floor, **readings)
    info: dict[str, Any] = {"ok": big.ok, "samples": big.samples, "broken": big.broken, "unjudged": big.unjudged,
                            "text": big.describe(only_broken=not big.ok)[:600]}
    if not big.ok:
        rng = np.random.default_rng(0)
        size = min(len(fresh), max(1, res.floor.samples + _seen_feeds(res.floor)))
        holds = 0
        for _ in range(subsets):
            pick = rng.choice(len(fresh), size, replace=False)
            holds += measure([ref[i] for i in pick], [got[i] for i in pick], floor, **readings).ok
        info.update(p_hold=round(holds / max(1, subsets), 3), subset_size=size)
    return big, info


def judge_one(src: Path, preset: str, calib: list[dict], fresh: list[dict], out: Path, subsets: int) -> dict:
    """Quantize ``src`` with ``preset`` on ``calib`` (defaults); judge the delivered model again on
    ``fresh``. Where repair acted, the plain build (``repair=False``) is judged again too: whether the
    floor's verdict on it was a sample's luck is what the miss counts are checked against."""
    from onnxptq.config.presets import resolve_config
    from onnxptq.errors import DOCUMENTED_ERRORS

    row: dict[str, Any] = {"preset": preset}
    c0 = time.process_time()
    try:
        res, cal = _quantize(src, preset, calib, out)
    except DOCUMENTED_ERRORS as exc:
        row.update(status="documented error", error=f"{type(exc).__name__}: {ef._first(exc)}")
        return row
    except Exception as exc:  # noqa: BLE001
        row.update(status="raw exception", error=f"{type(exc).__name__}: {ef._first(exc)}", trace=traceback.format_exc()[-2500:])
        return row
    row["cpu_s"] = round(time.process_time() - c0, 2)
    small = res.floor
    if small is None:
        row.update(status="not judged", error="quantize gave no floor verdict")
        return row
    rep = res.repair if isinstance(res.repair, dict) else {}
    row["repaired"] = len(rep.get("kept_float", {})) + len(rep.get("stepped_up", {}))
    row["small"] = {"ok": small.ok, "samples": small.samples, "broken": small.broken, "unjudged": small.unjudged,
                    "advisories": len(small.advisories), "text": small.describe()[:600]}
    c1 = time.process_time()
    big, row["big"] = _fresh_verdict(res, cal, fresh, subsets)
    row["p_hold"] = row["big"].get("p_hold")
    row["figures"] = {n: {"small_cos": _r(small.outputs[n].cosine) if n in small.outputs else None, "big_cos": _r(c.cosine),
                          "big_top1": _r(getattr(c, "top1", None))} for n, c in big.outputs.items()}
    row["class"] = classify(small, big, row["repaired"])
    if rep:
        plain, plain_cal = _quantize(src, _no_repair(resolve_config(preset)), calib, None)
        _, info = _fresh_verdict(plain, plain_cal, fresh, subsets)
        row["plain"] = {"small_ok": plain.floor.ok, "small_text": plain.floor.describe()[:400], **info}
    else:
        row["plain"] = {"small_ok": small.ok, **row["big"]}
    row["judge_cpu_s"] = round(time.process_time() - c1, 2)
    row["status"] = "ok"
    return row


def _no_repair(cfg: Any) -> Any:
    """``cfg`` with the floor's repair off (the plain build, judged and warned on only)."""
    import dataclasses

    return dataclasses.replace(cfg, repair=False)


def _seen_feeds(verdict: Any) -> int:
    """The calibration feeds a verdict pooled with its held-out ones (reads, rows too few, kept candidates,
    scores, regions): a held-out-sized subset of the fresh set is this many feeds larger."""
    counts = [0]
    for c in verdict.outputs.values():
        counts += [c.seen_feeds, c.kept_seen, c.scores[4] if c.scores is not None else 0, c.regions[2] if c.regions is not None else 0]
    return max(counts)


def _r(x: Any) -> Any:
    return None if x is None or not isinstance(x, (int, float)) else round(float(x), 5)


def classify(small: Any, big: Any, repaired: int) -> str:
    """One of :data:`CLASSES`: what the user was told (``small``, quantize's verdict; ``repaired``:
    nodes repair kept float or stepped up) against what is true on the fresh set (``big``)."""
    if not small.ok:
        return "warned"
    # "could not judge" / "could NOT confirm" (floor.py's Wilson bound) are said, never a bare "holds"
    told = set(small.unjudged) | set(getattr(small, "unconfirmed", ())) | {a.split(":")[0] for a in small.advisories}
    if not big.ok and set(big.broken) <= told:
        return "warned"
    if repaired:
        return "repaired-and-holds" if big.ok else "repaired-but-below"
    return "held-true" if big.ok else "SILENT"


def _judge_child(args: tuple, queue) -> None:
    logging.disable(logging.WARNING)
    try:
        queue.put(judge_one(*args))
    except BaseException as exc:  # noqa: BLE001
        queue.put({"preset": args[1], "status": "raw exception", "error": f"{type(exc).__name__}: {ef._first(exc)}",
                   "trace": traceback.format_exc()[-2500:]})


# ----------------------------------------------------------------------------- campaign

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markdown", nargs="+", help="print the tables of these campaign files and exit")
    ap.add_argument("--modules", type=int, default=30)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--presets", default=",".join(ef.PRESETS))
    ap.add_argument("--blocks", help="comma-separated block names: draw only these (export_fuzz.draw)")
    ap.add_argument("--outputs", help="comma-separated extra output kinds: draw 1-2 of these only (export_fuzz.OUTPUT_KINDS)")
    ap.add_argument("--calib", type=int, default=32, help="calibration feeds, as a user gives (the floor holds 8 out)")
    ap.add_argument("--fresh", type=int, default=256, help="fresh feeds of the same distribution the result is judged on again")
    ap.add_argument("--steps", type=int, default=150, help="Adam steps on the synthetic task (0: random weights)")
    ap.add_argument("--subsets", type=int, default=40, help="held-out-sized subsets drawn for a miss's p_hold")
    ap.add_argument("--timeout", type=float, default=240)
    ap.add_argument("--out-dir", default="/work/cache/fuzzsilent")
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.markdown:
        print(markdown(a.markdown))
        return 0
    logging.disable(logging.WARNING)
    # Imported once here, inherited by every forked child: each child importing them cost more CPU than
    # a small module's quantization.
    import onnxptq  # noqa: F401
    import onnxptq.analysis.floor  # noqa: F401
    import onnxptq.pipeline.complete  # noqa: F401
    import torch

    torch.set_num_threads(1)
    out_dir = Path(a.out_dir)
    mdir = out_dir / f"models.seed{a.seed}"
    rows: list[dict] = json.loads(Path(a.json).read_text())["rows"] if Path(a.json).exists() else []
    done = {(r["module"], r["preset"]) for r in rows}
    t0 = time.time()
    for index in range(a.start, a.start + a.modules):
        spec = ef.draw(index, a.seed, frozenset(a.blocks.split(",")) if a.blocks else None,
                       frozenset(a.outputs.split(",")) if a.outputs else None)
        base = {"module": spec.name, "exporter": spec.exporter, "opset": spec.opset, "fp16": spec.fp16, "blocks": spec.blocks,
                "inputs": spec.inputs, "outputs": spec.outputs, "dynamic_seq": spec.dynamic_seq}
        if all((spec.name, p) in done for p in a.presets.split(",")):
            continue
        src = mdir / f"m{index:03d}.onnx"
        failed, stats = _forked(_export_trained_child, (spec, src, a.steps), a.timeout,
                                lambda code: (f"exporter crashed (exit code {code})", {}))
        base["train"] = stats
        if failed:
            rows.append({**base, "preset": "*", "status": "export failed", "error": failed})
            print(json.dumps(rows[-1]), flush=True)
            continue
        import onnx

        x_dims = onnx.load(str(src), load_external_data=False).graph.input[0].type.tensor_type.shape.dim
        if spec.dynamic_seq and len(x_dims) > 1 and x_dims[1].HasField("dim_value"):
            spec.dynamic_seq = base["dynamic_seq"] = False  # the exporter specialised the sequence axis
            spec.extra["t"] = x_dims[1].dim_value  # to the export sample's length (export_fuzz.export), not T
        calib, fresh = spec.feeds(a.calib, 1), spec.feeds(a.fresh, 50_000)
        broken = ef._float_runs_forked(src, calib[:2], a.timeout)
        if broken:
            rows.append({**base, "preset": "*", "status": "float does not run", "error": broken})
            print(json.dumps(rows[-1]), flush=True)
            continue
        for preset in a.presets.split(","):
            if (spec.name, preset) in done:
                continue
            out = mdir / "q" / f"m{index:03d}.{preset}.onnx"
            out.parent.mkdir(parents=True, exist_ok=True)
            row = _forked(_judge_child, ((src, preset, calib, fresh, out, a.subsets),), a.timeout,
                          lambda code: {"preset": preset, "status": "timeout" if code in (None, 0) else "crashed",
                                        "error": f"exit code {code}"})
            row = {**base, **row, "src": str(src)}
            rows.append(row)
            print(json.dumps({k: row.get(k) for k in ("module", "preset", "status", "class", "repaired", "p_hold", "cpu_s",
                                                        "judge_cpu_s", "error")}), flush=True)
            Path(a.json).write_text(json.dumps({"seed": a.seed, "rows": rows}, indent=1))
    Path(a.json).write_text(json.dumps({"seed": a.seed, "rows": rows, "seconds": round(time.time() - t0)}, indent=1))
    print(markdown([a.json]))
    return 0


def markdown(paths: list[str]) -> str:
    """Per campaign file: the classes' counts; the misses (SILENT, repaired-but-below) split by ``p_hold``;
    the sampling check (plain builds that break on the fresh set: how many the floor said held, against
    the sum of their ``p_hold``, the count luck alone would give); then every miss."""
    lines = ["| campaign | modules | quantizations | " + " | ".join(CLASSES) + " | misses: p_hold ≥ 0.1 / < 0.1 "
             "| plain builds below on the fresh set: said held / expected by sampling (Σ p_hold) "
             "| repaired where the plain build holds on the fresh set | errors "
             "| export failed / float does not run | train acc (median) |", "|" + " --- |" * (len(CLASSES) + 9)]
    misses: list[dict] = []
    for path in paths:
        rows = json.loads(Path(path).read_text())["rows"]
        ok = [r for r in rows if r["status"] == "ok"]
        n = collections.Counter(r["class"] for r in ok)
        miss = [r for r in ok if r["class"] in ("SILENT", "repaired-but-below")]
        misses += [dict(r, campaign=Path(path).name) for r in miss]
        size = sum((r.get("p_hold") or 0) >= 0.1 for r in miss)
        plain = [r["plain"] for r in ok if "plain" in r and not r["plain"]["ok"]]
        said = sum(p["small_ok"] for p in plain)
        # over-repair: repair acted (the plain build's small verdict broke) where the plain build holds on the fresh set
        over = sum(1 for r in ok if r.get("repaired") and "plain" in r and r["plain"].get("ok"))
        expected = sum(p.get("p_hold", 0) for p in plain)
        errors = sum(r["status"] not in ("ok", "export failed", "float does not run") for r in rows)
        exp = sum(r["status"] == "export failed" for r in rows), sum(r["status"] == "float does not run" for r in rows)
        accs = [r["train"]["acc_after"] for r in rows if r.get("train")]
        lines.append(f"| {Path(path).name} | {len({r['module'] for r in rows})} | {sum(r['preset'] != '*' for r in rows)} | "
                     + " | ".join(str(n[c]) for c in CLASSES)
                     + f" | {size} / {len(miss) - size} | {len(plain)}: {said} / {expected:.1f} | {over} | {errors} | {exp[0]} / {exp[1]} "
                     f"| {np.median(accs) if accs else float('nan'):.2f} |")
    lines += ["", "| campaign | module | preset | class | p_hold (subset) | broken on the fresh set |", "| --- | --- | --- | --- | --- | --- |"]
    for r in sorted(misses, key=lambda r: (r.get("p_hold") or 0, r["module"])):
        lines.append(f"| {r['campaign']} | {r['module'][:90]} | {r['preset']} | {r['class']} | {r.get('p_hold')} ({r['big'].get('subset_size')}) "
                     f"| {r['big']['text'][:160].replace('|', '/')} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
