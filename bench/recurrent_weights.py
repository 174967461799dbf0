"""Which tensor of a recurrent layer carries its quantization loss: the task reading with one of the layer's
weights (the input weights W, the recurrent weights R) at 16 bits or in the preset's 8 bits, next to the whole
layer float (``nodes_to_exclude``).

    NEWMODELS22_SRC=/work/cache/newmodels22/src PYTHONPATH=src:. OMP_NUM_THREADS=1 nice python bench/recurrent_weights.py \
        --presets A16W8,A8W8 --calib 40 --held 48

Model: DeepFilterNet3's encoder (bench/newmodels.py ``dfn3_enc``, its ``/emb_gru/GRU``), read as bench/newmodels.py
reads it (speech frames whose enhanced spectrum is within 20 dB SNR of float's, the decoders float). Repair off, so
that the plan alone is compared.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile

import onnx

from bench import newmodels as nm

GRU = "/emb_gru/GRU"


def main() -> None:
    import onnxptq
    from onnxptq.config.presets import get_preset

    ap = argparse.ArgumentParser()
    ap.add_argument("--presets", default="A16W8")
    ap.add_argument("--calib", type=int, default=40)
    ap.add_argument("--held", type=int, default=48)
    a = ap.parse_args()
    path = str(nm.DFN3 / "enc.onnx")
    node = next(n for n in onnx.load(path, load_external_data=False).graph.node if n.name == GRU)
    w, r = node.input[1], node.input[2]
    held, calib = nm.dfn_feeds("enc")(a.held, 1000), nm.dfn_feeds("enc")(a.calib, 1)
    ref = nm._memo(nm._dfn_runners()["enc"], held)
    for preset in a.presets.split(","):
        base = dataclasses.replace(get_preset(preset), repair=False)
        w16 = dataclasses.replace(base.weight, format="int16")
        int8 = base.weight
        variants = {"R and W int8 (main's plan)": dataclasses.replace(base, tensor_overrides={r: int8, w: int8}),
                    "R int16, W int8": dataclasses.replace(base, tensor_overrides={r: w16, w: int8}),
                    "R int8, W int16": dataclasses.replace(base, tensor_overrides={r: int8, w: w16}),
                    "R, W int16 per channel (the rule rnnweights measured, not taken)": dataclasses.replace(
                        base, tensor_overrides={r: w16, w: w16}),
                    "whole GRU float": dataclasses.replace(base, nodes_to_exclude=(GRU,))}
        for name, cfg in variants.items():
            with tempfile.TemporaryDirectory() as d:
                out = f"{d}/q.onnx"
                onnxptq.quantize(path, cfg, data=list(calib), output=out, eval_samples=0)
                test = nm._memo(nm.zoo.session_runner(out), held)
                share = nm.dfn_frames("enc")(ref, test, held, None)
            print(json.dumps({"preset": preset, "variant": name, "frames within 20 dB": round(float(share), 4)}), flush=True)


if __name__ == "__main__":
    main()
