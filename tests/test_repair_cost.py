"""Repair's candidates are built for their difference only and judged on a twin with the same outputs
(issue 27 item 2, issue 26 item 1: algorithms/repair.py, pipeline/emit.ConstantReuse).

What could go wrong, and what each test would catch:

* a weight rounded for one candidate (or one format, or one scale) served to another: a build with
  a warm :class:`ConstantReuse` must be byte for byte the build from scratch, for the judged twin
  (unpacked weights) and for the delivered build (packed), under block, float-element and integer
  formats, with the reuse shared across formats on purpose;
* the judged twin (weights stored as rounded floats, no packing) on the judge's session (one thread)
  computing something else than the delivered packed model on a default session: their outputs
  must be equal bit for bit on the held-out feeds.

PP-OCR's direction classifier (a real MobileNet-style CNN) on random feeds: each test is a
calibration and five or six builds, ~2 s.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from onnxptq.algorithms.repair import _candidate_config, _config_with, judge_session
from onnxptq.config.presets import resolve_config
from onnxptq.pipeline.build import build_model
from onnxptq.pipeline.calibrate import DEFAULT_HOLDOUT, calibrate_once
from onnxptq.pipeline.emit import ConstantReuse
from onnxptq.sessions import open_session
from testkit.models import model_path

SHAPE = (1, 3, 48, 192)


def _feeds(n: int = 12) -> list[dict[str, np.ndarray]]:
    name = onnx.load(str(model_path("cls")), load_external_data=False).graph.input[0].name
    rng = np.random.default_rng(0)
    return [{name: rng.random(SHAPE, dtype=np.float32)} for _ in range(n)]


def _calibrated(preset: str):
    cfg = resolve_config(preset)
    return cfg, calibrate_once(str(model_path("cls")), cfg, _feeds(), holdout=DEFAULT_HOLDOUT)


def _outputs(model: onnx.ModelProto, feeds, session=None) -> list[np.ndarray]:
    session = session or open_session(model)
    names = [o.name for o in model.graph.output]
    return [o for feed in feeds for o in session.run(names, feed)]


@pytest.mark.parametrize("preset,other", [("MX9", "BFP16"), ("MXFP8_E4M3", None), ("A8W8", None)])
def test_a_candidate_built_with_reuse_is_the_candidate_built_from_scratch(preset, other):
    """MX9 (block weights, packed) with BFP16's weights in the same reuse; MXFP8_E4M3 (bias
    correction on: each build rounds an equal copy of the weights); A8W8 (integer weights).
    Where weights are packed, the judged twin's outputs are the delivered model's, bit for bit."""
    cfg, cal = _calibrated(preset)
    nodes = [n.name for n in cal.prepared.graph.node if n.op_type in ("Conv", "MatMul", "Gemm")]
    assert len(nodes) > 8, nodes
    first, second = frozenset(nodes[::3]), frozenset(nodes[1::2])
    reuse = ConstantReuse()
    # Warm it with another format's weights under the same names, then with another candidate.
    if other:
        build_model(cal, _candidate_config(resolve_config(other), first), reuse=reuse)
    build_model(cal, _candidate_config(cfg, first), reuse=reuse)
    misses = reuse.misses
    packs = not preset.startswith("A")
    built = {}
    for make in (_candidate_config, _config_with) if packs else (_candidate_config,):  # the judged twin, the delivered form
        built[make] = build_model(cal, make(cfg, second)).model
        reused = build_model(cal, make(cfg, second), reuse=reuse).model.SerializeToString()
        assert reused == built[make].SerializeToString(), f"{preset}: a {make.__name__} build with reuse differs from scratch"
    assert reuse.hits > 0  # the second candidate's weights came from the first build
    assert reuse.misses > misses  # and the nodes only the second quantizes were computed
    if packs:
        twin, delivered = built[_candidate_config], built[_config_with]
        # The twin is not packed (no decode chains to fold) and the delivered model is: else nothing is tested.
        assert len(twin.graph.initializer) != len(delivered.graph.initializer)
        feeds = list(cal.holdout)
        # The twin on the judge's session, the delivered model on a session as users open it.
        got, want = _outputs(twin, feeds, judge_session(twin)), _outputs(delivered, feeds)
        assert all(np.array_equal(g.view(np.uint32), w.view(np.uint32)) for g, w in zip(got, want))
