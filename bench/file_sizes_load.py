"""Load cost of two sets of delivered files (two trees' ``file_sizes.py --keep`` runs): per (model,
preset) the peak resident memory a fresh process adds while onnxruntime creates the session, the
creation's CPU seconds (one thread), and whether every packed stream was folded away (issue 26 item 2, branch blockfile11).

Why: a smaller file must not cost more at load: each decode step onnxruntime folds keeps a copy of
its output until the optimisation ends (onnx_ops/packed.py), so a new decode form (exponents by
frequency and escape: Equal, CumSum, Where; the small weights' float16 stream) is checked for the
memory and time of loading, not only for its bytes. Each file loads in its own subprocess (peaks
do not mix; the folding check is ``bench/packed_load.py --one``'s), old and new alternating, the
order flipped every round; medians of ``--rounds``.

    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/file_sizes_load.py --rows after.json \\
        --old before_files/ --new after_files/ [--models shipped:cls,...] [--presets BFP16,...] --rounds 5
    # one set of files against issue 26 item 4 (peak <= 2.5x the fp32 weights; the empty session's peak beside)
    PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 nice -n 5 python bench/file_sizes_load.py --rows after.json --new after_files/ --ram
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

_LOADER = str(Path(__file__).with_name("packed_load.py"))


def _one(path: str, fold: bool = True) -> dict:
    """In this (fresh) process: one session as users open it (default optimisation, one thread):
    the CPU seconds of its creation and the peak RSS it added; then the folding check of
    ``packed_load.py`` (ORT_ENABLE_BASIC, the optimised graph saved: streams left, nodes)."""
    import resource
    import time

    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    so.log_severity_level = 3
    if not fold:  # the peak of the creation alone: the high-water mark reset after the imports' own peak
        before_mb = _status_mb("VmRSS")
        Path("/proc/self/clear_refs").write_text("5")
        c0 = time.process_time()
        ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        return {"load_cpu_s": time.process_time() - c0, "load_peak_rss_MB": _status_mb("VmHWM"), "rss_before_MB": before_mb}
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    c0 = time.process_time()
    ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    cpu = time.process_time() - c0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = subprocess.run([sys.executable, _LOADER, "--one", path], capture_output=True, text=True, check=True)
    fold = json.loads(out.stdout.strip().splitlines()[-1])
    return {"load_cpu_s": cpu, "load_peak_rss_MB": peak / 1024, "rss_before_MB": before / 1024,
            "packed_inits_left": fold["packed_inits_left"], "nodes_optimized": fold["nodes_optimized"]}


def _status_mb(key: str) -> float:
    """``/proc/self/status``'s ``key`` (VmRSS, VmHWM) in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    raise KeyError(key)


def _load(path: Path, fold: bool = True) -> dict:
    out = subprocess.run([sys.executable, __file__, "--one" if fold else "--peak", str(path)], capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def compare(old: Path, new: Path, rounds: int) -> dict:
    """Median peak RSS growth (MB over the process before the session) and creation wall seconds of
    each file, and the packed streams left unfolded in either (0: all folded)."""
    got: dict[str, list[dict]] = {"old": [], "new": []}
    for r in range(rounds):
        for key, path in ((("old", old), ("new", new)) if r % 2 == 0 else (("new", new), ("old", old))):
            got[key].append(_load(path))
    row: dict = {}
    for key, runs in got.items():
        row[f"{key}_rss_MB"] = round(float(np.median([x["load_peak_rss_MB"] - x["rss_before_MB"] for x in runs])), 2)
        row[f"{key}_load_cpu_s"] = round(float(np.median([x["load_cpu_s"] for x in runs])), 4)
        row[f"{key}_unfolded"] = max(x["packed_inits_left"] for x in runs)
        row[f"{key}_nodes_optimized"] = runs[0]["nodes_optimized"]
    return row


def _peak(path: Path, rounds: int) -> float:
    """Median peak RSS (MB) a fresh process adds creating ``path``'s session (one thread)."""
    return float(np.median([(x["load_peak_rss_MB"] - x["rss_before_MB"]) for x in (_load(path, fold=False) for _ in range(rounds))]))


def fp32_weight_bytes(spec: str) -> int:
    """Bytes of the float initializers and ``Constant`` values of model ``spec``'s fp32 source
    (external data included; PaddleOCR's exports hold their weights as Constants): what issue 26
    item 4's "2.5x the fp32 weights" measures against."""
    import onnx
    from onnx import numpy_helper

    import file_sizes

    path, _ = file_sizes.model_source(spec)
    m = onnx.load(path)
    floats = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE)
    tensors = list(m.graph.initializer) + [a.t for n in m.graph.node if n.op_type == "Constant"
                                           for a in n.attribute if a.name == "value"]
    return sum(numpy_helper.to_array(t).nbytes for t in tensors if t.data_type in floats)


def empty_model(path: Path) -> Path:
    """A one-Identity model: its session's peak is onnxruntime's own cost of a session (arenas,
    kernel registry, the thread pool), the baseline every file pays whatever its weights."""
    import onnx
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "empty",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(path))
    return path


def ram(rows: list[dict], files: Path, rounds: int, models: set[str], presets: set[str]) -> list[dict]:
    """Issue 26 item 4's load check, per delivered file: the peak RSS its session creation adds
    (median of ``rounds`` fresh processes), over the fp32 weights' bytes, and over them after the
    empty session's peak (the runtime's baseline) is taken off; the fp32 source's own load beside."""
    import tempfile

    import file_sizes

    base = _peak(empty_model(Path(tempfile.mkdtemp(prefix="load_ram_")) / "empty.onnx"), rounds)
    out: list[dict] = []
    weights: dict[str, float] = {}
    fp32_peak: dict[str, float] = {}
    for r in rows:
        if "ratio" not in r or (models and r["model"] not in models) or (presets and r["preset"] not in presets):
            continue
        spec = r["model"]
        if spec not in weights:
            weights[spec] = fp32_weight_bytes(spec) / 2**20
            fp32_peak[spec] = _peak(Path(file_sizes.model_source(spec)[0]), rounds)
        peak = _peak(files / f"{spec.replace(':', '_')}.{r['preset']}.onnx", rounds)
        row = {"model": spec, "preset": r["preset"], "weights_MB": round(weights[spec], 3), "peak_MB": round(peak, 2),
               "x_weights": round(peak / weights[spec], 2), "baseline_MB": round(base, 2),
               "over_baseline_x_weights": round((peak - base) / weights[spec], 2),
               "fp32_peak_MB": round(fp32_peak[spec], 2), "fp32_x_weights": round(fp32_peak[spec] / weights[spec], 2)}
        print(json.dumps(row), flush=True)
        out.append(row)
    return out


def main(argv: list[str] | None = None) -> int:
    if argv is None and len(sys.argv) == 3 and sys.argv[1] in ("--one", "--peak"):
        print(json.dumps(_one(sys.argv[2], fold=sys.argv[1] == "--one")))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", required=True, help="file_sizes.py JSON (the models and presets to compare)")
    ap.add_argument("--old", help="the first tree's files (with --new: the comparison)")
    ap.add_argument("--new", help="the second tree's files; alone with --ram: the files measured")
    ap.add_argument("--ram", action="store_true",
                    help="one set of files (--new): peak over the fp32 weights and over the empty session's baseline")
    ap.add_argument("--models", default="", help="only these (comma-separated); default all")
    ap.add_argument("--presets", default="")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    rows = json.loads(Path(args.rows).read_text())
    models = set(filter(None, args.models.split(",")))
    presets = set(filter(None, args.presets.split(",")))
    if args.ram:
        if not args.new:
            ap.error("--ram needs --new (the delivered files' directory)")
        ram(rows, Path(args.new), args.rounds, models, presets)
        return 0
    if not (args.old and args.new):
        ap.error("--old and --new (or --ram with --new)")
    for r in rows:
        if "ratio" not in r or (models and r["model"] not in models) or (presets and r["preset"] not in presets):
            continue
        name = f"{r['model'].replace(':', '_')}.{r['preset']}.onnx"
        out = compare(Path(args.old) / name, Path(args.new) / name, args.rounds)
        print(json.dumps({"model": r["model"], "preset": r["preset"], **out}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
