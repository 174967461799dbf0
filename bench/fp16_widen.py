"""Float16 source models: quantized as float16 (the default) vs widened to float32 first (``convert_fp16_to_fp32``) with
the source's float16 inputs/outputs given back (``conversion.interface.set_io_types``), side by side.

Why: round 20's models (bench/newmodels.py: uvdoc, platedet, platerec_enc, platerec_dec) are float16 exports their
packages feed with float16. By default an fp16 model is quantized as it is (docs/subgraphs.md): activation Q/DQ in
float32 with a Cast each side, integer weights read through ``DequantizeLinear -> Cast(FLOAT16)``; onnxruntime cannot
fuse a DQ -> Cast -> Conv into an integer kernel, and every activation pays two Casts. Widening keeps the arithmetic
(fp16 -> fp32 is exact) but changes the model's interface to float32, which the packages' float16 feeds no longer fit;
giving the interface back (a Cast at each fp16 input/output) makes the widened file a drop-in. Each row: the task
reading of bench/newmodels.py on held-out feeds, the 1-thread CPU-time ratio against the float16 source (timed
alternately, after one warm run each), the file size ratio, quantize CPU s.

    NEWMODELS20_SRC=/work/cache/newmodels20/src PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 nice -n 5 python bench/fp16_widen.py \
        --models platerec_enc,platerec_dec,platedet,uvdoc --presets FP16,BF16,A8W8,MXINT8 --out-dir /work/cache/newmodels20/widen
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import onnx
from onnx import TensorProto

import newmodels as nm
import onnxptq
from onnxptq.config.presets import get_preset
from onnxptq.conversion.interface import set_io_types
from testkit import zoo


def _give_back_fp16_io(source: Path, widened: Path) -> None:
    """The widened file's inputs/outputs that the source declares float16 are float16 again (a Cast each)."""
    src = onnx.load(str(source), load_external_data=False)
    wanted = {v.name: TensorProto.FLOAT16 for v in list(src.graph.input) + list(src.graph.output)
              if v.type.tensor_type.elem_type == TensorProto.FLOAT16}
    model = onnx.load(str(widened))
    onnx.save(set_io_types(model, wanted), str(widened))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="platerec_enc,platerec_dec,platedet,uvdoc")
    ap.add_argument("--presets", default="FP16,BF16,A8W8,MXINT8")
    ap.add_argument("--calib", type=int, default=12)
    ap.add_argument("--held", type=int, default=32)
    ap.add_argument("--latency-feeds", type=int, default=3)
    ap.add_argument("--out-dir", type=Path, default=Path("/work/cache/newmodels20/widen"))
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()
    a.out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in a.models.split(","):
        rel, make, metric_name, metric = nm.MODELS[name]
        source = nm.SRC / rel
        calib, held = make(a.calib, 1), make(a.held, 1000)
        ref = nm._memo(zoo.session_runner(source), held)
        for preset in a.presets.split(","):
            for widen in (False, True):
                out = a.out_dir / f"{name}.{preset}.{'widened' if widen else 'default'}.onnx"
                cfg = dataclasses.replace(get_preset(preset), convert_fp16_to_fp32=widen)
                # the widened model's calibration feeds are float32, as its (widened) interface says
                data = [{k: (v.astype("float32") if v.dtype.name == "float16" else v) for k, v in f.items()} for f in calib] \
                    if widen else list(calib)
                c = time.process_time()
                onnxptq.quantize(str(source), cfg, data=data, output=str(out))
                q_cpu = time.process_time() - c
                if widen:
                    _give_back_fp16_io(source, out)
                test = nm._memo(zoo.session_runner(out), held)  # the package's own float16 feeds, unchanged
                row = {"model": name, "preset": preset, "mode": "widened, fp16 I/O" if widen else "default (fp16 compute)",
                       "metric": metric_name, "agreement": round(float(metric(ref, test, held, None)), 4),
                       "latency_x": nm._latency_ratio(source, out, held[:a.latency_feeds]),
                       "size_x": round(out.stat().st_size / nm._model_bytes(source), 3), "quantize_cpu_s": round(q_cpu, 1)}
                rows.append(row)
                print(json.dumps(row), flush=True)
                if a.json:
                    a.json.write_text(json.dumps(rows, indent=1))
    print("| model | preset | mode | agreement | latency x | size x | quantize CPU s |\n| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['model']} | {r['preset']} | {r['mode']} | {r['agreement']:.3f} | {r['latency_x']} | {r['size_x']} | {r['quantize_cpu_s']} |")


if __name__ == "__main__":
    main()
