"""DAT-light x2's delivered files with the compact constant storage off and on (graph/passes/constant_tables, dat17).

Quantizes the round-26 model once per preset (repair off: storage does not touch the plan; ``--calib`` of the
bench's tiles), writes the result twice as ``deliver`` writes it (runtime "cpu"'s sparse floats, then the lean
file) with ``constant_tables.ENABLED`` off and on, and prints each file's size over the float file's, whether the
two files' outputs on ``--held`` other tiles are bit-identical (onnxruntime, default optimisation, 1 thread), and
each file's session-creation peak RSS in a fresh process (bench/file_sizes_load.py's ``--peak``; old and new
alternating, medians of ``--rounds``).

    PYTHONPATH=$PWD/src:$PWD:$PWD/bench OMP_NUM_THREADS=1 nice -n 5 python bench/dat_constant_tables.py \
        /work/cache/newmodels26/src/round26_onnx/dat_light_x2.onnx --presets BF16 MXINT8 --out /work/cache/dat17/ct
    # a file delivered before (e.g. by bench/newmodels.py) rewritten by the pass alone: size, the optimised graph's
    # node types at ORT_ENABLE_EXTENDED (equal: the decodes fold before the QDQ passes), outputs, load peak RSS
    ... python bench/dat_constant_tables.py FLOAT.onnx --rewrite DELIVERED.onnx --out /work/cache/dat17/ct
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

import onnxptq
from onnxptq.graph import io, sparse_storage
from onnxptq.graph.passes import constant_tables
from onnxptq.pipeline.lean_file import lean


def _outputs(path: Path, feeds: list[dict]) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return [sess.run(None, f)[0] for f in feeds]


def _write(result, path: Path, enabled: bool) -> None:
    saved, constant_tables.ENABLED = constant_tables.ENABLED, enabled
    try:
        stored = sparse_storage.sparsify_floats(result.model) if result.config.runtime == "cpu" else result.model
        with lean(stored, calls=result.config.pack_weights):
            io.save_model(stored, path)
    finally:
        constant_tables.ENABLED = saved


def rewrite(float_path: Path, delivered: Path, out: Path, held: list[dict], rounds: int) -> None:
    """``delivered`` as the pass writes it (applied to the file's model): sizes, optimised graphs, outputs, load RSS."""
    from collections import Counter

    from file_sizes_load import _load

    model = onnx.load(str(delivered))
    constant_tables.compact_constants(model)
    path = out / (delivered.stem + ".tables_on.onnx")
    onnx.save(model, str(path))
    kinds, outs = {}, {}
    for p in (delivered, path):
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.log_severity_level = 1, 3
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        so.optimized_model_filepath = str(out / (p.stem + ".opt.onnx"))
        sess = ort.InferenceSession(str(p), so, providers=["CPUExecutionProvider"])
        outs[p] = [sess.run(None, f)[0] for f in held]
        kinds[p] = Counter(n.op_type for n in onnx.load(so.optimized_model_filepath).graph.node)
    peaks: dict[Path, list[float]] = {delivered: [], path: []}
    for r in range(rounds):
        for p in ((delivered, path) if r % 2 == 0 else (path, delivered)):
            peaks[p].append(_load(p, fold=False)["load_peak_rss_MB"])
    fsize = float_path.stat().st_size
    for p in (delivered, path):
        print(f"{p.name}: {p.stat().st_size} B = {p.stat().st_size / fsize:.3f}x float; optimised graph "
              f"{sum(kinds[p].values())} nodes; load peak RSS {statistics.median(peaks[p]):.0f} MB")
    same = all(np.array_equal(a.view(np.uint32), b.view(np.uint32)) for a, b in zip(outs[delivered], outs[path]))
    print(f"optimised graphs' node types equal: {kinds[delivered] == kinds[path]}; outputs bit-identical on "
          f"{len(held)} tiles: {same}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", type=Path)
    ap.add_argument("--presets", nargs="+", default=["BF16", "MXINT8"])
    ap.add_argument("--calib", type=int, default=4)
    ap.add_argument("--held", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rewrite", type=Path, default=None, help="a delivered file to rewrite with the pass alone")
    args = ap.parse_args()
    from file_sizes_load import _load
    from newmodels import dat_tile_feeds

    args.out.mkdir(parents=True, exist_ok=True)
    calib, held = dat_tile_feeds(args.calib, 26), dat_tile_feeds(args.held, 27)
    if args.rewrite is not None:
        rewrite(args.model, args.rewrite, args.out, held, args.rounds)
        return
    float_size = args.model.stat().st_size
    model = onnx.load(str(args.model))
    print(f"float file {float_size} B; float load peak RSS "
          f"{statistics.median(_load(args.model, fold=False)['load_peak_rss_MB'] for _ in range(args.rounds)):.0f} MB")
    for preset in args.presets:
        result = onnxptq.quantize(model, dataclasses.replace(onnxptq.get_preset(preset), repair=False), calib)
        paths = {on: args.out / f"dat.{preset}.tables_{'on' if on else 'off'}.onnx" for on in (False, True)}
        for on, path in paths.items():
            _write(result, path, on)
        outs = {on: _outputs(p, held) for on, p in paths.items()}
        same = all(np.array_equal(a.view(np.uint32), b.view(np.uint32)) for a, b in zip(outs[False], outs[True]))
        peaks: dict[bool, list[float]] = {False: [], True: []}
        for r in range(args.rounds):
            for on in ((False, True) if r % 2 == 0 else (True, False)):
                peaks[on].append(_load(paths[on], fold=False)["load_peak_rss_MB"])
        for on, path in paths.items():
            size = path.stat().st_size
            print(f"{preset} tables {'on ' if on else 'off'}: {size} B = {size / float_size:.3f}x float; "
                  f"load peak RSS {statistics.median(peaks[on]):.0f} MB", flush=True)
        print(f"{preset}: outputs off vs on bit-identical on {len(held)} tiles: {same}", flush=True)


if __name__ == "__main__":
    main()
