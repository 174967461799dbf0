"""``quantize_weights(model, output, *, bits, block_size, method, data, ...)``: the weight-only pipeline.

load → plan → (calibrate: streamed Hessians, for GPTQ/AWQ/mixed) → solve (one method per module)
→ emit (blocked DequantizeLinear or MatMulNBits) → save (atomic, external data when large) → check
(a session of stock onnxruntime on the result; with data, its outputs against the float model's).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from .. import outputs
from ..graph import io
from . import calibrate, emit, plan as planning, solve as solving
from .threads import blas_threads
from .options import NEEDS_DATA, WeightOnlyOptions, WeightOnlyOptionError, preset as preset_settings

log = logging.getLogger(__name__)

__all__ = ["WeightOnlyResult", "quantize_weights"]


@dataclass
class WeightOnlyResult:
    """The quantized model and what was done to it."""

    model: onnx.ModelProto
    output_path: Path | None
    options: WeightOnlyOptions
    layers: list[solving.LayerReport]
    skipped: dict[str, str]
    awq_skipped: dict[str, str]
    timings: dict[str, float] = field(default_factory=dict)

    def summary(self) -> str:
        """A readable table: one line per weight, then what was skipped, the output error, timings."""
        o = self.options
        lines = [f"weight-only {o.method} {o.fmt.label()} form={o.form} lm_head={o.lm_head}"
                 + (f" mixed={o.mixed}" if o.mixed else "")]
        lines.append(f"{'layer':40s} {'role':9s} {'K x N':>13s} {'format':16s} {'method':8s} {'w.err':>7s} {'out.err':>7s}  note")
        for r in self.layers:
            we = "-" if r.weight_error is None else f"{r.weight_error:.4f}"
            oe = "-" if r.output_error is None else f"{r.output_error:.4f}"
            lines.append(f"{r.name[:40]:40s} {r.role:9s} {f'{r.k}x{r.n}':>13s} {r.format:16s} {r.method:8s} {we:>7s} {oe:>7s}  {r.note}")
        for name, why in {**self.skipped, **{f"AWQ {k}": v for k, v in self.awq_skipped.items()}}.items():
            lines.append(f"skipped {name}: {why}")
        lines.append("timings: " + ", ".join(f"{k} {v:.2f} s" for k, v in self.timings.items()))
        return "\n".join(lines)


def _name_nodes(model: onnx.ModelProto) -> None:
    """Give every unnamed node of the main graph a unique name (sites are found by node name)."""
    used = {n.name for n in model.graph.node if n.name}
    for i, node in enumerate(model.graph.node):
        if not node.name:
            name = f"{node.op_type}_{i}"
            while name in used:
                name += "_"
            node.name = name
            used.add(name)


def _external_length(tensor: onnx.TensorProto) -> int:
    entries = {e.key: e.value for e in tensor.external_data}
    try:
        return int(entries.get("length", 1 << 62))
    except ValueError:
        return 1 << 62


def _read_external(proto: onnx.ModelProto, folder: Path, below: int | None = None) -> None:
    """Read external tensors of ``proto`` (those under ``below`` bytes, or all) into the message."""
    from onnx.external_data_helper import load_external_data_for_tensor

    from ..graph import external

    for tensor in external.all_tensors(proto):
        if external.is_external(tensor) and (below is None or _external_length(tensor) < below):
            load_external_data_for_tensor(tensor, str(folder))
            tensor.data_location = onnx.TensorProto.DEFAULT
            del tensor.external_data[:]


def _load(model: io.ModelLike) -> tuple[onnx.ModelProto, Path | None]:
    """The model and, for a file with external data, the folder its weights stay in.

    Such a model is loaded without its large tensors (small ones — shapes, axes, norm vectors —
    are read: onnxruntime's shape inference needs them inline): each weight is read from the file
    when its layer is solved (a memory map), calibration runs onnxruntime on the file, and only
    what is left float at the end is read in. Peak memory is then about one layer's weights plus
    the quantized output, which is how a model past 2 GB quantizes.
    """
    from ..graph import external

    if isinstance(model, (str, os.PathLike)) and Path(model).is_file():
        light = io.load_model(model, load_external_data=False)
        if external.has_external(light):
            folder = Path(model).resolve().parent
            _read_external(light, folder, below=1 << 16)
            return light, folder
        return light, None
    return io.load_model(model), None


#: Calibration statistics may take this share of the planned weights' fp32 bytes (at least
#: :data:`MIN_CALIBRATION_BYTES`) before calibration is split into passes: with onnxruntime's copy
#: of the weights (at most 1x during a pass) that keeps the peak near the 1.5x the issue set.
CALIBRATION_SHARE = 0.25
MIN_CALIBRATION_BYTES = 512 << 20


def calibration_budget(plan: planning.WeightPlan, calib_memory: int | None = None) -> int:
    """Bytes the Hessians of one calibration pass may take (``calib_memory`` when given)."""
    if calib_memory is not None:
        return int(calib_memory)
    weights = sum(4 * s.k * s.n for s in plan.sites)
    return max(int(CALIBRATION_SHARE * weights), MIN_CALIBRATION_BYTES)


def quantize_weights(
    model: io.ModelLike,
    output: str | os.PathLike | None = None,
    *,
    bits: int | None = None,
    block_size: int | None = None,
    symmetric: bool | None = None,
    method: str | None = None,
    data: Any = None,
    lm_head: str = "int8",
    embedding: bool = False,
    form: str = "dq",
    mixed: float | None = None,
    accuracy_level: int | None = None,
    act_order: bool = True,
    damp: float = 0.01,
    calib_feeds: int | None = None,
    calib_memory: int | None = None,
    exclude: tuple[str, ...] | list[str] = (),
    preset: str | None = None,
    external_data: bool | None = None,
    progress: bool = True,
) -> WeightOnlyResult:
    """Quantize the weights of ``model``'s MatMul/Gemm (and opt-in Gather) layers to integer blocks.

    Args:
        model: a path or a ModelProto (external data is read with it).
        output: where to write the result (atomically; never the input); None keeps it in memory.
        bits: 4 (default), 8, or 2/3 (stored in 4-bit integers).
        block_size: 16..256, a power of two (default 128); any K works, the last block is padded.
        symmetric: no zero point (int4/int8, default) or a zero point per block (uint4/uint8).
        method: "rtn" (default), "hqq" (data-free scale/zero optimisation), "gptq" or "awq" (need data).
        data: calibration feeds (dicts of token ids, a ``get_next()`` reader, or any source
            :func:`onnxptq.quantize` takes); KV-cache inputs may be left out (an empty past is fed).
        lm_head: "int8" (default; measured in docs/weight_only.md), "int4" or "float".
        embedding: also quantize an untied embedding table (a tied one follows the lm_head).
        form: "dq" (opset-21 DequantizeLinear + MatMul for the body; an embedding table and the tied
            lm_head as com.microsoft GatherBlockQuantized / MatMulNBits, which onnxruntime runs fused),
            "dq-strict" (standard ops only, for other runtimes) or "matmulnbits" (all com.microsoft).
        mixed: share of the linear layers kept at 8 bits, chosen by sensitivity (output error).
        accuracy_level: MatMulNBits' accuracy_level attribute (form="matmulnbits"; in form "dq" the
            table's MatMulNBits, 4 when unset: see docs/weight_only.md); for the DQ body
            onnxruntime takes it from the session entry ``session.qdq_matmulnbits_accuracy_level``.
        act_order, damp: GPTQ's activation order (default on: the most-used input channels first, with
            block parameters from the unmodified weight; measured in docs/weight_only.md) and damping
            (fraction of the mean Hessian diagonal).
        calib_feeds: read at most this many feeds.
        calib_memory: bytes the calibration statistics (one float64 ``K x K`` Hessian per distinct
            layer input) may take at once; past it calibration runs in several passes, each for a
            chunk of layers whose Hessians fit, solved and dropped before the next (default: a
            quarter of the planned weights' fp32 bytes, at least 512 MiB).
        exclude: node names left float.
        preset: "W4A16", "W8A16", "W4A16_GPTQ", "W4A16_AWQ", "W4A16_HQQ", "W3A16_GPTQ": defaults
            for bits/block_size/symmetric/method (explicit arguments win).
        external_data: write tensors to ``<output>.data`` (default: only past protobuf's 2 GB).
    """
    times: dict[str, float] = {}
    start = time.perf_counter()
    base = preset_settings(preset) if preset is not None else {}
    given = {"bits": bits, "block_size": block_size, "symmetric": symmetric, "method": method}
    settings = {**{"bits": 4, "block_size": 128, "symmetric": True, "method": "rtn"}, **base,
                **{k: v for k, v in given.items() if v is not None}}
    opts = WeightOnlyOptions(lm_head=lm_head, embedding=embedding, form=form, mixed=mixed, accuracy_level=accuracy_level,
                             act_order=act_order, damp=damp, calib_feeds=calib_feeds, calib_memory=calib_memory, exclude=tuple(exclude),
                             progress=progress, **settings).check(has_data=data is not None)
    if output is not None:
        outputs.check_io({"output": output}, models={"the input model": model},
                         data={"the calibration data": data} if data is not None and isinstance(data, (str, os.PathLike)) else {})
    proto, folder = _load(model)
    _name_nodes(proto)
    times["load"] = time.perf_counter() - start
    from ..graph import external

    with external.streaming(folder) if folder is not None else contextlib.nullcontext():
        t = time.perf_counter()
        weight_plan = planning.make_plan(proto, embedding=embedding, exclude=tuple(exclude))
        if not weight_plan.sites:
            raise WeightOnlyOptionError("the model has no MatMul/Gemm with a constant 2-D float32 weight to quantize "
                                        "(float16 models: convert to float32 first)")
        times["plan"] = time.perf_counter() - t
        stats = None
        with blas_threads(1):
            chunks: list[list[str]] = []
            if data is not None and (opts.method in NEEDS_DATA or opts.mixed):
                widths = {s.activation: s.k for s in weight_plan.sites if s.activation is not None}
                budget = calibration_budget(weight_plan, opts.calib_memory)
                chunks = calibrate.chunk_inputs(widths, budget)
            if len(chunks) == 1:
                t = time.perf_counter()
                stats = calibrate.collect(proto, chunks[0], data, max_feeds=calib_feeds, progress=progress)
                times["calibrate"] = time.perf_counter() - t
            t = time.perf_counter()
            if len(chunks) > 1:
                feeds = calibrate.replayable(data, proto, calib_feeds)
                log.info("weight-only calibration in %d passes (the statistics of every layer at once would "
                         "exceed %.0f MiB)", len(chunks), budget / 2**20)
                solution = solving.solve_in_chunks(
                    proto, weight_plan, opts, lambda tensors: calibrate.collect(proto, tensors, feeds, progress=False), chunks)
                times["calibrate+solve"] = time.perf_counter() - t
            else:
                solution = solving.solve(proto, weight_plan, opts, stats)
                times["solve"] = time.perf_counter() - t
        t = time.perf_counter()
        result_model = emit.emit(proto, weight_plan, solution.solved, solution.vectors, form=opts.form,
                                 accuracy_level=accuracy_level)
        solution.solved.clear()  # the integers now live in the model's tensors
        if folder is not None:  # what stayed float comes in from the input's file: the result stands alone
            _read_external(result_model, folder)
        times["emit"] = time.perf_counter() - t
    path = None
    if output is not None:
        t = time.perf_counter()
        path = io.save_model(result_model, output, external_data=external_data)
        times["save"] = time.perf_counter() - t
    times["total"] = time.perf_counter() - start
    result = WeightOnlyResult(result_model, path, opts, solution.reports, weight_plan.skipped, solution.awq_skipped, times)
    log.info("weight-only quantization done in %.2f s", times["total"])
    return result


def output_error(float_model: io.ModelLike, quantized: io.ModelLike, feeds: list[dict[str, np.ndarray]],
                 *, accuracy_level: int | None = 1) -> dict[str, float]:
    """Relative L2 error of each output of ``quantized`` against ``float_model`` on ``feeds``.

    ``accuracy_level`` sets ``session.qdq_matmulnbits_accuracy_level`` on the quantized session
    (1: float32 compute, the weights' error alone; None: onnxruntime's default, int8 activations).
    """
    from ..sessions import open_session
    from . import runtime

    ref = open_session(float_model)
    q = runtime.session(quantized, accuracy_level=accuracy_level)
    names = [o.name for o in ref.get_outputs()]
    num = dict.fromkeys(names, 0.0)
    den = dict.fromkeys(names, 0.0)
    for feed in feeds:
        fi = {i.name for i in ref.get_inputs()}
        a = ref.run(names, {k: v for k, v in feed.items() if k in fi})
        b = q.run(names, {k: v for k, v in feed.items() if k in fi})
        for n, x, y in zip(names, a, b):
            num[n] += float(np.sum((x.astype(np.float64) - y) ** 2))
            den[n] += float(np.sum(x.astype(np.float64) ** 2))
    return {n: float(np.sqrt(num[n] / (den[n] or 1.0))) for n in names}
