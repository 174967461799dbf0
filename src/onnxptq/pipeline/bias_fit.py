"""Int32 biases that fit: a layer's weight scale is raised where its bias would saturate int32.

An integer layer's bias is stored as int32 on the scale ``scale(input) × scale(weight)`` (the
accumulator's scale). Where the input's calibrated range is tiny and the bias is not, that scale
is so small that ``bias / scale`` leaves int32, and the clipped bias is a different bias: the
layer's output is wrong on every sample, however fine the activation grid is.

Where it happens (a real model, bench/RESULTS.md "czann's A16W8 loss: a squeeze-excite bias that
saturated int32"): an EfficientNet-style squeeze-excite block written out by tf2onnx,
``GlobalAveragePool → Conv (reduce, C → C/24) → x·Sigmoid(x) → Conv (expand, C/24 → C) →
Sigmoid → Mul`` with the block's feature map. In napari-czann-segment's nucleus U-Net the reduce
Conv of one block puts out −15 … −80 on every tile, so its SiLU's output is ≈ −6·10⁻⁶ (a gate
the training switched off: the expand Conv's output is its bias alone). The int16 grid of that
SiLU output gets the scale 3.5·10⁻¹⁰, times the expand weight's 4.7·10⁻³ gives the bias a scale of
1.6·10⁻¹²: the expand biases (up to 1.05) need 6.5·10¹¹ steps, all 96 saturate at 2³¹ − 1 and
become 0.0035, the gate goes from Sigmoid(bias) to 0.5 for every channel, and the segmenter keeps
0.59 of its nucleus IoU under A16W8 with an output cosine of 0.999. No single node excluded fixes
it (excluding the SiLU keeps its input quantizer; excluding the Conv keeps its input's), which is
why the exclusion probes found only the whole path.

The rule, by the numbers alone (no op or name patterns): after the weights' and inputs' scales
are solved, every int32 bias whose largest ``|b_c| / (s_x · s_w,c)`` exceeds :data:`BIAS_LIMIT`
gets the weight channel's range stretched by exactly the factor that brings it to the limit, just
inside int32 (per output channel where the weight is per channel; the whole weight where it is per tensor).
Why the weight and not the input (onnxruntime's quantizer makes the same choice,
``_adjust_weight_scale_for_int32_bias``): the weight's scale belongs to this layer alone, per
output channel, while the input's scale is shared by every reader of the tensor and every
channel of it. Why this costs nothing that matters: saturation means ``|b_c|`` is more than
``2³¹ / (qmax_x · qmax_w)`` times the largest single product ``|x|·|w_c|`` the layer can form
(about 500× for int16 × int8, 130,000× for int8 × int8); the coarser weight grid adds at most
``K · qmax_x · |b_c| / 2³²`` to an output of ``K`` products (``K·7.6·10⁻⁶·|b_c|`` at int16 inputs,
all inputs at their calibrated maximum), and the channel's output is its bias to that precision.
A bias that fits int32 is left as it is, whatever the accumulator's headroom: main's files do not
change where nothing saturated (bench/bias_fit_scan.py).
"""

from __future__ import annotations

import logging

import numpy as np

log = logging.getLogger(__name__)

__all__ = ["BIAS_LIMIT", "weight_stretch"]

#: the largest |int32 bias| the rule allows: int32's limit less 256 steps, the float32 rounding of
#: the bias scale at that magnitude (2³¹ · 2⁻²⁴ = 128), so a stretched bias never lands on the clip.
#: Not lower: a bias that fits int32 now is left as it is (the rule changes no model it need not;
#: a limit of 2³⁰ stretched 5 of nsfw's ResNet weights under A8W8 whose biases did not saturate)
BIAS_LIMIT = float(2**31 - 2**8)


def weight_stretch(bias: np.ndarray, act_scale: np.ndarray, weight_scale: np.ndarray) -> np.ndarray | None:
    """The factor (≥ 1, shaped like ``weight_scale``) by which the weight's range must grow so
    that ``bias / (act_scale · weight_scale)`` stays within :data:`BIAS_LIMIT`; None where the bias
    already fits or the scales do not line up with the bias (then it is left as it was).

    ``act_scale`` is a scalar or one scale per bias element (a depthwise input quantized per
    channel); ``weight_scale`` a scalar (per-tensor weight: one factor, the largest) or one scale
    per bias element (per output channel).
    """
    b = np.abs(np.asarray(bias, dtype=np.float64).reshape(-1))
    sx = np.asarray(act_scale, dtype=np.float64).reshape(-1)
    sw = np.asarray(weight_scale, dtype=np.float64).reshape(-1)
    if b.size == 0 or sx.size not in (1, b.size) or sw.size not in (1, b.size):
        return None
    wide = sx * sw
    if not np.all(np.isfinite(wide)) or np.any(wide <= 0):
        return None
    need = b / (wide * BIAS_LIMIT)
    if not np.any(need > 1.0):
        return None
    factor = np.maximum(need, 1.0)
    if sw.size == 1:
        return np.asarray(float(factor.max()))
    return factor.reshape(np.shape(weight_scale))
