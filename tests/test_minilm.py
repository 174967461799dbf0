"""all-MiniLM-L6-v2 (exported with transformers + torch.onnx, cached on disk): the attention mask
stays float in both mask styles, and block/int16 presets keep the embeddings close to float.

The full 100-pair retrieval measurement of every preset is ``bench/minilm.py`` (bench/RESULTS.md);
here a few padded sentences keep the file fast.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

pytest.importorskip("transformers", reason="the [test] extra installs transformers")
pytest.importorskip("torch", reason="the export needs torch (CI installs the CPU wheel)")

from onnxptq.api import quantize  # noqa: E402
from onnxptq.config.presets import resolve_config  # noqa: E402
from onnxptq.graph.sentinels import sentinel_tensors  # noqa: E402
from onnxptq.pipeline.plan import make_plan  # noqa: E402
from onnxptq.pipeline.prepare import prepare  # noqa: E402
from onnxptq.sessions import open_session  # noqa: E402
from testkit import minilm  # noqa: E402

EVAL = ["The cat sleeps on the warm windowsill.", "A storm closed the mountain road overnight.",
        "She ordered tea instead of coffee.", "Our train to the coast was cancelled this morning because of a strike.",
        "He fixed the bike.", "Tickets for the concert sold out in minutes.",
        "The museum opens at nine.", "Children built a snowman in the park after school."]
CALIB = ["Fresh bread is sold at the bakery every morning.", "The meeting moved to Thursday afternoon.",
         "Birds fly south in winter.", "Please send the report before the end of the week, if you can.",
         "The river runs through the old town.", "He reads in the garden.",
         "A strong wind knocked down several trees last night.", "The new phone has a larger screen."]


def _embed(model, sentences):
    sess = open_session(model, threads=1)
    return np.concatenate([sess.run(None, minilm.tokenize(sentences[i:i + 4]))[0] for i in range(0, len(sentences), 4)])


@pytest.mark.parametrize("mask", ["finfo", "1e4"])
def test_exported_attention_mask_path_stays_float(mask):
    prepared = prepare(onnx.load(str(minilm.onnx_path(mask))))
    softmax_inputs = {n.input[0] for n in prepared.graph.node if n.op_type == "Softmax"}
    found = sentinel_tensors(prepared)
    assert len(softmax_inputs) == 6 and softmax_inputs <= found, "every layer's masked scores carry the sentinel"
    # A16W8: the sentinel rule must not swallow the probabilities (8-bit integer activations keep
    # the probs·V product float by the transformer placement, pipeline/transformer.py).
    plan = make_plan(prepared, resolve_config("A16W8"))
    assert not found & set(plan.tensors)
    probs = {n.output[0] for n in prepared.graph.node if n.op_type == "Softmax"}
    assert probs <= set(plan.tensors), "attention probabilities are still quantized"


@pytest.mark.parametrize("preset,floor", [("MXINT8", 0.98), ("A16W8", 0.99)])
def test_embeddings_stay_close_to_float(preset, floor):
    path = minilm.onnx_path("finfo")
    ref = _embed(str(path), EVAL)
    calib = [minilm.tokenize(CALIB[i:i + 4]) for i in range(0, len(CALIB), 4)]
    result = quantize(str(path), preset, calib)
    for tensor in result.params.values():
        if tensor.scale is not None:
            assert np.all(np.isfinite(tensor.scale)) and float(np.max(tensor.scale)) < 1e3
    got = _embed(result.model, EVAL)
    cos = np.sum(ref * got, 1) / (np.linalg.norm(ref, axis=1) * np.linalg.norm(got, axis=1))
    assert float(cos.min()) >= floor, f"{preset}: embedding cosine to float {cos.round(4)}"
