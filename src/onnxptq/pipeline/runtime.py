"""What each target runtime runs in integers: the facts the planner lays integer quantizers out by.

Two targets (:attr:`onnxptq.config.schema.QuantConfig.runtime`):

* ``"npu"``: hardware that runs every quantizable op on integers and requantizes per channel for
  free. Every op of the quantizable set gets Q/DQ, signedness is the preset's, and per-channel
  activation scales into depthwise convolutions are allowed (they fold into the weights).
* ``"cpu"``: onnxruntime's CPU execution provider. A Q/DQ pair only pays for itself where
  onnxruntime's QDQ fusion turns the node it surrounds into an integer kernel; everywhere else
  it is a float → int → float round trip that costs time and accuracy. On x86 without VNNI the
  integer kernels are fast for uint8 activations and int8 weights (U8S8) and slow for S8S8, and
  QLinearConv / QLinearAdd / QLinearMul take one scalar scale per activation.

The tables here mirror onnxruntime's QDQ selectors (``qdq_selector_action_transformer.cc``,
onnxruntime 1.17–1.32): which ops fuse into an integer kernel when their data inputs come from
DequantizeLinear and their output goes to QuantizeLinear, and which data-movement ops onnxruntime
runs on the integer values when the Q/DQ around them carry equal parameters.
"""

from __future__ import annotations

import functools
import logging
from typing import Sequence

import onnx

from ..analysis.runtime_view import DATA_MOVEMENT as RUNS_ON_INTEGERS_WHEN_INPUT_IS
from ..config.schema import QuantConfig, TensorQuant

log = logging.getLogger(__name__)

#: Ops onnxruntime's CPU provider fuses into an integer kernel: QLinearConv, QLinearMatMul /
#: MatMulIntegerToFloat, QGemm, QLinearAdd, QLinearMul, QLinearConcat, QLinearAveragePool,
#: QLinearGlobalAveragePool, QLinearLeakyRelu, QLinearSigmoid, QLinearSoftmax, QLinearWhere.
CPU_INTEGER_OPS = frozenset(
    "Conv MatMul Gemm Add Mul Concat AveragePool GlobalAveragePool LeakyRelu Sigmoid Softmax Where".split()
)
#: The integer kernels that pay for the QuantizeLinear/DequantizeLinear around them on their own;
#: the other CPU_INTEGER_OPS are cheap in float and are worth it only next to an integer neighbour.
CPU_MATRIX_OPS = frozenset({"Conv", "MatMul", "Gemm"})
#: Read through DequantizeLinear only (integer input, index output).
CPU_DQ_ONLY = frozenset({"ArgMax"})
#: Ops onnxruntime runs on the integer values when the Q before and after carry equal scale and
#: zero point (its "drop Q/DQ" rules; Split is rewritten to quantized outputs): their output shares
#: the input's parameters. One list with the reader of onnxruntime's optimised graph
#: (:mod:`onnxptq.analysis.runtime_view`), so the plan and the report cannot disagree on it.
CPU_DATA_MOVEMENT = RUNS_ON_INTEGERS_WHEN_INPUT_IS - CPU_DQ_ONLY
#: Activations onnxruntime removes in front of a QuantizeLinear whose range they do not cut
#: (ReluQuantFusion, ClipQuantFusion), so the producer keeps its fused integer kernel. LeakyRelu,
#: PRelu and HardSwish are not removed: a quantizer between producer and activation is needed,
#: else the producer stays float.
CPU_FUSED_ACTIVATIONS = frozenset({"Relu", "Clip"})

#: Every op the CPU target selects for integer quantization by default.
CPU_OP_TYPES = CPU_INTEGER_OPS | CPU_DATA_MOVEMENT | CPU_DQ_ONLY | CPU_FUSED_ACTIVATIONS


def float_conv_reason(node: onnx.NodeProto, weight_dims: Sequence[int] | None) -> str | None:
    """Why the CPU target leaves the Conv ``node`` float although QLinearConv could run it, or None.

    Measured per layer with onnxruntime's profiler (onnxruntime 1.32, x86 AVX2 without VNNI, one
    thread, bench/RESULTS.md "Kernels onnxruntime runs slower in integers"):

    * depthwise convolutions: MLAS's uint8 depthwise kernel took 2–6× the time of the float
      blocked kernel on every depthwise layer of PP-OCR cls and rec (3×3 and 5×5, stride 1 and 2).
      Integer depthwise also costs accuracy on this target, because QLinearConv takes one scalar
      input scale while depthwise inputs differ in range per channel (rec CER 0.052 → 0.049 with
      the 5×5 depthwise layers float).

    Image stems (:func:`is_image_stem`) are slower in integers too; the planner leaves them float
    where no integer reader needs their output quantized (``plan._drop_isolated_cpu_nodes``).

    Where such a Conv sits between a DequantizeLinear and a QuantizeLinear anyway (fed and read by
    integer ops), onnxruntime 1.32 quantizes its float weight itself and runs QLinearConv: the
    planner then keeps it integer with its own per-channel weights (onnxruntime's were worse on
    PP-OCR cls: 1000 lines, top-1 0.938 against 0.946, see bench/RESULTS.md).
    """
    if node.op_type != "Conv" or weight_dims is None or len(weight_dims) < 3:
        return None
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    group = int(attrs.get("group", 1))
    out_channels, in_per_group = int(weight_dims[0]), int(weight_dims[1])
    # Any channel multiplier counts here (onnxruntime's depthwise kernel path is chosen by the input
    # channels per group); plan._is_depthwise asks for exactly one output per group instead, because
    # it decides per-channel activation scales, which only a multiplier of 1 can fold. Different on
    # purpose: do not merge the two.
    if group > 1 and in_per_group == 1 and out_channels % group == 0:
        return "runtime cpu: depthwise convolutions run faster in float on onnxruntime's CPU provider"
    return None


#: A convolution over at most this many input channels (RGB or gray images) is an image stem.
CPU_STEM_MAX_CHANNELS = 4


def is_image_stem(node: onnx.NodeProto, weight_dims: Sequence[int] | None) -> bool:
    """Whether the Conv ``node`` is an image stem: a spatial kernel over ≤ 4 input channels.

    Its integer GEMM has an inner dimension C·kh·kw ≤ 36, too short for MLAS's uint8 kernels to
    pay for the requantization (PP-OCR cls stem: 120 µs as QLinearConv, 43 µs float). Its output
    is also the widest-ranged raw tensor of the network (no activation yet): PP-OCRv4 rec feeds it
    to a depthwise convolution, and its uint8 quantizer alone took rec A8W8 from CER 0.038 to 0.055.
    """
    if node.op_type != "Conv" or weight_dims is None or len(weight_dims) < 3:
        return False
    group = next((int(onnx.helper.get_attribute_value(a)) for a in node.attribute if a.name == "group"), 1)
    return group == 1 and int(weight_dims[1]) <= CPU_STEM_MAX_CHANNELS and any(int(k) > 1 for k in weight_dims[2:])


def is_cpu(config: QuantConfig) -> bool:
    """Whether ``config`` targets onnxruntime's CPU execution provider."""
    return config.runtime == "cpu"


def integer_placement(config: QuantConfig, activation: TensorQuant | None) -> bool:
    """Whether the CPU integer placement governs a node whose activations are ``activation``.

    Only integer activations are laid out by kernel availability; float formats (BF16, BFP, MX)
    have no integer kernels to aim at and are placed as on every target.
    """
    return is_cpu(config) and activation is not None and activation.is_integer


def has_integer_kernels(activation: TensorQuant | None) -> bool:
    """Whether onnxruntime's CPU provider has integer kernels for these activations: 8-bit only
    (QLinearConv, QLinearMatMul, ... take uint8/int8; 16-bit Q/DQ models run float in between)."""
    return activation is not None and activation.format in ("int8", "uint8")


def cpu_activation(quant: TensorQuant) -> TensorQuant:
    """The activation format the CPU target uses for ``quant``: 8-bit activations become uint8.

    onnxruntime's AVX2/AVX512 integer GEMMs take uint8 activations (U8S8, U8U8); with int8
    activations QLinearConv and QLinearMatMul run a slower S8S8 path (PP-OCRv4 rec: 49 ms vs
    12.5 ms for onnxruntime's own models). An asymmetric int8 grid and the asymmetric uint8 grid
    over the same range hold the same values (only the zero point moves), so accuracy is
    unchanged; a symmetric int8 grid becomes the symmetric uint8 grid (zero point 128, 255 steps
    over [-max, max] instead of 254).
    """
    if quant.format == "int8":
        return quant.with_(format="uint8")
    return quant


def cpu_constant(activation: TensorQuant) -> TensorQuant:
    """The format of an elementwise op's constant operand (Add/Mul) on the CPU target.

    QLinearAdd and QLinearMul take both operands in the activation's type with scalar scales, so
    the constant is quantized per tensor like an activation (asymmetric, its own min/max).
    """
    return activation.with_(per_channel=False, block_size=None, calibration="minmax")


@functools.lru_cache(maxsize=1)
def integer_gemm_saturates() -> bool:
    """Whether this machine's onnxruntime CPU provider adds uint8×int8 products in int16 pairs that
    saturate (x86 without VNNI: MLAS's AVX2/AVX-512BW U8S8 kernels use ``vpmaddubsw``).

    A probe, not a CPU-flag table: one MatMulInteger of 255 × 127 over 8 terms, whose exact sum
    (259080) the saturating kernel cannot reach (4 × 32767). Why a probe: which kernel onnxruntime
    dispatches to depends on its build and the CPU (AVX-VNNI, AVX512-VNNI, AMX, ARM's SDOT all add
    in int32), and only running it says. Cached: one tiny session per process.
    """
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    from ..sessions import open_session

    k = 8
    weights = numpy_helper.from_array(np.full((k, 1), 127, np.int8), "b")
    graph = helper.make_graph([helper.make_node("MatMulInteger", ["a", "b"], ["y"])], "saturation_probe",
                              [helper.make_tensor_value_info("a", TensorProto.UINT8, [1, k])],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, [1, 1])], [weights])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    try:
        session = open_session(model)
        got = int(session.run(None, {"a": np.full((1, k), 255, np.uint8)})[0][0, 0])
    except Exception as err:  # noqa: BLE001 - a probe that cannot run says nothing about saturation
        log.debug("integer GEMM saturation probe did not run: %s", err)
        return False
    saturates = got != 255 * 127 * k
    if saturates:
        log.info("onnxruntime's CPU integer GEMM on this machine saturates int16 pair sums (x86 without VNNI): "
                 "the int8 weights of fused Conv/MatMul/Gemm are stored as uint8 (U8U8 kernels; saturation_guard='auto')")
    return saturates


def judge_exact_sums(config: QuantConfig) -> bool:
    """Whether the floor and repair judge a build on a copy whose int8 GEMM weights are stored as uint8
    (graph/passes/unsigned_gemm_weights.py) while the delivered file keeps them int8.

    Why: a ``runtime="npu"`` (or other non-CPU) build keeps int8 weights for its target, which adds in
    int32; judged as this machine's onnxruntime runs it, where U8S8 sums saturate (x86 without VNNI),
    a model that is exact on its target reads broken and repair keeps float nodes the target runs
    well (vcb_captcha A8W8 npu: 0.000 as run here, 0.875 with exact sums; bench/RESULTS.md, a8avx2).
    The copy's sums are the Q/DQ model's exact ones, bit for bit those of the stored int8 weights
    where the kernels do not saturate. ``saturation_guard="off"`` keeps the figures as run here."""
    return config.runtime != "cpu" and config.saturation_guard != "off" and integer_gemm_saturates()


def guard_saturation(config: QuantConfig) -> bool:
    """Whether int8 weights read by onnxruntime's U8S8 GEMM are stored as uint8 (:attr:`QuantConfig.saturation_guard`,
    graph/passes/unsigned_gemm_weights.py)."""
    if config.runtime != "cpu" or config.saturation_guard == "off":
        return False
    return config.saturation_guard == "on" or integer_gemm_saturates()
