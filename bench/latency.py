"""Integer-model latency on onnxruntime's CPU execution provider: ours against float and onnxruntime's own.

For PP-OCRv4 rec (1x3x48x320), PP-OCR cls (1x3x48x192) and the all-MiniLM-L6-v2 sentence encoder
(``minilm``: one sentence of 12 tokens; ``testkit.minilm``), in one process: the float model, our
presets (default A8W8, A16W8, U8S8 — each for ``--runtime``, default the onnxruntime CPU target)
and onnxruntime's ``quantize_static`` (QDQ, uint8 activations, int8 per-channel weights, MinMax,
after ``quant_pre_process``), all calibrated on the same 64 rendered lines. Every model is timed
with 1 and 2 intra-op threads, round-robin (each round runs every variant once, so a drift in
machine load hits them alike): median wall time of ``session.run`` on one line and the ratio to
the float model's median, and beside it the process CPU time of the same calls (all threads),
which a loaded machine disturbs less. Accuracy: rec CER on 200 rendered lines, cls top-1 accuracy,
minilm the mean cosine between the quantized and the float embeddings of bench/paraphrases.py's 200
sentences (calibration: bench/minilm.py's 24 sentences, batches of 8).

    python bench/latency.py [--runs 40] [--models rec,cls] [--presets A8W8,A16W8,U8S8]
                            [--threads 1,2] [--runtime cpu] [--out DIR [--reuse]]

The load average is printed before and after: the machine is shared, so read ratios, not
absolute milliseconds, and distrust a run whose load is high.
"""

from __future__ import annotations

import _common  # the repository root on sys.path (testkit), the bench's session helper
import dataclasses
import argparse
import os
import statistics
import tempfile
import time

import numpy as np
import onnx
import onnx.version_converter
import onnxruntime as ort

#: Issue 16's targets for our A8W8, as a ratio to float wall time.
TARGETS = {"rec": 0.7, "cls": 1.0, "minilm": 0.7}
CALIB_LINES = 64
EVAL_LINES = 200


def session(model: str, threads: int) -> ort.InferenceSession:
    """A default CPU session with ``threads`` intra-op threads, as a user opens the model."""
    return _common.session(model, threads, inter_op_threads=1)


class Bench:
    """One model of the bench: its path, calibration feeds, the single input it is timed on, and
    its accuracy metric (``score(session)``, with the metric's label)."""

    def __init__(self, name: str) -> None:
        self.name = name
        if name == "minilm":
            self._minilm()
        else:
            self._ocr(name)

    def _ocr(self, name: str) -> None:
        from testkit import ocr
        from testkit.models import model_path

        self.path = str(model_path(name))
        if name == "rec":
            chars = ocr.load_characters(onnx.load(self.path))
            calib = ocr.render_lines(CALIB_LINES, seed=1, characters=chars)[0]
            images, refs = ocr.render_lines(EVAL_LINES, seed=3, characters=chars)
            self.label, self.score = "CER", lambda sess: ocr.rec_cer(sess, images, refs, characters=chars)
        else:
            calib = ocr.render_cls(CALIB_LINES, seed=1)[0]
            images, labels = ocr.render_cls(EVAL_LINES, seed=3)
            self.label, self.score = "top-1", lambda sess: ocr.cls_accuracy(sess, images, labels)
        self.calib = [{"x": calib[i:i + 8]} for i in range(0, len(calib), 8)]
        self.single = [{"x": calib[i:i + 1]} for i in range(len(calib))]
        self.feed = {"x": images[:1]}

    def _minilm(self) -> None:
        import sys

        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from minilm import CALIBRATION, batches, embed  # bench/minilm.py
        from paraphrases import PAIRS

        from testkit import minilm

        self.path = str(minilm.onnx_path("finfo"))
        sentences = [a for a, _ in PAIRS] + [b for _, b in PAIRS]
        reference = embed(session(self.path, 2), sentences)

        def cosine(sess) -> float:
            got = embed(sess, sentences)
            return float(np.mean(np.sum(reference * got, 1) / (np.linalg.norm(reference, axis=1) * np.linalg.norm(got, axis=1))))

        self.label, self.score = "cosine", cosine
        self.calib = list(batches(CALIBRATION, 8))
        self.single = list(batches(CALIBRATION, 1))
        self.feed = minilm.tokenize([PAIRS[0][0]])


def ours(path: str, preset: str, runtime: str, calib: list[dict[str, np.ndarray]], out: str) -> float:
    """Quantize with onnxptq; returns the seconds it took."""
    import onnxptq

    config = onnxptq.get_preset(preset)
    config = config.replace(calibration=dataclasses.replace(config.calibration, progress=False))
    config = config.replace(runtime=runtime)
    start = time.perf_counter()
    result = onnxptq.quantize(path, config, calib, eval_samples=0)
    seconds = time.perf_counter() - start
    onnx.save(result.model, out)
    return seconds


def onnxruntime_u8s8(path: str, calib: list[dict[str, np.ndarray]], out: str) -> float:
    """onnxruntime's own static quantization: QDQ, U8S8, per-channel weights, MinMax."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.feeds = iter(calib)

        def get_next(self):
            return next(self.feeds, None)

    start = time.perf_counter()
    pre = out + ".pre.onnx"
    # Per-channel DequantizeLinear (its axis attribute) needs opset 13; the PP-OCR models are 11/12.
    model = onnx.load(path)
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    onnx.save(onnx.version_converter.convert_version(model, 13) if opset < 13 else model, pre)
    quant_pre_process(pre, pre, skip_symbolic_shape=True)
    quantize_static(pre, out, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    os.remove(pre)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40, help="timed rounds (each runs every variant once)")
    parser.add_argument("--models", default="rec,cls,minilm")
    parser.add_argument("--presets", default="A8W8,A16W8,U8S8")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--runtime", default="cpu", help="onnxptq target runtime (cpu or npu)")
    parser.add_argument("--extra", default="", help="extra variants: LABEL=PRESET@RUNTIME,...")
    parser.add_argument("--out", default="", help="where to save the models (default: a temp dir)")
    parser.add_argument("--reuse", action="store_true", help="reuse models already saved in --out")
    args = parser.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="onnxptq_latency_")
    os.makedirs(out, exist_ok=True)
    print(f"onnxruntime {ort.__version__}, {os.cpu_count()} cores, median wall ms of {args.runs} rounds; "
          f"load average at start {os.getloadavg()[0]:.2f}\n")
    print("| model | variant | metric | threads | wall ms | × float (wall) | cpu ms | × float (cpu) | target |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    for name in args.models.split(","):
        bench = Bench(name)
        path = bench.path
        variants = {"float": path}
        specs = [(f"onnxptq {p} ({args.runtime})", p, args.runtime) for p in args.presets.split(",") if p]
        for item in filter(None, args.extra.split(",")):
            label, spec = item.split("=")
            preset, runtime = spec.split("@")
            specs.append((label, preset, runtime))
        for label, preset, runtime in specs:
            file = os.path.join(out, f"{name}_{preset}_{runtime}.onnx")
            if not (args.reuse and os.path.exists(file)):
                ours(path, preset, runtime, bench.calib, file)
            variants[label] = file
        file = os.path.join(out, f"{name}_onnxruntime_u8s8.onnx")
        if not (args.reuse and os.path.exists(file)):
            onnxruntime_u8s8(path, bench.single, file)
        variants["onnxruntime quantize_static U8S8 per-channel"] = file
        metric = {k: bench.score(session(f, 2)) for k, f in variants.items()}
        x = bench.feed
        for threads in (int(t) for t in args.threads.split(",")):
            sessions = {k: session(f, threads) for k, f in variants.items()}
            for sess in sessions.values():
                for _ in range(3):
                    sess.run(None, x)
            wall: dict[str, list[float]] = {k: [] for k in sessions}
            cpu: dict[str, list[float]] = {k: [] for k in sessions}
            for _ in range(args.runs):
                for k, sess in sessions.items():
                    start, cpu_start = time.perf_counter(), time.process_time()
                    sess.run(None, x)
                    wall[k].append((time.perf_counter() - start) * 1e3)
                    cpu[k].append((time.process_time() - cpu_start) * 1e3)
            base, base_cpu = statistics.median(wall["float"]), statistics.median(cpu["float"])
            for k in sessions:
                w, c = statistics.median(wall[k]), statistics.median(cpu[k])
                target = f"≤ {TARGETS[name]:g}×" if "A8W8" in k and threads == 1 else ""
                print(f"| {name} | {k} | {bench.label} {metric[k]:.4f} | {threads} | {w:.2f} | {w / base:.2f} | "
                      f"{c:.2f} | {c / base_cpu:.2f} | {target} |", flush=True)
    print(f"\nload average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
