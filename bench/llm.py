"""LLM weight-only quantization, side by side: ours, onnxruntime's MatMulNBitsQuantizer, NNCF (issue 29).

On the SmolLM2-135M-Instruct export of ``bench/llm_export.py`` (``/work/cache/smollm2``) and one
fixed text, every configuration gets:

- **perplexity** (``onnxptq.analysis.perplexity``; windows of 512, no overlap, ``--windows`` of
  them) under onnxruntime's default session (accuracy level 4: fused weight-only MatMuls take int8
  activations) and, with ``--levels 4,1``, level 1 (float32 compute, the weights' own effect).
  Level is set with the session option ``session.qdq_matmulnbits_accuracy_level`` (DequantizeLinear
  + MatMul outputs, fused by onnxruntime) and, for outputs that already hold ``MatMulNBits`` nodes,
  by writing the node's ``accuracy_level`` attribute (the session option does not reach them);
- **file size**: the .onnx plus its external data files, and its ratio to fp32;
- **quantize wall time**: the tool's call in a fresh subprocess, from loading the model to the
  saved output (one run; the machine is shared, so read it to the nearest 10 %);
- **decode latency**: 1 intra-op thread, batch 1, the median of a single-token step, all models
  timed in interleaved rounds so machine noise falls on all alike. ``seq1``: a one-token forward
  of the plain model (no cache; every weight MatMul runs at M=1 as in decoding). ``kv``: a true
  decode step of the KV variant (past of ``--past`` tokens) for the formats quantized that way.

Baselines: onnxruntime 1.32 ``matmul_nbits_quantizer`` RTN (``DefaultWeightOnlyQuantConfig``),
k-quant, HQQ, GPTQ (its bundled neural-compressor code; capped by ``--cap-min``); NNCF
``compress_weights`` run with ``/work/cache/nncfvenv`` (``--nncf-python``). Ours:
``onnxptq.quantize_weights`` when the checkout has it.

Usage (the numbers in bench/RESULTS.md "LLM weight-only" come from these)::

    PYTHONPATH=src python bench/llm.py --suite baselines
    PYTHONPATH=src python bench/llm.py --suite ours
    PYTHONPATH=src python bench/llm.py --report          # table from bench/RESULTS_llm.json

Outputs go to ``/work/cache/llm_bench/<name>/``; results merge into ``bench/RESULTS_llm.json``
(keyed by configuration name, so a rerun of one suite replaces only its rows).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MODEL_DIR = Path("/work/cache/smollm2")
WORK = Path("/work/cache/llm_bench")
RESULTS = ROOT / "bench" / "RESULTS_llm.json"
EVAL_TEXT = Path("/usr/share/common-licenses/GPL-3")
CALIB_TEXTS = (Path("/usr/share/common-licenses/Apache-2.0"), Path("/usr/share/common-licenses/MPL-2.0"))
NNCF_PYTHON = Path("/work/cache/nncfvenv/bin/python")


# --- configurations -------------------------------------------------------------------------------

def configs(suite: str) -> list[dict]:
    """Each configuration: a unique name, the tool, its settings, and whether to make a KV variant."""
    out: list[dict] = []
    if suite in ("baselines", "ort"):
        rtn = [(4, True, 128), (4, True, 64), (4, False, 128), (4, False, 64), (4, False, 32), (4, True, 32),
               (8, True, 128), (8, False, 128)]
        for bits, sym, block in rtn:
            out.append({"name": f"ort_rtn_w{bits}_{'sym' if sym else 'asym'}_b{block}", "tool": "ort",
                        "method": "rtn", "bits": bits, "block": block, "sym": sym,
                        "kv": bits == 4 and sym and block == 128})
        out.append({"name": "ort_hqq_w4_b128", "tool": "ort", "method": "hqq", "bits": 4, "block": 128, "sym": False})
        out.append({"name": "ort_kquant_w4_b128", "tool": "ort", "method": "kquant", "bits": 4, "block": 128,
                    "sym": False})
        out.append({"name": "ort_gptq_w4_sym_b128", "tool": "ort", "method": "gptq", "bits": 4, "block": 128,
                    "sym": True})
        out.append({"name": "ort_kquant_w4_b64", "tool": "ort", "method": "kquant", "bits": 4, "block": 64,
                    "sym": False})
        out.append({"name": "ort_hqq_w4_b64", "tool": "ort", "method": "hqq", "bits": 4, "block": 64, "sym": False})
    if suite in ("baselines", "nncf"):
        for mode in ("INT4_SYM", "INT4_ASYM"):
            for group in (64, 128):
                out.append({"name": f"nncf_{mode.lower()}_g{group}", "tool": "nncf", "mode": mode, "group": group,
                            "bits": 4, "block": group, "sym": mode == "INT4_SYM"})
        out.append({"name": "nncf_int4_sym_g64_awq_se", "tool": "nncf", "mode": "INT4_SYM", "group": 64,
                    "awq": True, "scale_estimation": True, "bits": 4, "block": 64, "sym": True})
        # NNCF 3.4 fails on the tied lm_head (MatMul on Transpose(embedding): "There is no tensor with
        # the name val_5455"); excluding that one node, as onnxruntime leaves it float anyway, lets it run.
        lm_head = ["node_linear_210"]
        for mode, group, extra in (("INT4_SYM", 64, {}), ("INT4_ASYM", 64, {}), ("INT4_SYM", 128, {}),
                                   ("INT4_SYM", 64, {"awq": True, "scale_estimation": True}),
                                   ("INT4_SYM", 64, {"awq": True}), ("INT4_SYM", 64, {"scale_estimation": True})):
            tag = "".join(f"_{k.replace('scale_estimation', 'se')}" for k in extra)
            out.append({"name": f"nncf_{mode.lower()}_g{group}{tag}_float_lm_head", "tool": "nncf", "mode": mode,
                        "group": group, "bits": 4, "block": group, "sym": mode == "INT4_SYM", "ignore": lm_head,
                        **extra})
    if suite == "ours":
        # lm_head float, as onnxruntime and NNCF leave it here: the methods compared on the same layers
        order = [("rtn", 4, 128), ("gptq", 4, 128), ("awq", 4, 128), ("hqq", 4, 128), ("rtn", 8, 128),
                 ("gptq", 4, 64), ("rtn", 4, 64), ("awq", 4, 64), ("hqq", 4, 64), ("gptq", 3, 128), ("rtn", 3, 128),
                 ("awq", 3, 128), ("gptq", 8, 128)]
        for method, bits, block in order:
            out.append({"name": f"ours_{method}_w{bits}_sym_b{block}", "tool": "ours", "method": method,
                        "bits": bits, "block": block, "sym": True, "lm_head": "float",
                        "kv": method == "rtn" and bits == 4 and block == 128})
        for method in ("rtn", "hqq"):  # onnxruntime's HQQ is asymmetric: ours beside it at the same setting
            out.append({"name": f"ours_{method}_w4_asym_b128", "tool": "ours", "method": method, "bits": 4,
                        "block": 128, "sym": False, "lm_head": "float"})
        out.append({"name": "ours_rtn_w4_sym_b128_lmhead_int8", "tool": "ours", "method": "rtn", "bits": 4,
                    "block": 128, "sym": True, "lm_head": "int8"})
        out.append({"name": "ours_rtn_w4_sym_b128_nbits", "tool": "ours", "method": "rtn", "bits": 4,
                    "block": 128, "sym": True, "lm_head": "float", "form": "matmulnbits"})
    return out


# --- text and calibration --------------------------------------------------------------------------

def tokens(paths) -> np.ndarray:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(MODEL_DIR / "tokenizer.json"))
    text = "\n\n".join(Path(p).read_text(encoding="utf-8") for p in paths)
    return np.asarray(tok.encode(text, add_special_tokens=False).ids, dtype=np.int64)


def calibration_feeds(samples: int, length: int) -> list[dict[str, np.ndarray]]:
    """``samples`` windows of ``length`` tokens from texts that are NOT the evaluation text."""
    ids = tokens(CALIB_TEXTS)
    step = max(length, (len(ids) - length) // max(samples - 1, 1))
    return [{"input_ids": ids[i:i + length][None]} for i in range(0, len(ids) - length + 1, step)][:samples]


# --- quantizing, one configuration per subprocess --------------------------------------------------

def model_size(path: Path) -> int:
    """The .onnx file plus every external data file it names."""
    import onnx
    from onnx.external_data_helper import ExternalDataInfo

    model = onnx.load(str(path), load_external_data=False)
    files = {path}
    for init in model.graph.initializer:
        if init.data_location == onnx.TensorProto.EXTERNAL:
            files.add(path.parent / ExternalDataInfo(init).location)
    return sum(f.stat().st_size for f in files)


def quantize_ort(cfg: dict, src: Path, dst: Path, calib: list) -> None:
    import onnx
    from onnxruntime.quantization import matmul_nbits_quantizer as mnq

    model = onnx.load(str(src))
    method = cfg["method"]
    if method == "rtn":
        algo = mnq.DefaultWeightOnlyQuantConfig(block_size=cfg["block"], is_symmetric=cfg["sym"], bits=cfg["bits"])
    elif method == "kquant":
        algo = mnq.KQuantWeightOnlyQuantConfig()
    elif method == "hqq":
        algo = mnq.HQQWeightOnlyQuantConfig(block_size=cfg["block"], bits=cfg["bits"])
    elif method == "gptq":
        from onnxruntime.quantization import CalibrationDataReader

        class Reader(CalibrationDataReader):
            def __init__(self):
                self.it = iter(calib)

            def get_next(self):
                return next(self.it, None)

            def rewind(self):
                self.it = iter(calib)

        algo = mnq.GPTQWeightOnlyQuantConfig(calibration_data_reader=Reader(), block_size=cfg["block"])
    else:
        raise ValueError(method)
    quant = mnq.MatMulNBitsQuantizer(model, bits=cfg["bits"], block_size=cfg["block"], is_symmetric=cfg["sym"],
                                     algo_config=algo)
    quant.process()
    out = quant.model.model if hasattr(quant.model, "model") else quant.model  # ONNXModel or ModelProto
    onnx.save(out, str(dst), save_as_external_data=True, all_tensors_to_one_file=True,
              location=dst.name + ".data", size_threshold=1024)


def quantize_ours(cfg: dict, src: Path, dst: Path, calib: list) -> None:
    import onnxptq

    kwargs = {"bits": cfg["bits"], "block_size": cfg["block"], "symmetric": cfg["sym"], "method": cfg["method"]}
    for key in ("form", "lm_head"):
        if cfg.get(key):
            kwargs[key] = cfg[key]
    if cfg["method"] in ("gptq", "awq"):
        kwargs["data"] = calib
    onnxptq.quantize_weights(str(src), output=str(dst), external_data=True, progress=False, **kwargs)


def quantize_one(cfg: dict, src: Path, dst: Path, calib_samples: int, calib_len: int) -> dict:
    """Runs in the subprocess; returns the timing (load to saved output)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    calib = calibration_feeds(calib_samples, calib_len) if cfg.get("method") in ("gptq", "awq") else []
    start = time.perf_counter()
    if cfg["tool"] == "ort":
        quantize_ort(cfg, src, dst, calib)
    elif cfg["tool"] == "ours":
        quantize_ours(cfg, src, dst, calib)
    else:
        raise ValueError(cfg["tool"])
    return {"quantize_s": round(time.perf_counter() - start, 2)}


NNCF_SCRIPT = r'''
import json, sys, time
from pathlib import Path
import numpy as np
import onnx, nncf
from tokenizers import Tokenizer
cfg, src, dst, samples, length, calib_paths, tok_path = json.loads(sys.argv[1])
kwargs = {"mode": getattr(nncf.CompressWeightsMode, cfg["mode"]), "group_size": cfg["group"], "ratio": 1.0}
if cfg.get("awq") or cfg.get("scale_estimation"):
    tok = Tokenizer.from_file(tok_path)
    ids = np.asarray(tok.encode("\n\n".join(Path(p).read_text() for p in calib_paths),
                                add_special_tokens=False).ids, dtype=np.int64)
    step = max(length, (len(ids) - length) // max(samples - 1, 1))
    feeds = [{"input_ids": ids[i:i + length][None]} for i in range(0, len(ids) - length + 1, step)][:samples]
    kwargs.update(dataset=nncf.Dataset(feeds), awq=bool(cfg.get("awq")),
                  scale_estimation=bool(cfg.get("scale_estimation")), subset_size=len(feeds))
if cfg.get("ignore"):
    kwargs["ignored_scope"] = nncf.IgnoredScope(names=cfg["ignore"])
start = time.perf_counter()
model = onnx.load(src)
out = nncf.compress_weights(model, **kwargs)
Path(dst).parent.mkdir(parents=True, exist_ok=True)
onnx.save(out, dst, save_as_external_data=True, all_tensors_to_one_file=True,
          location=Path(dst).name + ".data", size_threshold=1024)
print("RESULT " + json.dumps({"quantize_s": round(time.perf_counter() - start, 2), "nncf": nncf.__version__}))
'''


def run_quantize(cfg: dict, args, src: Path, dst: Path) -> dict:
    """One configuration in a subprocess with a time cap; failures are recorded, not raised."""
    timeout = args.cap_min * 60
    if cfg["tool"] == "nncf":
        payload = json.dumps([cfg, str(src), str(dst), args.calib_samples, args.calib_len,
                              [str(p) for p in CALIB_TEXTS], str(MODEL_DIR / "tokenizer.json")])
        cmd = [str(args.nncf_python), "-c", NNCF_SCRIPT, payload]
    else:
        cmd = [sys.executable, __file__, "--quantize-one", json.dumps(cfg), "--src", str(src), "--dst", str(dst),
               "--calib-samples", str(args.calib_samples), "--calib-len", str(args.calib_len)]
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "2"))
    import resource

    def cpu() -> float:  # CPU seconds of waited-for children: the machine is shared, wall time alone misleads
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        return r.ru_utime + r.ru_stime

    start, cpu0 = time.perf_counter(), cpu()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"did not finish in {args.cap_min} min wall (killed; it had used "
                         f"{cpu() - cpu0:.0f} CPU s on the shared machine)"}
    wall = time.perf_counter() - start
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:]) | {"subprocess_s": round(wall, 1), "cpu_s": round(cpu() - cpu0, 1)}
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    return {"error": f"exit {proc.returncode}: " + " | ".join(tail)[-600:]}


# --- evaluation ------------------------------------------------------------------------------------

def with_level(path: Path, level: int, tmp: Path) -> Path:
    """``path`` itself when it has no MatMulNBits; else a copy of its graph (same data files) with
    every MatMulNBits node's accuracy_level set to ``level``, written next to it."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    nodes = [n for n in model.graph.node if n.op_type == "MatMulNBits"]
    if not nodes:
        return path
    for node in nodes:
        for a in list(node.attribute):
            if a.name == "accuracy_level":
                node.attribute.remove(a)
        node.attribute.append(onnx.helper.make_attribute("accuracy_level", level))
    out = path.parent / f"{path.stem}.level{level}.onnx"
    onnx.save(model, str(out))
    return out


def session(path: Path, level: int | None, threads: int):
    from onnxptq.sessions import open_session

    config = {} if level is None else {"session.qdq_matmulnbits_accuracy_level": str(level)}
    model = with_level(path, level, path.parent) if level is not None else path
    return open_session(model, threads=threads, config=config)


def perplexity(path: Path, level: int | None, ids: np.ndarray, windows: int, threads: int) -> dict:
    from onnxptq.analysis.perplexity import evaluate_perplexity

    start = time.perf_counter()
    res = evaluate_perplexity(session(path, level, threads), ids, window=512, stride=512, max_windows=windows)
    return res.as_dict() | {"eval_s": round(time.perf_counter() - start, 1)}


def kv_feed(sess, past: int) -> dict:
    feed = {}
    for inp in sess.get_inputs():
        if inp.name == "input_ids":
            feed[inp.name] = np.array([[42]], np.int64)
        elif inp.name == "attention_mask":
            feed[inp.name] = np.ones((1, past + 1), np.int64)
        elif inp.name.startswith("past_key_values"):
            shape = [1, inp.shape[1], past, inp.shape[3]]
            feed[inp.name] = np.random.default_rng(0).normal(size=shape).astype(np.float32) * 0.1
    return feed


def latency(entries: list[tuple[str, Path, int | None, bool]], rounds: int, steps: int, past: int) -> dict:
    """Median ms per single-token step, 1 thread; models timed in interleaved rounds."""
    sessions = []
    for key, path, level, kv in entries:
        s = session(path, level, threads=1)
        feed = kv_feed(s, past) if kv else {"input_ids": np.array([[42]], np.int64)}
        out = [s.get_outputs()[0].name]
        for _ in range(3):
            s.run(out, feed)
        sessions.append((key, s, feed, out))
    times: dict[str, list[float]] = {k: [] for k, *_ in sessions}
    for _ in range(rounds):
        for key, s, feed, out in sessions:
            for _ in range(steps):
                t = time.perf_counter()
                s.run(out, feed)
                times[key].append((time.perf_counter() - t) * 1e3)
    return {k: round(float(np.median(v)), 3) for k, v in times.items()}


# --- report --------------------------------------------------------------------------------------

def report(res: dict) -> str:
    """The markdown table of bench/RESULTS.md from the JSON."""
    fp32 = res["runs"]["fp32"]["ppl"]["fp32"]["perplexity"]
    lat = res.get("latency_ms", {})

    def ms(key):
        v = lat.get(key)
        if v is None:
            return ""
        return f"{np.median(v) if isinstance(v, list) else v:.1f}"

    fp_seq, fp_kv = ms("fp32/seq1"), ms("fp32/kv")
    lines = ["| configuration | ppl (level 4) | Δ ppl | ppl (level 1) | size MB | × fp32 | quantize s (CPU s) | "
             "seq1 ms L4 | seq1 ms L1 | kv ms L4 |",
             "|---|---|---|---|---|---|---|---|---|---|",
             f"| fp32 | {fp32:.2f} | | | {res['runs']['fp32']['bytes'] / 1e6:.0f} | 1 | | {fp_seq} | | {fp_kv} |"]
    for name, row in sorted(res["runs"].items(), key=lambda kv: (kv[1].get("tool", ""), kv[0])):
        if name == "fp32":
            continue
        if "error" in row:
            lines.append(f"| {name} | failed: {row['error'][-160:].replace('|', '/')} | | | | | | | | |")
            continue
        ppl = row.get("ppl", {})

        def p(level):
            v = ppl.get(f"level{level}", {})
            return f"{v['perplexity']:.2f}" if "perplexity" in v else v.get("error", "")[:60]

        d = ppl.get("level4", {}).get("perplexity")
        delta = f"+{d - fp32:.2f}" if d is not None else ""
        lines.append(f"| {name} | {p(4)} | {delta} | {p(1)} | {row['bytes'] / 1e6:.0f} | {row['ratio']:.3f} | "
                     f"{row.get('quantize_s', '')}{' (' + str(row['cpu_s']) + ')' if 'cpu_s' in row else ''} | {ms(name + '/seq1/level4')} | {ms(name + '/seq1/level1')} | "
                     f"{ms(name + '/kv/level4')} |")
    return "\n".join(lines)


# --- driver ----------------------------------------------------------------------------------------

def load_results() -> dict:
    return json.loads(RESULTS.read_text()) if RESULTS.exists() else {"runs": {}, "meta": {}}


def save_results(res: dict, row: str | None = None) -> None:
    """Merge into the file as it is now (two suites may run at once): ``row`` only, or all but rows."""
    import fcntl

    WORK.mkdir(parents=True, exist_ok=True)
    with open(WORK / "results.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        now = load_results()
        now["meta"].update(res["meta"])
        if row is not None:
            now["runs"][row] = res["runs"][row]
        for key in res:
            if key not in ("runs", "meta") and row is None:
                now[key] = res[key]
        tmp = RESULTS.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(now, indent=1, sort_keys=True))
        tmp.replace(RESULTS)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", choices=("baselines", "ort", "nncf", "ours", "fp32"), default=None)
    ap.add_argument("--only", default=None, help="comma-separated configuration names (of the suite)")
    ap.add_argument("--windows", type=int, default=8)
    ap.add_argument("--levels", default="4", help="accuracy levels to measure perplexity under")
    ap.add_argument("--threads", type=int, default=2, help="threads for perplexity")
    ap.add_argument("--cap-min", type=float, default=15.0, help="time cap per quantization (minutes)")
    ap.add_argument("--calib-samples", type=int, default=16)
    ap.add_argument("--calib-len", type=int, default=256)
    ap.add_argument("--reuse", action="store_true", help="keep outputs already on disk")
    ap.add_argument("--latency", action="store_true", help="time decode latency of every result on disk")
    ap.add_argument("--latency-only", default=None, help="time only these rows (comma-separated)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--past", type=int, default=128)
    ap.add_argument("--kv-only", action="store_true", help="quantize only the KV variants of measured rows")
    ap.add_argument("--report", action="store_true", help="print the markdown table of the JSON")
    ap.add_argument("--nncf-python", type=Path, default=NNCF_PYTHON)
    ap.add_argument("--quantize-one", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--src", type=Path, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--dst", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.quantize_one:
        print("RESULT " + json.dumps(quantize_one(json.loads(args.quantize_one), args.src, args.dst,
                                                  args.calib_samples, args.calib_len)), flush=True)
        return

    if args.report:
        print(report(load_results()))
        return
    plain, kvsrc = MODEL_DIR / "model.onnx", MODEL_DIR / "model_kv.onnx"
    levels = [int(x) for x in args.levels.split(",") if x]
    res = load_results()
    res["meta"].update({"text": str(EVAL_TEXT), "windows": args.windows, "window": 512,
                        "calibration": [str(p) for p in CALIB_TEXTS], "calib_samples": args.calib_samples,
                        "calib_len": args.calib_len, "fp32_bytes": model_size(plain)})
    ids = tokens([EVAL_TEXT])
    res["meta"]["text_tokens"] = int(len(ids))

    if args.suite == "fp32":
        row = {"tool": "fp32", "bytes": model_size(plain), "ppl": {}}
        row["ppl"]["fp32"] = perplexity(plain, None, ids, args.windows, args.threads)
        if kvsrc.exists():
            row["ppl_kv_empty_past"] = perplexity(kvsrc, None, ids, args.windows, args.threads)
        res["runs"]["fp32"] = row
        save_results(res, "fp32")
        print(json.dumps(row), flush=True)
    elif args.suite:
        chosen = configs(args.suite)
        if args.only:
            keep = set(args.only.split(","))
            chosen = [c for c in chosen if c["name"] in keep]
        for cfg in chosen:
            dst = WORK / cfg["name"] / "model.onnx"
            if args.kv_only:  # only the KV variant of rows already measured
                row = res["runs"].get(cfg["name"])
                if not cfg.get("kv") or row is None or "error" in row or not kvsrc.exists():
                    continue
                kvdst = WORK / (cfg["name"] + "_kv") / "model.onnx"
                row["kv_quantize"] = run_quantize(cfg, args, kvsrc, kvdst)
                if kvdst.exists():
                    row["kv_bytes"] = model_size(kvdst)
                save_results(res, cfg["name"])
                print(json.dumps({"name": cfg["name"], "kv_quantize": row["kv_quantize"]}), flush=True)
                continue
            row = dict(cfg)
            if not (args.reuse and dst.exists()):
                row |= run_quantize(cfg, args, plain, dst)
            else:
                row |= {k: v for k, v in res["runs"].get(cfg["name"], {}).items() if k in ("quantize_s", "nncf")}
            if "error" not in row:
                row["bytes"] = model_size(dst)
                row["ratio"] = round(row["bytes"] / res["meta"]["fp32_bytes"], 4)
                row["ppl"] = {}
                for level in levels:
                    try:
                        row["ppl"][f"level{level}"] = perplexity(dst, level, ids, args.windows, args.threads)
                    except Exception as exc:  # record the runtime's refusal, keep going
                        row["ppl"][f"level{level}"] = {"error": " ".join(str(exc).split())[:400]}
                if cfg.get("kv") and kvsrc.exists():
                    kvdst = WORK / (cfg["name"] + "_kv") / "model.onnx"
                    if not (args.reuse and kvdst.exists()):
                        row["kv_quantize"] = run_quantize(cfg, args, kvsrc, kvdst)
                    if kvdst.exists():
                        row["kv_bytes"] = model_size(kvdst)
            res["runs"][cfg["name"]] = row
            save_results(res, cfg["name"])
            print(json.dumps({k: row.get(k) for k in ("name", "quantize_s", "bytes", "ratio", "ppl", "error")}),
                  flush=True)

    if args.latency:
        entries = [("fp32/seq1", plain, None, False)]
        if kvsrc.exists():
            entries.append(("fp32/kv", kvsrc, None, True))
        for name, row in sorted(res["runs"].items()):
            dst = WORK / name / "model.onnx"
            if name == "fp32" or "error" in row or not dst.exists():
                continue
            if any("error" in v for v in row.get("ppl", {}).values()):  # onnxruntime refused to load it
                continue
            if args.latency_only and name not in args.latency_only.split(","):
                continue
            for level in levels:
                entries.append((f"{name}/seq1/level{level}", dst, level, False))
                kvdst = WORK / (name + "_kv") / "model.onnx"
                if row.get("kv") and kvdst.exists():
                    entries.append((f"{name}/kv/level{level}", kvdst, level, True))
        timed = {}
        for i in range(0, len(entries), 8):  # at most 8 sessions alive at once; fp32 in every group
            group = entries[i:i + 8]
            if i:
                group = entries[:2] + group
            got = latency(group, args.rounds, args.steps, args.past)
            for key, v in got.items():
                timed.setdefault(key, []).append(v)
        # One key per run: figures compare only within one group of one run (fp32 is in every group).
        res["latency_ms" if not args.latency_only else "latency_ms_selected"] = {
            k: v if len(v) > 1 else v[0] for k, v in timed.items()}
        res["meta"]["latency"] = {"threads": 1, "batch": 1, "rounds": args.rounds, "steps": args.steps,
                                  "past": args.past}
        save_results(res)
        print(json.dumps(timed, indent=1), flush=True)


if __name__ == "__main__":
    main()
