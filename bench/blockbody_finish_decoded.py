"""Would finish's session cost less on the packed weights already decoded? (issue 26 item 1, blockq19: measured, not adopted)

finish (``pipeline/finish.py``) opens one onnxruntime session on the quantized model, whose packed weights'
decode chains (main-graph nodes fed by initializers alone, onnx_ops/packed.py) onnxruntime constant-folds while it
creates the session. For each ``MODEL`` and preset (quantized with repair off) this script measures, CPU seconds,
best of ``--reps``, variants alternating:

* **packed**: finish's session on the model as it is (what finish opens);
* **decoders**: the chains alone in a level-"none" session, its creation and one run (what computing the chains
  ourselves would cost: the values onnxruntime's own kernels give);
* **decoded**: the bytes of the model without the chains followed by a ModelProto holding only their results
  (protobuf merges the two: no copy of the model), and finish's session on them; the values computed beforehand,
  as emit could hand them over (its rounded weights), so this is the session's side alone;

and how many feeds (bench/blockbody_bits.py's) give every output of **decoded** equal to **packed**'s, bit for bit.
The gain finish could take is ``packed - decoded`` where the values come free (from emit), ``packed - decoded -
decoders`` where onnxruntime computes them.

    PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 python bench/blockbody_finish_decoded.py cls:8,rec,khmersm \\
        BF16,BFP16,MX9,MXINT8,MXFP8_E4M3 --feeds 8 --reps 3
"""

from __future__ import annotations

import _common  # noqa: F401  (the repository root on sys.path: testkit)
import argparse
import logging
import time
from typing import Any

import numpy as np

from blockbody_bits import feeds_for
from blockbody_nodes import _same_bits


def constant_chains(graph: Any) -> tuple[list[int], list[str]]:
    """``(positions, results)``: main-graph nodes computed from initializers alone (standard domain, no
    subgraph, no Q/DQ or random op, no graph output: what onnxruntime's constant folding takes), and those of
    their outputs read by anything else."""
    from onnxptq.graph.opsets import is_onnx_domain
    from onnxptq.graph.passes.fold_constants import NEVER_FOLD
    from onnxptq.graph.walk import all_graphs, subgraphs

    returned = {o.name for o in graph.output}
    constant = ({t.name for t in graph.initializer} - {i.name for i in graph.input}) | {""}
    positions = []
    for k, node in enumerate(graph.node):
        if (not node.input or not is_onnx_domain(node.domain) or node.op_type in NEVER_FOLD or node.op_type == "Constant"
                or not all(i in constant for i in node.input) or any(o in returned for o in node.output)
                or any(True for _ in subgraphs(node))):
            continue
        positions.append(k)
        constant.update(node.output)
    inner = set(positions)
    read = {i for k, n in enumerate(graph.node) if k not in inner for i in n.input}
    read |= {i for g in all_graphs(graph) if g is not graph for n in g.node for i in n.input}
    return positions, [o for k in positions for o in graph.node[k].output if o in read]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", help="comma-separated MODEL[:samples] (bench/quantize_stages.py's names)")
    ap.add_argument("presets")
    ap.add_argument("--feeds", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()

    import onnx
    from onnx import numpy_helper

    import quantize_stages
    from onnxptq import quantize
    from onnxptq.pipeline.finish import _options
    from onnxptq.sessions import open_session, serialized

    logging.disable(logging.WARNING)
    cpu = time.process_time
    print("| model | preset | chain nodes / weights | packed CPU s | decoders (create + run) | decoded | "
          "packed − decoded | − decoders too | feeds equal |")
    print("|---|---|---|---:|---:|---:|---:|---:|---|")
    for spec in args.models.split(","):
        model, _, samples = spec.partition(":")
        path, data = quantize_stages._data(model, int(samples or 0))
        for preset in args.presets.split(","):
            q = quantize(path, quantize_stages.quiet_config(preset, repair=False), data).model
            g = q.graph
            positions, results = constant_chains(g)
            chain = [g.node[k] for k in positions]
            used = {i for n in chain for i in n.input}
            decoders = onnx.helper.make_model(
                onnx.helper.make_graph(chain, "decoders", [], [onnx.helper.make_empty_tensor_value_info(r) for r in results],
                                       initializer=[t for t in g.initializer if t.name in used]),
                opset_imports=q.opset_import, ir_version=q.ir_version)
            values = open_session(decoders, optimization="none", threads=1).run(results, {})
            best = {"packed": 9e9, "decoders": 9e9, "decoded": 9e9}
            for _ in range(args.reps):
                t = cpu()
                packed = open_session(serialized(q), **_options())
                best["packed"] = min(best["packed"], cpu() - t)
                t = cpu()
                open_session(decoders, optimization="none", threads=1).run(results, {})
                best["decoders"] = min(best["decoders"], cpu() - t)
                t = cpu()
                nodes = [(k, g.node.pop(k)) for k in reversed(positions)]
                head = serialized(q)
                for k, n in reversed(nodes):
                    g.node.insert(k, n)
                tail = onnx.ModelProto(graph=onnx.GraphProto(
                    initializer=[numpy_helper.from_array(np.asarray(v), r) for r, v in zip(results, values)])).SerializeToString()
                decoded = open_session(head + tail, **_options())
                best["decoded"] = min(best["decoded"], cpu() - t)
            names = [i.name for i in packed.get_inputs()]
            same = ran = 0
            for feed in feeds_for(model, args.feeds, names):
                try:
                    a = packed.run(None, feed)
                except Exception:  # noqa: BLE001 - a feed the model does not take (a fixed batch)
                    continue
                ran += 1
                same += _same_bits(a, decoded.run(None, feed))
            gain = best["packed"] - best["decoded"]
            print(f"| {model} | {preset} | {len(positions)} / {len(results)} | {best['packed']:.3f} | {best['decoders']:.3f} | "
                  f"{best['decoded']:.3f} | {gain:+.3f} | {gain - best['decoders']:+.3f} | {same} of {ran} |", flush=True)


if __name__ == "__main__":
    main()
