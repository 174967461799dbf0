"""iqc_effnet_b3 A8W8 with repair off and the graph's first/last quarter (or eighth) of nodes left float: where repair's
ends trial, were it run on a model with one output, would start (bench/RESULTS.md, newmodels24).

    NEWMODELS24_SRC=/work/cache/newmodels24/src PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/round24_ends.py
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))

import newmodels as nm  # noqa: E402
import round24_causes as rc  # noqa: E402
from testkit import zoo  # noqa: E402


def main() -> None:
    import onnxptq
    from onnxptq.config.presets import get_preset

    path = nm.MODELS["iqc_effnet_b3"][0]
    # the nodes in graph order, less the BatchNormalizations preparation folds into their Convs
    nodes = [n.name for n in onnx.load(path).graph.node if n.op_type != "BatchNormalization"]
    q = len(nodes) // 4
    calib, held = nm.iqc_feeds(32, 1), nm.iqc_feeds(48, 1000)
    ref = zoo.session_runner(path)
    want = [ref(f)[0] for f in held]
    print("| left float | nodes | output cosine mean / min | top-1 agreement |")
    print("| --- | --- | --- | --- |")
    for tag, kept in (("first and last quarter", nodes[:q] + nodes[-q:]), ("first quarter", nodes[:q]),
                      ("first eighth", nodes[:q // 2])):
        out = Path("/work/cache/newmodels24") / f"iqc.ends.{len(kept)}.onnx"
        cfg = dataclasses.replace(get_preset("A8W8"), repair=False, nodes_to_exclude=tuple(kept))
        onnxptq.quantize(path, cfg, data=calib, output=str(out))
        test = zoo.session_runner(out)
        print(f"| {tag} | {len(kept)} of {len(nodes)} | {rc._agreement(want, [test(f)[0] for f in held])} |", flush=True)


if __name__ == "__main__":
    main()
