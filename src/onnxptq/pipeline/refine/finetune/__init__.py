"""Fast finetuning (the pipeline's "refine" step): AdaRound and AdaQuant, layer by layer.

``refine(prepared, plan, params, samples, options)`` returns new float values for weight (and
bias) initializers of the prepared model; the caller puts them in place of the old ones and emits
as usual. Layers are visited in graph order. Each one is optimised in torch on inputs taken from
the quantized model *as refined so far* and targets taken from the float model, then kept only if
its reconstruction error on held-out calibration samples went down — so finetuning never makes a
layer worse than plain rounding, on data it did not train on. Per-layer gains do not always add up
end to end, so at the end (``model_check``) the whole model's output error vs float on every kept
calibration sample is compared with plain rounding's, and every refined weight is dropped if it
did not fall (the held-out samples alone were too few to rank two models).

The solved scales and zero points are not changed: the optimisation trains against them
(clipping included), and the values returned reproduce, through emit, exactly the forward pass
that was validated. torch is an optional extra (``pip install onnxptq[finetune]``).
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import numpy as np
import onnx

from ....config.schema import FinetuneOptions
from ....graph.external import tensor_values
from ...plan import Plan

log = logging.getLogger(__name__)

__all__ = ["LayerResult", "ieee_fp32", "refine", "require_torch", "torch_device"]


def require_torch() -> Any:
    """Import torch, or raise an ImportError that says how to install it."""
    try:
        import torch
    except ImportError as exc:
        raise ImportError(
            "fast finetuning (AdaRound / AdaQuant) needs torch: pip install onnxptq[finetune] "
            "(the CPU build is enough)"
        ) from exc
    return torch


def torch_device(spec: str) -> Any:
    """The torch device for OptimDevice ``spec``: 'cpu', 'cuda', 'cuda:N' or 'hip:N'.

    'hip:N' is the ROCm build's GPU N (ROCm torch calls it 'cuda:N'). A GPU that torch cannot see
    is an error, never a silent run on the CPU. 'cuda:N,M' (the reference tool's DataParallel)
    uses GPU N only.
    """
    torch = require_torch()
    spec = str(spec).strip().lower()
    if spec == "cpu":
        return torch.device("cpu")
    kind, _, ids = spec.partition(":")
    index = int(ids.split(",")[0]) if ids else 0
    if "," in ids:
        log.warning("finetune: device %r: several GPUs are not supported; using %s:%d only", spec, kind, index)
    if kind == "hip" and not getattr(torch.version, "hip", None):
        raise RuntimeError(f"finetune device {spec!r} needs the ROCm build of torch; this torch ({torch.__version__}) "
                           "has no HIP support (torch.version.hip is None)")
    if kind == "cuda" and getattr(torch.version, "hip", None):
        log.info("finetune: %r runs on the ROCm GPU %d", spec, index)
    if kind not in ("cuda", "hip"):
        raise ValueError(f"finetune device must be 'cpu', 'cuda:N' or 'hip:N', not {spec!r}")
    if not torch.cuda.is_available():
        raise RuntimeError(f"finetune device {spec!r}: torch sees no GPU (torch {torch.__version__}, "
                           f"cuda available: False); use 'cpu' or install a GPU build of torch")
    if index >= torch.cuda.device_count():
        raise RuntimeError(f"finetune device {spec!r}: torch sees only {torch.cuda.device_count()} GPU(s)")
    return torch.device(f"cuda:{index}")


#: Bytes of layer data one pass of a model may fetch ahead (per model: quantized inputs, float targets).
FETCH_BUDGET = 256 * 2**20

#: torch CPU threads while optimising. The per-layer problems are small (a batch of 2 through one
#: convolution), so threads mostly synchronise: on the 2-core CI machine one thread ran a depthwise
#: conv step 4-30x faster than two under load, and no slower idle.
TORCH_THREADS = 1


def _to_torch(a: np.ndarray | None, device: Any, channels_last: bool = False) -> Any:
    """float32 torch tensor on ``device``; 4-D activations channels-last (2x faster depthwise convs)."""
    import torch

    if a is None:
        return None
    t = torch.from_numpy(np.array(a, dtype=np.float32, copy=True)).to(device)
    if channels_last and t.dim() == 4:
        t = t.contiguous(memory_format=torch.channels_last)
    return t


@dataclass
class LayerResult:
    """What the refine step did to one layer: held-out reconstruction error before and after.

    ``kept``: the layer's new weights are in the result. ``skipped``: why the layer was not
    optimised (then ``after == before``). ``dropped``: why weights that passed the per-layer check
    were dropped afterwards (the model check); ``kept`` is then False.
    """

    layer: str
    op_type: str
    before: float
    after: float
    kept: bool
    seconds: float
    skipped: str | None = None
    dropped: str | None = None


@contextlib.contextmanager
def ieee_fp32(torch: Any) -> Iterator[None]:
    """Full float32 products in cuDNN convolutions, RNNs and CUDA matmuls while finetuning runs.

    torch lets cuDNN convolutions compute float32 in TF32 by default (10-bit mantissa). AdaRound
    and AdaQuant rank rounding choices whose effect is a fraction of one int8 step, and they judge
    each layer by a reconstruction error: in TF32 that error is noise at the size of the decision.
    On an H100 an A8W8 + AdaRound PP-OCR cls run on ``cuda:0`` kept nothing ("the refined layers
    did not lower the model's output error") where the same run on the CPU kept its layers. The
    caller's settings are restored on exit. torch < 2.9 spells the switches ``allow_tf32``.
    """
    backends = torch.backends
    owners = [o for o in (backends.cuda.matmul, getattr(backends.cudnn, "conv", None), getattr(backends.cudnn, "rnn", None))
              if o is not None and hasattr(o, "fp32_precision")]
    knobs = [(o, "fp32_precision", "ieee") for o in owners] or [
        (backends.cuda.matmul, "allow_tf32", False), (backends.cudnn, "allow_tf32", False)]
    saved = [(owner, attr, getattr(owner, attr)) for owner, attr, _ in knobs]
    try:
        for owner, attr, value in knobs:
            setattr(owner, attr, value)
        yield
    finally:
        for owner, attr, value in saved:
            setattr(owner, attr, value)


def refine(
    prepared: onnx.ModelProto,
    plan: Plan,
    params: dict[str, Any],
    samples: Sequence[dict[str, np.ndarray]],
    options: FinetuneOptions,
    *,
    report: list[LayerResult] | None = None,
) -> dict[str, np.ndarray]:
    """New float values for the weights (and biases) of the layers finetuning improved.

    ``prepared``/``plan``/``params`` are the pipeline's; ``samples`` the kept calibration feeds
    (at most ``options.data_size`` of them are used). ``report``, when given, receives one
    :class:`LayerResult` per layer considered. Runs in IEEE float32 on every device
    (:func:`ieee_fp32`).
    """
    torch = require_torch()
    with ieee_fp32(torch):
        return _refine(torch, prepared, plan, params, samples, options, report)


def _refine(torch: Any, prepared: onnx.ModelProto, plan: Plan, params: dict[str, Any],
            samples: Sequence[dict[str, np.ndarray]], options: FinetuneOptions,
            report: list[LayerResult] | None) -> dict[str, np.ndarray]:
    """:func:`refine`'s body, run inside :func:`ieee_fp32`."""
    from ...emit import emit, quantizer_attrs
    from ....formats import fake_quantize
    from . import adaquant, adaround, extract
    from .layer import channel_dim, make_forward
    from .train import Problem, Quantizer

    device = torch_device(options.optim_device)
    providers = extract.providers_for(options.infer_device)
    samples = list(samples)[: options.max_samples]
    if not samples:
        raise ValueError("fast finetuning needs calibration samples; none were kept")
    seed = options.fixed_seed
    if seed is not None:
        random.seed(seed)
        np.random.seed(seed % 2**32)
        torch.manual_seed(seed)
    base_seed = seed if seed is not None else 0

    layers = extract.find_layers(prepared, plan, options.target_op_types)
    if options.algorithm == "adaround":
        integer_layers = [l for l in layers if plan.tensors[l.weight].quant.is_integer]
        if len(integer_layers) < len(layers):
            log.warning("finetune: AdaRound learns integer rounding; %d layer(s) with non-integer weights are left as they are "
                        "(use AdaQuant for them)", len(layers) - len(integer_layers))
        layers = integer_layers
    if not layers:
        log.warning("finetune: no layer to optimise (op types %s with a quantized constant weight)", ", ".join(options.target_op_types))
        return {}

    inits = {t.name: tensor_values(t) for t in prepared.graph.initializer}

    def quantizer(name: str | None) -> Quantizer | None:
        if name is None or name not in plan.tensors:
            return None
        tplan = plan.tensors[name]
        attrs = quantizer_attrs(tplan, params.get(name))
        torch_attrs = {k: (torch.from_numpy(np.asarray(v).astype(np.int64 if k == "zero_point" and tplan.quant.is_integer else np.float32)).to(device)
                           if isinstance(v, np.ndarray) else v) for k, v in attrs.items()}
        return Quantizer(tplan.quant.format, torch_attrs)

    def feed_value(name: str, value: np.ndarray) -> np.ndarray:
        """What the emitted model computes for a constant: its fake quantization (or itself, unquantized)."""
        if name not in plan.tensors:
            return value.astype(np.float32)
        return np.asarray(fake_quantize(value, plan.tensors[name].quant.format, **quantizer_attrs(plan.tensors[name], params.get(name))),
                          dtype=np.float32)

    # The probe: the quantized model with layer weights as inputs and layer inputs as outputs.
    quantized = emit(prepared, plan, params)
    # The model's outputs (OutputIndex: that one only) are watched for SelectiveUpdate (per layer)
    # and for the model check (after the last layer).
    watched = [o.name for o in prepared.graph.output] if options.selective_update or options.model_check else []
    if watched and options.output_index is not None:
        watched = [watched[int(options.output_index)]]
    probe, reads = extract.build_probe(quantized, layers, keep_outputs=watched)
    qrun = extract.Runner(probe, providers) if len(probe.graph.output) else None
    float_names = [l.output for l in layers] + ([l.input for l in layers] if options.drop_ratio < 1.0 else []) + watched
    frun = extract.Runner(extract.float_probe(prepared, float_names), providers)
    weight_feeds: dict[str, np.ndarray] = {}
    for layer in layers:
        weight_feeds[extract.WEIGHT_INPUT.format(layer.name)] = feed_value(layer.weight, inits[layer.weight])
        if layer.bias is not None:
            weight_feeds[extract.BIAS_INPUT.format(layer.name)] = feed_value(layer.bias, inits[layer.bias])

    n_rows_hint = len(samples)
    holdout = max(1, int(round(options.holdout_fraction * n_rows_hint))) if n_rows_hint > 1 and options.holdout_fraction > 0 else 0
    log.info("finetune: %s on %d layer(s), %d sample(s) (%d held out), %d iterations, batch %d, lr %g, device %s",
             options.algorithm, len(layers), len(samples), holdout, options.num_iterations, options.batch_size,
             options.lr, device)
    algorithm = adaround.optimise if options.algorithm == "adaround" else adaquant.optimise
    # SelectiveUpdate: a layer is also kept only if the whole model's outputs on the held-out
    # samples (without one, every sample) got closer to float (per-layer gains do not always add
    # up). The model check (output_errors, after the last layer) uses every kept sample.
    check = samples[len(samples) - holdout:] if holdout else samples
    float_final = frun.fetch_many(watched, check) if options.selective_update else {}

    def model_error(feeds: dict[str, np.ndarray]) -> float:
        out = qrun.fetch_many(watched, check, feeds)
        return sum(float(np.mean((out[n] - float_final[n]) ** 2)) for n in watched)

    def output_errors(feed_sets: Sequence[dict[str, np.ndarray]], chunk: int = 16) -> list[float]:
        """The model's output error vs float on *every* kept sample, for each set of weights.

        Why every sample: the held-out ones are few (16 of 64 by default) and often the easy ones:
        on PP-OCR cls their output MSE was ~1e-6 against ~1e-3 on the others, too small to rank
        two models, while all 64 ranked them as 200 test lines did. Streamed in chunks, so the
        float outputs are never all held at once.
        """
        sq = [dict.fromkeys(watched, 0.0) for _ in feed_sets]
        count = dict.fromkeys(watched, 0)
        for start in range(0, len(samples), chunk):
            part = samples[start : start + chunk]
            ref = frun.fetch_many(watched, part)
            for n in watched:
                count[n] += ref[n].size
            for errs, feeds in zip(sq, feed_sets):
                out = qrun.fetch_many(watched, part, feeds)
                for n in watched:
                    errs[n] += float(np.sum((out[n].astype(np.float64) - ref[n]) ** 2))
        return [sum(errs[n] / max(count[n], 1) for n in watched) for errs in sq]

    current = model_error(weight_feeds) if options.selective_update else 0.0
    plain_feeds = dict(weight_feeds)
    # Layer data, fetched ahead: one pass of each model fills every layer that fits the memory
    # budget. The float targets never change; the quantized inputs are fetched again only after a
    # layer's new weights were kept (a reverted layer leaves the model as it was). Parallel: all
    # quantized inputs come from the model before any update (the reference tool's option).
    q_order = [reads[l.name] for l in layers if reads[l.name] not in samples[0]]
    f_order = [n for l in layers for n in ([l.output] + ([l.input] if options.drop_ratio < 1.0 and l.input not in samples[0] else []))]
    qcache = extract.Prefetch(qrun, q_order, samples, FETCH_BUDGET, weight_feeds) if qrun is not None and q_order else None
    fcache = extract.Prefetch(frun, f_order, samples, FETCH_BUDGET)
    threads = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(TORCH_THREADS)
    try:
        result: dict[str, np.ndarray] = {}
        first_entry = len(report) if report is not None else 0
        t_all = time.perf_counter()
        improved = 0
        for i, layer in enumerate(layers, 1):
            t0 = time.perf_counter()
            read = reads[layer.name]
            later = layers[i:]
            if read in samples[0]:  # the layer reads a graph input directly
                x_q = np.concatenate([s[read] for s in samples], axis=0)
            else:
                x_q = qcache.get(read, q_order.index(read))
            y_f = fcache.get(layer.output, f_order.index(layer.output))
            if options.drop_ratio < 1.0:
                x_f = (np.concatenate([s[layer.input] for s in samples], axis=0) if layer.input in samples[0]
                       else fcache.get(layer.input, f_order.index(layer.input)))
            else:
                x_f = None
            fcache.release([n for l in later for n in (l.output, l.input)])
            if qcache is not None:
                qcache.release([reads[l.name] for l in later])
            # Rows: samples × their batch; the held-out rows are the last samples' rows.
            rows_per_sample = x_q.shape[0] // len(samples)
            split = x_q.shape[0] - holdout * rows_per_sample if holdout else x_q.shape[0]

            xq, yf, xf = (_to_torch(a, device, channels_last=layer.op_type in ("Conv", "ConvTranspose")) for a in (x_q, y_f, x_f))
            wq, bq = quantizer(layer.weight), quantizer(layer.bias)
            problem = Problem(
                layer=layer, forward=make_forward(layer), channel_dim=channel_dim(layer),
                x=xq[:split], y=yf[:split], x_float=None if xf is None else xf[:split],
                weight=_to_torch(inits[layer.weight], device), bias=_to_torch(inits[layer.bias], device) if layer.bias else None,
                weight_q=wq, bias_q=bq,
            )
            val_x, val_y = (xq[split:], yf[split:]) if holdout else (xq, yf)

            def error(w: Any, b: Any) -> float:
                with torch.no_grad():
                    return float((problem.forward(val_x, w, b) - val_y).pow(2).sum(dim=problem.channel_dim).mean())

            before = error(wq(problem.weight), problem.bias_value())
            try:
                # Each layer draws its batches from its own stream: a layer that stops early (early stop,
                # every rounding decided) leaves the later layers' batches as they were.
                gen = torch.Generator().manual_seed(base_seed + i)
                new_w, new_b = algorithm(problem, options, gen)
            except (RuntimeError, ValueError) as exc:  # one layer's failure (e.g. out of memory) skips that layer
                log.warning("finetune: layer %s skipped: %s", layer.name, exc)
                if report is not None:
                    report.append(LayerResult(layer.name, layer.op_type, before, before, False, time.perf_counter() - t0, str(exc)))
                continue
            b_eval = bq(_to_torch(new_b, device)) if new_b is not None else problem.bias_value()
            after = error(wq(_to_torch(new_w, device)), b_eval)
            kept = after < before
            trial = dict(weight_feeds)
            trial[extract.WEIGHT_INPUT.format(layer.name)] = feed_value(layer.weight, new_w)
            if new_b is not None:
                trial[extract.BIAS_INPUT.format(layer.name)] = feed_value(layer.bias, new_b)
            if kept and options.selective_update:
                candidate = model_error(trial)
                log.debug("finetune %s: model output error %.4g -> %.4g", layer.name, current, candidate)
                kept = candidate < current
                current = candidate if kept else current
            if kept:
                improved += 1
                weight_feeds = trial
                if qcache is not None and not options.parallel:
                    qcache.refeed(weight_feeds)
                result[layer.weight] = new_w
                if new_b is not None:
                    result[layer.bias] = new_b
            seconds = time.perf_counter() - t0
            log.info("finetune [%d/%d] %s (%s): held-out error %.4g -> %.4g, %s (%.2fs)", i, len(layers), layer.name,
                     layer.op_type, before, after, "kept" if kept else "reverted to plain rounding", seconds)
            if report is not None:
                report.append(LayerResult(layer.name, layer.op_type, before, after, kept, seconds))
        log.info("finetune: %d of %d layer(s) improved in %.1fs (%d + %d passes of the quantized and float models)", improved,
                 len(layers), time.perf_counter() - t_all, qcache.passes if qcache is not None else 0, fcache.passes)
        if result and options.model_check:
            plain_error, refined_error = output_errors([plain_feeds, weight_feeds])
            if not refined_error < plain_error:
                why = (f"model check: the refined layers did not lower the model's output error vs float on the "
                       f"{len(samples)} sample(s) ({plain_error:.4g} -> {refined_error:.4g})")
                log.warning("finetune: %s; keeping plain rounding for every layer", why)
                if report is not None:
                    for entry in report[first_entry:]:
                        if entry.kept:
                            entry.kept, entry.dropped = False, why
                return {}
            log.info("finetune: model output error vs float on the %d sample(s) %.4g -> %.4g", len(samples), plain_error,
                     refined_error)
        return result
    finally:
        torch.set_num_threads(threads)
