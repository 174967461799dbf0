"""Side-by-side benchmark: onnxptq presets vs onnxruntime.quantization vs amd-quark on real models.

One command quantizes PP-OCRv4 rec, PP-OCR mobile cls, the three silero VAD models (If
branches, LSTM, fp16; ``testkit.models.model_path``) and the all-MiniLM-L6-v2 sentence
encoder (``testkit.minilm``, the exporter's finfo.min attention mask), plus any ONNX model
given on the command line, with

* **onnxptq**: every canonical preset, the per-tensor weight rows of ``PER_TENSOR_ROWS`` (``A8W8
  per-tensor``: ``per_channel=False``; ``no-cle`` / ``no-ocs`` / ``no-bc`` turn equalization /
  outlier channel splitting / bias correction off), plus the finetuning presets of ``FINETUNE_PRESETS`` (``--presets`` to choose;
  ``--finetune-iterations`` to bound their NumIterations), ``onnxptq.quantize``;
* **onnxruntime**: ``quantize_static``, QuantFormat.QDQ, MinMax calibration, U8S8 / S8S8 / A16W8
  (QInt16 activations, QInt8 weights), each per-tensor and per-channel;
* **amd-quark**: its documented API (``ModelQuantizer(Config(global_quant_config=
  get_default_config(preset)))``, inference with its custom-op library registered) when
  ``import quark.onnx`` works; otherwise one row per model records "not installed".

Every backend runs in the same invocation on the same rendered data (calibration and evaluation
sets are rendered once, by ``testkit.ocr``, and saved as ``.npy``). Each job runs in its
own Python process, so its figures are its own:

* **valid**: ``onnx.checker.check_model`` on the saved file and an onnxruntime CPU session load;
* **quantize s**: wall time of the quantize call alone (onnxptq's includes its own 8-sample
  output check; imports and data loading are outside);
* **peak RSS MiB**: ``VmHWM`` of the job process read right after quantizing (interpreter and
  imports included; ``base`` is ``VmRSS`` before the call), cross-checked by the parent with
  ``os.wait4``'s per-child ``ru_maxrss`` (which also covers evaluation);
* **size MB**: the saved model (plus external data);
* **task metric**: CER on the rendered lines for rec (greedy CTC, normalized text), top-1 accuracy
  for cls, for the silero models (task ``vad``) the share of 512-sample windows whose speech
  decision (probability > 0.5) agrees with float, streaming a speech/noise/silence clip with each
  model's own recurrent state (``testkit.audio``); for the encoder (task ``encoder``)
  paraphrase retrieval top-1 over ``bench/paraphrases.py`` (a query's nearest paraphrase by
  cosine is its own), calibrated on ``bench/minilm.py``'s sentences; none for a model given on
  the command line;
* **cosine / PSNR**: of the quantized model's first output against the float model's over the
  whole evaluation set (cosine of the flattened outputs; PSNR with the float output's peak);
* **latency ms**: onnxruntime CPU, ``intra_op_num_threads = inter_op_num_threads = 1``, default
  graph optimizations, one sample, median of ``--latency-runs`` (≥ 20) after 3 warm-up runs.

Failures (quantize, checker, load, evaluation, timeouts, crashes) are recorded with their error
and the run goes on. Writes ``bench/RESULTS_run.md`` (and the raw ``bench/RESULTS_run.json``) with
the command and package versions.

    python bench/run.py                 # full: rec 32/100 lines, cls 64/200, all presets
    python bench/run.py --quick         # smoke run: 4 presets, 2 onnxruntime configs, fewer lines
    python bench/run.py extra.onnx      # also a model of your own (random-normal inputs)

Child mode (used by the parent): ``python bench/run.py --job JOB.json``.
"""

from __future__ import annotations

import _common  # the repository root on sys.path (testkit), the bench's session helper
import dataclasses
import argparse
import datetime
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
#: onnxruntime quantize_static configurations: name -> (activation type, weight type, per-channel)
ORT_CONFIGS: dict[str, tuple[str, str, bool]] = {
    "U8S8 per-tensor": ("QUInt8", "QInt8", False),
    "U8S8 per-channel": ("QUInt8", "QInt8", True),
    "S8S8 per-tensor": ("QInt8", "QInt8", False),
    "S8S8 per-channel": ("QInt8", "QInt8", True),
    "A16W8 per-tensor": ("QInt16", "QInt8", False),
    "A16W8 per-channel": ("QInt16", "QInt8", True),
}
QUICK_PRESETS = ("A8W8", "A16W8", "BF16", "BFP16", "MXINT8")
QUICK_ORT = ("U8S8 per-channel", "A16W8 per-channel")
#: (calibration, evaluation) samples per task
FULL_SIZES = {"rec": (32, 100), "cls": (64, 200), "other": (16, 16), "vad": (2, 8), "encoder": (24, 100)}
QUICK_SIZES = {"rec": (8, 24), "cls": (16, 48), "other": (4, 8), "vad": (1, 3), "encoder": (8, 20)}
#: the built-in models whose task is voice activity (sizes in seconds of audio, not samples)
VAD_MODELS = ("silero", "silero_ifless", "silero_half")
#: the built-in sentence encoders (sizes: calibration sentences, evaluation paraphrase pairs)
ENCODER_MODELS = ("minilm",)


# ---------------------------------------------------------------------------------------------
# child: one job


def _status_kib(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


class _NpyReader:
    """A CalibrationDataReader over an .npy file, one sample per feed (memory-mapped)."""

    def __init__(self, path: str, input_name: str) -> None:
        self.data = np.load(path, mmap_mode="r")
        self.name = input_name
        self.i = 0

    def get_next(self) -> dict[str, np.ndarray] | None:
        if self.i >= len(self.data):
            return None
        self.i += 1
        return {self.name: np.ascontiguousarray(self.data[self.i - 1 : self.i])}

    def rewind(self) -> None:
        self.i = 0


class _NpzReader:
    """A CalibrationDataReader over an .npz of per-input arrays stacked on axis 0 (multi-input feeds)."""

    def __init__(self, path: str, input_name: str = "") -> None:
        with np.load(path) as data:
            self.data = {k: data[k] for k in data.files}
        self.n = len(next(iter(self.data.values())))
        self.i = 0

    def get_next(self) -> dict[str, np.ndarray] | None:
        if self.i >= self.n:
            return None
        self.i += 1
        return {k: np.asarray(v[self.i - 1]) for k, v in self.data.items()}  # a 0-d array, not a NumPy scalar

    def rewind(self) -> None:
        self.i = 0


def _reader(path: str, input_name: str) -> _NpyReader | _NpzReader:
    return _NpzReader(path) if path.endswith(".npz") else _NpyReader(path, input_name)


def _ort_reader(path: str, input_name: str):
    from onnxruntime.quantization import CalibrationDataReader

    base = _NpzReader if path.endswith(".npz") else _NpyReader

    class Reader(base, CalibrationDataReader):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            base.__init__(self, path, input_name)

    return Reader()


#: Per-tensor weight rows (issue 15): the preset with ``per_channel=False`` as shipped (cross-layer
#: equalization, outlier channel splitting and bias correction on, automatically), and the same
#: without them (the "before").
PER_TENSOR_ROWS = ("A8W8 per-tensor", "A8W8 per-tensor no-cle no-ocs no-bc", "A16W8 per-tensor",
                   "A16W8 per-tensor no-cle no-ocs no-bc")


def _onnxptq_config(config: str):
    """``PRESET[ per-tensor][ no-cle][ no-ocs][ no-bc]``: a preset, its integer weights per tensor,
    and equalization / outlier channel splitting / bias correction forced off."""
    import dataclasses

    from onnxptq.config.presets import get_preset

    name, *flags = config.split()
    unknown = set(flags) - {"per-tensor", "no-cle", "no-ocs", "no-bc"}
    if unknown:
        raise ValueError(f"unknown onnxptq config flags {sorted(unknown)} in {config!r}")
    cfg = get_preset(name)
    cfg = cfg.replace(calibration=dataclasses.replace(cfg.calibration, progress=False))
    if "per-tensor" in flags:
        cfg = cfg.replace(weight=dataclasses.replace(cfg.weight, per_channel=False))
    if "no-cle" in flags:
        cfg = cfg.replace(equalize=False)
    if "no-ocs" in flags:
        cfg = cfg.replace(split_outliers=False)
    if "no-bc" in flags:
        cfg = cfg.replace(bias_correction=False)
    return cfg


def _quantize(job: dict[str, Any]) -> None:
    """Quantize ``job['model']`` to ``job['output']`` with the job's backend and config."""
    backend, config, model, out = job["backend"], job["config"], job["model"], job["output"]
    if backend == "onnxptq":
        from onnxptq.api import quantize

        cfg = _onnxptq_config(config)
        if cfg.finetune is not None and job.get("finetune_iterations"):
            cfg.finetune.num_iterations = int(job["finetune_iterations"])
        quantize(model, cfg, data=_reader(job["calib"], job["input_name"]), output=out)
    elif backend == "onnxruntime":
        from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

        act, weight, per_channel = ORT_CONFIGS[config]
        quantize_static(model, out, _ort_reader(job["calib"], job["input_name"]), quant_format=QuantFormat.QDQ,
                        per_channel=per_channel, activation_type=getattr(QuantType, act),
                        weight_type=getattr(QuantType, weight), calibrate_method=CalibrationMethod.MinMax)
    elif backend == "quark":
        from quark.onnx import ModelQuantizer
        from quark.onnx.quantization.config import Config, get_default_config

        quantizer = ModelQuantizer(Config(global_quant_config=get_default_config(config)))
        quantizer.quantize_model(model, out, calibration_data_reader=_reader(job["calib"], job["input_name"]))
    else:
        raise ValueError(f"unknown backend {backend!r}")


def _session(path: str, backend: str, threads: int | None):
    """A CPU session on ``path`` (bench/_common.py's helper); ``threads`` intra- and inter-op threads
    when given; the reference tool's custom-op library registered for its models."""
    libraries = ()
    if backend == "quark":
        from quark.onnx import get_library_path

        libraries = (get_library_path(),)
    return _common.session(path, threads, inter_op_threads=threads, custom_op_libraries=libraries)


def _model_size(path: str) -> int:
    """Bytes of the model file plus any external-data files it names."""
    import onnx
    from onnx.external_data_helper import uses_external_data

    size = os.path.getsize(path)
    proto = onnx.load(path, load_external_data=False)
    files = {e.value for t in proto.graph.initializer if uses_external_data(t) for e in t.external_data if e.key == "location"}
    return size + sum(os.path.getsize(Path(path).parent / f) for f in files)


def _evaluate(job: dict[str, Any], result: dict[str, Any]) -> None:
    """Validity, task metric, cosine/PSNR vs float, one-thread latency of ``job['output']``."""
    import onnx

    path, backend = job["output"], job["backend"]
    result["size_bytes"] = _model_size(path)
    try:
        onnx.checker.check_model(path)
        sess = _session(path, backend, None)
    except Exception as exc:
        result["valid"] = False
        result["error"] = f"invalid: {type(exc).__name__}: {_short(exc)}"
        return
    result["valid"] = True
    if job["task"] == "vad":
        _evaluate_vad(job, result, sess, path, backend)
        return
    if job["task"] == "encoder":
        _evaluate_encoder(job, result, sess, path, backend)
        return

    images = np.load(job["eval"], mmap_mode="r")
    name = sess.get_inputs()[0].name
    batch = job.get("eval_batch", 16)
    outs = [sess.run(None, {name: np.ascontiguousarray(images[i : i + batch])})[0] for i in range(0, len(images), batch)]
    out = np.concatenate(outs)
    ref = np.load(job["float_out"], mmap_mode="r")
    from onnxptq.analysis.compare import cosine, psnr

    if out.shape != ref.shape:
        result["error"] = f"output shape {out.shape} differs from the float model's {ref.shape}"
    else:
        result["cosine"] = cosine(ref, out)
        result["psnr_db"] = psnr(np.asarray(ref), out)
    task = job["task"]
    if task == "rec":
        from testkit.ocr import cer, ctc_greedy_decode, normalize_text

        chars = json.loads(Path(job["characters"]).read_text(encoding="utf-8"))
        texts = json.loads(Path(job["labels"]).read_text(encoding="utf-8"))
        preds = [normalize_text(p) for p in ctc_greedy_decode(out, chars)]
        result["metric"] = cer(preds, [normalize_text(t) for t in texts])
    elif task == "cls":
        labels = np.load(job["labels"])
        result["metric"] = float((out.argmax(axis=1) == labels).mean())
    del outs, out, ref, sess

    result["latency_ms"] = _latency_ms(path, backend, {name: np.ascontiguousarray(images[:1])}, job["latency_runs"])


def _latency_ms(path: str, backend: str, feed: dict[str, np.ndarray], runs: int) -> float:
    """Median one-thread latency of ``path`` on one feed, after three warm-up runs."""
    session = _session(path, backend, 1)
    for _ in range(3):
        session.run(None, feed)
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        session.run(None, feed)
        times.append(time.perf_counter() - t)
    return 1e3 * statistics.median(times)


def _evaluate_vad(job: dict[str, Any], result: dict[str, Any], sess: Any, path: str, backend: str) -> None:
    """Streaming VAD on the evaluation clip: agreement of speech decisions, cosine of probabilities."""
    from onnxptq.analysis.compare import psnr
    from testkit import audio

    probs, _ = audio.run_vad(sess, np.load(job["eval"]))
    ref = np.load(job["float_out"])
    figures = audio.compare_probs(ref, probs)
    result.update(cosine=figures["cosine"], psnr_db=psnr(ref, probs), metric=figures["agreement"])
    result["latency_ms"] = _latency_ms(path, backend, _NpzReader(job["calib"]).get_next(), job["latency_runs"])


def _encoder_batches(data: dict[str, np.ndarray], size: int = 10):
    """Feeds of ``size`` sentences from per-sentence arrays stacked as [N, 1, L] (the .npz layout)."""
    n = len(next(iter(data.values())))
    for i in range(0, n, size):
        yield {k: np.ascontiguousarray(v[i:i + size, 0]) for k, v in data.items()}


def _retrieval_top1(embeddings: np.ndarray) -> float:
    """Share of queries (first half) whose nearest paraphrase (second half) by cosine is their own."""
    half = len(embeddings) // 2
    unit = embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)
    return float(np.mean(np.argmax(unit[:half] @ unit[half:].T, axis=1) == np.arange(half)))


def _evaluate_encoder(job: dict[str, Any], result: dict[str, Any], sess: Any, path: str, backend: str) -> None:
    """Sentence embeddings of the evaluation pairs: retrieval top-1, cosine/PSNR against float."""
    from onnxptq.analysis.compare import cosine, psnr

    with np.load(job["eval"]) as data:
        sentences = {k: data[k] for k in data.files}
    out = np.concatenate([sess.run(None, feed)[0] for feed in _encoder_batches(sentences)])
    ref = np.load(job["float_out"])
    result.update(cosine=cosine(ref, out), psnr_db=psnr(ref, out), metric=_retrieval_top1(out))
    result["latency_ms"] = _latency_ms(path, backend, next(_encoder_batches(sentences, 1)), job["latency_runs"])


def _prepare_encoder(name: str, path: Path, d: Path, sizes: tuple[int, int]) -> dict[str, Any]:
    """Tokenized calibration sentences and paraphrase pairs (queries, then paraphrases), all padded
    to one length so that every feed of every backend sees the same tokens, and float embeddings."""
    sys.path.insert(0, str(ROOT / "bench"))
    from minilm import CALIBRATION
    from paraphrases import PAIRS

    from onnxptq.sessions import open_session
    from testkit import minilm

    n_cal, n_pairs = sizes
    calibration = CALIBRATION[:n_cal]
    pairs = PAIRS[:n_pairs]
    sentences = [q for q, _ in pairs] + [p for _, p in pairs]
    tokens = minilm.tokenize(calibration + sentences)  # one padding length for all
    per_sentence = {k: v[:, None, :] for k, v in tokens.items()}
    np.savez(d / "calib.npz", **{k: v[:n_cal] for k, v in per_sentence.items()})
    np.savez(d / "eval.npz", **{k: v[n_cal:] for k, v in per_sentence.items()})
    session = open_session(str(path), threads=1)
    float_out = np.concatenate([session.run(None, feed)[0] for feed in _encoder_batches({k: v[n_cal:] for k, v in per_sentence.items()})])
    np.save(d / "float_out.npy", float_out)
    return {"name": name, "model": str(path), "input_name": "input_ids", "dir": str(d), "task": "encoder",
            "calib": str(d / "calib.npz"), "eval": str(d / "eval.npz"), "float_out": str(d / "float_out.npy"),
            "n_calib": n_cal, "n_eval": len(sentences), "float_metric": _retrieval_top1(float_out)}


def _prepare_vad(name: str, path: Path, d: Path, seconds: tuple[float, float]) -> dict[str, Any]:
    """Speech/noise/silence clips, the float model's calibration feeds (.npz) and probabilities."""
    from testkit import audio

    calib, _ = audio.speech_mix(seed=606, seconds=seconds[0])
    clip, _ = audio.speech_mix(seed=707, seconds=seconds[1])
    feeds = audio.vad_feeds(str(path), calib)
    np.savez(d / "calib.npz", **{k: np.stack([f[k] for f in feeds]) for k in feeds[0]})
    np.save(d / "eval.npy", clip)
    probs, _ = audio.run_vad(str(path), clip)
    np.save(d / "float_out.npy", probs)
    return {"name": name, "model": str(path), "input_name": "input", "dir": str(d), "task": "vad",
            "calib": str(d / "calib.npz"), "eval": str(d / "eval.npy"), "float_out": str(d / "float_out.npy"),
            "n_calib": len(feeds), "n_eval": len(probs)}


def _short(exc: BaseException, limit: int = 400) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def run_job(job_path: str) -> int:
    """Child entry point: run one job, write its result JSON (even on failure)."""
    job = json.loads(Path(job_path).read_text())
    result: dict[str, Any] = {"valid": None}
    try:
        import onnx  # noqa: F401  (imports outside the timed call)
        import onnxruntime  # noqa: F401

        if job["backend"] == "onnxptq":
            import onnxptq.api  # noqa: F401
        elif job["backend"] == "onnxruntime":
            import onnxruntime.quantization  # noqa: F401
        if job["backend"] != "float":
            result["base_rss_kib"] = _status_kib("VmRSS")
            t = time.perf_counter()
            try:
                _quantize(job)
            except Exception as exc:
                result["quantize_s"] = time.perf_counter() - t
                result["peak_rss_kib"] = _status_kib("VmHWM")
                result["error"] = f"quantize failed: {type(exc).__name__}: {_short(exc)}"
                result["traceback"] = traceback.format_exc()[-3000:]
                return 0
            result["quantize_s"] = time.perf_counter() - t
            result["peak_rss_kib"] = _status_kib("VmHWM")
        _evaluate(job, result)
    except Exception as exc:
        result["error"] = f"evaluation failed: {type(exc).__name__}: {_short(exc)}"
        result["traceback"] = traceback.format_exc()[-3000:]
    finally:
        Path(job["result"]).write_text(json.dumps(result, indent=1))
    return 0


# ---------------------------------------------------------------------------------------------
# parent: data, jobs, table


def _prepare_data(name: str, path: Path, work: Path, sizes: dict[str, tuple[int, int]]) -> dict[str, Any]:
    """Render (or draw) the calibration and evaluation sets once and the float outputs on them."""
    from testkit import ocr

    d = work / name
    d.mkdir(parents=True, exist_ok=True)
    if name in VAD_MODELS:
        return _prepare_vad(name, path, d, sizes["vad"])
    if name in ENCODER_MODELS:
        return _prepare_encoder(name, path, d, sizes["encoder"])
    sess = _common.session(str(path))
    inp = sess.get_inputs()[0]
    info: dict[str, Any] = {"name": name, "model": str(path), "input_name": inp.name, "dir": str(d)}
    if name == "rec":
        n_cal, n_eval = sizes["rec"]
        chars = ocr.load_characters(str(path))
        cal, _ = ocr.render_lines(n_cal, seed=101, characters=chars)
        ev, texts = ocr.render_lines(n_eval, seed=202, characters=chars)
        (d / "chars.json").write_text(json.dumps(chars, ensure_ascii=False), encoding="utf-8")
        (d / "labels.json").write_text(json.dumps(texts, ensure_ascii=False), encoding="utf-8")
        info.update(task="rec", characters=str(d / "chars.json"), labels=str(d / "labels.json"))
    elif name == "cls":
        n_cal, n_eval = sizes["cls"]
        cal, _ = ocr.render_cls(n_cal, seed=303)
        ev, labels = ocr.render_cls(n_eval, seed=404)
        np.save(d / "labels.npy", labels)
        info.update(task="cls", labels=str(d / "labels.npy"))
    else:
        n_cal, n_eval = sizes["other"]
        if len(sess.get_inputs()) != 1:
            raise ValueError(f"{path}: bench/run.py feeds models with one input; this one has {len(sess.get_inputs())}")
        shape = [d_ if isinstance(d_, int) and d_ > 0 else 1 for d_ in inp.shape]
        rng = np.random.default_rng(505)
        cal = rng.standard_normal([n_cal] + shape[1:]).astype(np.float32)
        ev = rng.standard_normal([n_eval] + shape[1:]).astype(np.float32)
        info.update(task="other")
    np.save(d / "calib.npy", cal)
    np.save(d / "eval.npy", ev)
    outs = [sess.run(None, {inp.name: ev[i : i + 16]})[0] for i in range(0, len(ev), 16)]
    np.save(d / "float_out.npy", np.concatenate(outs))
    info.update(calib=str(d / "calib.npy"), eval=str(d / "eval.npy"), float_out=str(d / "float_out.npy"),
                n_calib=len(cal), n_eval=len(ev))
    return info


def _run_child(job: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Run one job in a fresh process; per-child rusage from ``os.wait4``; never raises."""
    job_file = Path(job["result"]).with_suffix(".job.json")
    job_file.write_text(json.dumps(job))
    log_file = Path(job["result"]).with_suffix(".log")
    t0 = time.perf_counter()
    with open(log_file, "w") as log:
        proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--job", str(job_file)],
                                stdout=log, stderr=subprocess.STDOUT, cwd=str(ROOT))
        deadline = time.monotonic() + timeout
        status, usage, timed_out = 0, None, False
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                _, status, usage = os.wait4(proc.pid, 0)
                timed_out = True
                break
            time.sleep(0.2)
        proc.returncode = os.waitstatus_to_exitcode(status)
    result: dict[str, Any] = {}
    if Path(job["result"]).exists():
        result = json.loads(Path(job["result"]).read_text())
    if timed_out:
        result.setdefault("error", f"timed out after {timeout:.0f} s")
    elif proc.returncode != 0 or not result:
        tail = " ".join(log_file.read_text(errors="replace").split()[-60:])
        result.setdefault("error", f"job process exited with {proc.returncode}: {tail[-400:]}")
    result["job_wall_s"] = time.perf_counter() - t0
    result["job_maxrss_kib"] = usage.ru_maxrss if usage is not None else None
    return result


def _versions() -> dict[str, str]:
    import onnx
    import onnxruntime

    import onnxptq

    versions = {"python": platform.python_version(), "numpy": np.__version__, "onnx": onnx.__version__,
                "onnxruntime": onnxruntime.__version__, "onnxptq": getattr(onnxptq, "__version__", "?")}
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
        versions["onnxptq"] += f" (git {rev}{', uncommitted changes in the tree' if dirty else ''})"
    except OSError:
        pass
    try:
        import quark  # noqa: F401

        from importlib.metadata import version

        versions["amd-quark"] = version("amd-quark")
    except Exception as exc:
        versions["amd-quark"] = f"not installed ({type(exc).__name__}: {_short(exc, 120)})"
    return versions


def _quark_available() -> str | None:
    """None when ``import quark.onnx`` works, else why not."""
    try:
        import quark.onnx  # noqa: F401
    except Exception as exc:
        return f"not installed: import quark.onnx: {type(exc).__name__}: {_short(exc, 160)}"
    return None


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def _fmt(value: Any, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def _table(rows: list[dict[str, Any]], task: str, runs: int) -> list[str]:
    metric = {"rec": "CER ↓", "cls": "accuracy ↑", "vad": "decisions agreeing ↑", "encoder": "retrieval top-1 ↑"}.get(task, "metric")
    lines = [f"| backend | config | valid | quantize s | peak RSS MiB (base) | size MB | {metric} | cosine | PSNR dB | "
             f"latency ms (1 thr, median of {runs}) | error |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        valid = {True: "yes", False: "**no**", None: "–"}[r.get("valid")]
        rss = "–" if r.get("peak_rss_kib") is None else f"{r['peak_rss_kib'] / 1024:.0f} ({r.get('base_rss_kib', 0) / 1024:.0f})"
        size = "–" if r.get("size_bytes") is None else f"{r['size_bytes'] / 1e6:.2f}"
        metric_fmt = ".4f"
        err = (r.get("error") or "").replace("|", "\\|")
        lines.append(
            f"| {r['backend']} | {r['config']} | {valid} | {_fmt(r.get('quantize_s'), '.1f')} | {rss} | {size} | "
            f"{_fmt(r.get('metric'), metric_fmt)} | {_fmt(r.get('cosine'), '.5f')} | {_fmt(r.get('psnr_db'), '.2f')} | "
            f"{_fmt(r.get('latency_ms'), '.2f')} | {err} |"
        )
    return lines


def _write_results(path: Path, models: list[dict[str, Any]], results: list[dict[str, Any]], args: argparse.Namespace,
                   versions: dict[str, str], started: str, wall: float) -> None:
    cmd = "python bench/run.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    lines = [
        "# bench/run.py: onnxptq vs onnxruntime.quantization vs amd-quark",
        "",
        f"Command: `{cmd.strip()}` — started {started}, {wall / 60:.1f} min in all.",
        "",
        "Versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()) + ".",
        f"Machine: {_cpu_name()}, {os.cpu_count()} CPUs (shared with other work while this ran: latencies and times "
        "are indicative, compare within one table).",
        "",
        "How each figure is measured is in the docstring of `bench/run.py`. Every job is its own process; peak RSS is "
        "`VmHWM` right after quantizing (base = `VmRSS` before the call: interpreter + imports). onnxruntime: "
        "`quantize_static`, QDQ, MinMax, no pre-processing. onnxptq: the preset as shipped (its integer presets "
        "calibrate with Percentile and per-channel weights). Errors are cut to 400 characters; the JSON beside this "
        "file has the full tracebacks.",
        "",
    ]
    for model in models:
        rows = [r for r in results if r["model_name"] == model["name"]]
        lines.append(f"## {model['name']}: `{Path(model['model']).name}`")
        lines.append("")
        if model.get("error"):
            lines += [f"Data preparation failed: {model['error']}", ""]
            continue
        data = {"rec": "rendered text lines (`render_lines`, model alphabet)", "cls": "rendered lines, half rotated 180° (`render_cls`)",
                "vad": "512-sample windows of speech (espeak-ng) mixed with noise and silence (`speech_mix`), streamed with state",
                "encoder": "sentences of `bench/minilm.py` (calibration) and paraphrase pairs of `bench/paraphrases.py` "
                           "(evaluation, queries then paraphrases), one padding length"}
        lines.append(f"Data: {model['n_calib']} calibration and {model['n_eval']} evaluation samples, "
                     f"{data.get(model['task'], 'random-normal inputs')}; the same for every backend.")
        lines.append("")
        lines += _table(rows, model["task"], args.latency_runs)
        lines.append("")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    path.with_suffix(".json").write_text(json.dumps({"command": cmd, "versions": versions, "models": models,
                                                      "results": results}, indent=1, ensure_ascii=False))


#: The finetuning presets issue 3 names (every other X_ADAROUND / X_ADAQUANT is the same algorithm
#: on another base preset, and each costs minutes on rec).
FINETUNE_PRESETS = ("A8W8_ADAROUND", "A8W8_ADAQUANT", "A16W8_ADAROUND", "A16W8_ADAQUANT", "BF16_ADAQUANT")


def _canonical_presets() -> list[str]:
    """Every canonical preset without finetuning, then :data:`FINETUNE_PRESETS`."""
    from onnxptq.config.presets import canonical_name, preset_names, split_finetune

    return ([n for n in preset_names() if canonical_name(n) == n and split_finetune(n)[1] is None] + list(PER_TENSOR_ROWS)
            + list(FINETUNE_PRESETS))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help="extra ONNX models to benchmark beside rec and cls")
    parser.add_argument("--job", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="smoke run: few presets and samples")
    parser.add_argument("--only", default=",".join(("rec", "cls", *VAD_MODELS, *ENCODER_MODELS)),
                        help=f"built-in models to run (comma list of rec, cls, {', '.join((*VAD_MODELS, *ENCODER_MODELS))}; "
                             "'' for none)")
    parser.add_argument("--presets", help="onnxptq presets, comma-separated (default: every canonical preset)")
    parser.add_argument("--finetune-iterations", type=int, default=None,
                        help="NumIterations for the finetuning presets (default: the preset's, 1000)")
    parser.add_argument("--ort-configs", help=f"onnxruntime configs, comma-separated from: {', '.join(ORT_CONFIGS)}")
    parser.add_argument("--backends", default="onnxptq,onnxruntime,quark", help="backends to run")
    parser.add_argument("--latency-runs", type=int, default=20, help="timed runs per latency median (>= 20)")
    parser.add_argument("--job-timeout", type=float, default=1200.0, help="seconds before a job is killed and recorded as failed")
    parser.add_argument("--workdir", help="where data, models and logs go (default: a temporary folder, kept)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "RESULTS_run.md"), help="results table (Markdown; JSON beside it)")
    args = parser.parse_args(argv)
    if args.job:
        return run_job(args.job)
    if args.latency_runs < 20:
        parser.error("--latency-runs must be at least 20")

    from testkit.models import model_path

    started = datetime.datetime.now().isoformat(timespec="seconds")
    t_start = time.perf_counter()
    sizes = QUICK_SIZES if args.quick else FULL_SIZES
    presets = args.presets.split(",") if args.presets else (list(QUICK_PRESETS) if args.quick else _canonical_presets())
    ort_configs = args.ort_configs.split(",") if args.ort_configs else (list(QUICK_ORT) if args.quick else list(ORT_CONFIGS))
    for c in ort_configs:
        if c not in ORT_CONFIGS:
            parser.error(f"unknown onnxruntime config {c!r}; valid: {', '.join(ORT_CONFIGS)}")
    backends = args.backends.split(",")
    work = Path(args.workdir or tempfile.mkdtemp(prefix="onnxptq-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"work folder {work}", flush=True)

    from testkit import minilm

    sources = [(n, minilm.onnx_path("finfo") if n in ENCODER_MODELS else model_path(n)) for n in args.only.split(",") if n]
    sources += [(Path(p).stem, Path(p)) for p in args.models]
    models: list[dict[str, Any]] = []
    for name, path in sources:
        try:
            models.append(_prepare_data(name, Path(path), work, sizes))
        except Exception as exc:
            models.append({"name": name, "model": str(path), "error": f"{type(exc).__name__}: {_short(exc)}"})

    quark_missing = _quark_available()
    jobs: list[dict[str, Any]] = []
    for m in models:
        if m.get("error"):
            continue
        planned = [("float", "fp32 (reference)")]
        if "onnxptq" in backends:
            planned += [("onnxptq", p) for p in presets]
        if "onnxruntime" in backends:
            planned += [("onnxruntime", c) for c in ort_configs]
        if "quark" in backends and quark_missing is None:
            planned += [("quark", p) for p in presets]
        for backend, config in planned:
            slug = f"{m['name']}__{backend}__{config}".replace(" ", "_").replace("/", "_")
            out = m["model"] if backend == "float" else str(work / "models" / f"{slug}.onnx")
            jobs.append({**{k: m[k] for k in ("model", "input_name", "calib", "eval", "float_out", "task")},
                         "characters": m.get("characters"), "labels": m.get("labels"), "model_name": m["name"],
                         "backend": backend, "config": config, "output": out,
                         "result": str(work / "results" / f"{slug}.json"), "latency_runs": args.latency_runs,
                         "finetune_iterations": args.finetune_iterations})
    (work / "models").mkdir(exist_ok=True)
    (work / "results").mkdir(exist_ok=True)

    versions = _versions()
    results: list[dict[str, Any]] = []
    for m in models:
        if "quark" in backends and quark_missing is not None and not m.get("error"):
            results.append({"model_name": m["name"], "backend": "amd-quark", "config": "all presets", "valid": None,
                            "error": quark_missing})
    for i, job in enumerate(jobs, 1):
        print(f"[{i}/{len(jobs)}] {job['model_name']} {job['backend']} {job['config']} …", end=" ", flush=True)
        result = _run_child(job, args.job_timeout)
        result.update(model_name=job["model_name"], backend=job["backend"], config=job["config"])
        results.append(result)
        print(f"{result.get('error') or 'ok'} ({result['job_wall_s']:.0f} s)", flush=True)
        # Rewrite the table after every job, so a long run leaves usable results if interrupted.
        ordered = sorted(results, key=lambda r: (r["model_name"], ["float", "onnxptq", "onnxruntime", "quark", "amd-quark"].index(r["backend"])))
        _write_results(Path(args.out), models, ordered, args, versions, started, time.perf_counter() - t_start)
    if not jobs:
        _write_results(Path(args.out), models, results, args, versions, started, time.perf_counter() - t_start)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
