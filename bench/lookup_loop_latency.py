"""CPU time per run of onnxruntime sessions, side by side in one process (one thread).

Two uses (bench/RESULTS.md "Lookup tables and Loop bodies"):

* ``--tables``: an embedding table stored int8 per row, read three ways against the float
  ``Gather`` — ``DequantizeLinear(table) → Gather`` (what the emitter writes), ``Gather → DQ``
  per tensor, and ``Gather → Cast × Gather(scales)`` per row (graph/passes/lookup_tables.py) —
  on minilm_l3's word-table shape (30522×384), 128 ids; also checks the per-row form is bit for
  bit the dequantized table's rows.
* ``--model NAME FILE...``: the float model of bench/newmodels.py's NAME and each FILE on NAME's
  feeds, rounds interleaved so load drifts hit all alike; ``--zoo NAME FILE...`` the same for a
  testkit zoo model (its first 16 held-out feeds); ``--quantize-zoo NAME PRESET OUT`` writes the
  file to compare (``onnxptq.quantize`` on the zoo model's calibration feeds, the tree on PYTHONPATH).

    PYTHONPATH=src:. OMP_NUM_THREADS=1 python bench/lookup_loop_latency.py --tables
    PYTHONPATH=src:. OMP_NUM_THREADS=1 python bench/lookup_loop_latency.py --model chars2vec a.onnx b.onnx
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T, helper, numpy_helper


def _session(model) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    src = model if isinstance(model, str) else model.SerializeToString()
    return ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])


def _times(sessions: dict[str, ort.InferenceSession], feeds: list[dict], rounds: int) -> dict[str, float]:
    """CPU ms per run of each session, rounds interleaved."""
    spent = {k: 0.0 for k in sessions}
    for s in sessions.values():
        for f in feeds:
            s.run(None, f)
    for _ in range(rounds):
        for k, s in sessions.items():
            t = time.process_time()
            for f in feeds:
                s.run(None, f)
            spent[k] += time.process_time() - t
    return {k: v / rounds / len(feeds) * 1e3 for k, v in spent.items()}


def _tables() -> None:
    V, H = 30522, 384
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((V, H)) * 0.05).astype(np.float32)
    s = (np.abs(w).max(1) / 127).astype(np.float32)
    q = np.clip(np.round(w / s[:, None]), -127, 127).astype(np.int8)
    st = np.float32(np.abs(w).max() / 127)
    qt = np.clip(np.round(w / st), -127, 127).astype(np.int8)
    ids = helper.make_tensor_value_info("ids", T.INT64, [1, 128])

    def model(nodes, inits):
        g = helper.make_graph(nodes, "g", [ids], [helper.make_tensor_value_info("y", T.FLOAT, None)], inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 8
        return m

    a = numpy_helper.from_array
    models = {
        "float Gather": model([helper.make_node("Gather", ["W", "ids"], ["y"])], [a(w, "W")]),
        "DQ(table) -> Gather": model(
            [helper.make_node("DequantizeLinear", ["q", "s", "z"], ["Wd"], axis=0), helper.make_node("Gather", ["Wd", "ids"], ["y"])],
            [a(q, "q"), a(s, "s"), a(np.zeros(V, np.int8), "z")]),
        "Gather -> DQ (per tensor)": model(
            [helper.make_node("Gather", ["q", "ids"], ["g"]), helper.make_node("DequantizeLinear", ["g", "s", "z"], ["y"])],
            [a(qt, "q"), a(np.array(st), "s"), a(np.array(0, np.int8), "z")]),
        "Gather -> Cast x Gather(scales) (per row)": model(
            [helper.make_node("Gather", ["q", "ids"], ["g"]), helper.make_node("Cast", ["g"], ["gf"], to=T.FLOAT),
             helper.make_node("Gather", ["s", "ids"], ["gs"]), helper.make_node("Mul", ["gf", "gs"], ["y"])],
            [a(q, "q"), a(s.reshape(V, 1), "s")]),
    }
    feeds = [{"ids": rng.integers(0, V, (1, 128)).astype(np.int64)} for _ in range(4)]
    sessions = {k: _session(m) for k, m in models.items()}
    exact = all(np.array_equal(sessions["DQ(table) -> Gather"].run(None, f)[0],
                               sessions["Gather -> Cast x Gather(scales) (per row)"].run(None, f)[0]) for f in feeds)
    for k, ms in _times(sessions, feeds, 20).items():
        print(f"{k}: {ms:.3f} ms/run, file {len(models[k].SerializeToString()) / 1e6:.1f} MB")
    print(f"per row bit-identical to DQ(table) -> Gather: {exact}")


def _models(name: str, files: list[str]) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    import newmodels as nm

    path, feeds_fn = nm.MODELS[name][0], nm.MODELS[name][1]
    feeds = feeds_fn(8, 5)
    sessions = {"float": _session(path), **{f: _session(f) for f in files}}
    times = _times(sessions, feeds, 5)
    for k, ms in times.items():
        print(f"{k}: {ms:.3f} ms/run (×{ms / times['float']:.2f} float)")


def _zoo(name: str, files: list[str]) -> None:
    from testkit import zoo as tz

    m = next(z for z in tz.ZOO if z.name == name)
    feeds = m.samples("heldout")[:16]
    sessions = {"float": _session(str(m.path())), **{f: _session(f) for f in files}}
    times = _times(sessions, feeds, 10)
    for k, ms in times.items():
        print(f"{k}: {ms:.3f} ms/run (×{ms / times['float']:.2f} float)")


def _quantize_zoo(name: str, preset: str, out: str) -> None:
    import onnxptq
    from testkit import zoo as tz

    m = next(z for z in tz.ZOO if z.name == name)
    onnxptq.quantize(str(m.path()), preset, data=m.samples("calibration"), output=out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tables", action="store_true")
    p.add_argument("--model", nargs="+", metavar=("NAME", "FILE"))
    p.add_argument("--zoo", nargs="+", metavar=("NAME", "FILE"))
    p.add_argument("--quantize-zoo", nargs=3, metavar=("NAME", "PRESET", "OUT"))
    a = p.parse_args()
    if a.quantize_zoo:
        _quantize_zoo(*a.quantize_zoo)
    if a.zoo:
        _zoo(a.zoo[0], a.zoo[1:])
    if a.tables:
        _tables()
    if a.model:
        _models(a.model[0], a.model[1:])


if __name__ == "__main__":
    main()
