"""Where round 22's losses are (bench/newmodels.py, NEWMODELS22_SRC): DeepFilterNet3's encoder and the SSCD student.

``dfn3``: for the encoder files bench/newmodels.py wrote (``--out-dir``), each output's SNR against float's, the task
reading (enhanced frames within 20 dB SNR of float's, the decoders float) with ONE output taken from the quantized
encoder and the rest float, the share split by the frame's loudness, and the preset re-quantized with the encoder's
GRU kept float. ``sscd``: the student's embedding cosine against float's under BFP16 with repair off, with each stage
of the network kept float in turn.

    NEWMODELS22_SRC=/work/cache/newmodels22/src PYTHONPATH=src:. OMP_NUM_THREADS=1 nice python bench/round22_causes.py \
        dfn3 --out-dir /work/cache/newmodels22/out --presets A8W8,A16W8
    ... bench/round22_causes.py sscd
"""

from __future__ import annotations

import argparse
import dataclasses
import json

import numpy as np

from bench import newmodels as nm

ENC_OUTS = ("e0", "e1", "e2", "e3", "emb", "c0", "lsnr")


def _enhanced(run: dict, clip: dict, enc: dict) -> np.ndarray:
    m = run["erb_dec"]({k: enc[k] for k in ("emb", "e3", "e2", "e1", "e0")})[0]
    c = run["df_dec"]({"emb": enc["emb"], "c0": enc["c0"]})[0]
    return nm._dfn_enhance(clip["spec"], np.asarray(m), np.asarray(c))


def dfn3(out_dir: str, presets: list[str], n: int) -> dict:
    import onnxptq
    from onnxptq.config.presets import get_preset

    held, run, res = nm.dfn_feeds("enc")(n, 1000), nm._dfn_runners(), {}
    for preset in presets:
        q = nm.zoo.session_runner(f"{out_dir}/dfn3_enc.{preset}.onnx")
        snr = {k: [] for k in ENC_OUTS}
        ok = {k: [0, 0] for k in (*ENC_OUTS, "all", "all, loud frames", "all, quieter frames")}
        for f in held:
            clip = nm._DFN_CLIPS[nm._DFN_CLIP[id(f["feat_erb"])]]
            a, b = dict(zip(ENC_OUTS, run["enc"](f))), dict(zip(ENC_OUTS, q(f)))
            for k in ENC_OUTS:
                snr[k].append(float(10 * np.log10((a[k] ** 2).sum() / max(((a[k] - b[k]) ** 2).sum(), 1e-30))))
            ya = _enhanced(run, clip, a)
            energy = (np.abs(ya) ** 2).sum(1)
            active, loud = energy >= 1e-4 * energy.max(), energy >= 1e-2 * energy.max()
            for k in (*ENC_OUTS, "all"):
                mixed = b if k == "all" else {**a, k: b[k]}
                hit = (np.abs(ya - _enhanced(run, clip, mixed)) ** 2).sum(1) <= 0.01 * energy
                ok[k][0] += int(hit[active].sum()); ok[k][1] += int(active.sum())
                if k == "all":
                    for key, sel in (("all, loud frames", loud), ("all, quieter frames", active & ~loud)):
                        ok[key][0] += int(hit[sel].sum()); ok[key][1] += int(sel.sum())
        calib = nm.dfn_feeds("enc")(40, 1)
        cfg = dataclasses.replace(get_preset(preset), nodes_to_exclude=("/emb_gru/GRU",))
        path = f"{out_dir}/dfn3_enc.{preset}.gru_float.onnx"
        onnxptq.quantize(str(nm.DFN3 / "enc.onnx"), cfg, data=list(calib), output=path)
        ref, test = nm._memo(run["enc"], held), nm._memo(nm.zoo.session_runner(path), held)
        res[preset] = {
            "output SNR dB (mean, min)": {k: (round(np.mean(v), 1), round(np.min(v), 1)) for k, v in snr.items()},
            "frames within 20 dB, this output quantized": {k: round(v[0] / max(v[1], 1), 3) for k, v in ok.items()},
            "task with /emb_gru/GRU float": round(nm.dfn_frames("enc")(ref, test, held, None), 4),
        }
        print(json.dumps({preset: res[preset]}), flush=True)
    return res


def sscd(n: int) -> dict:
    import onnxptq
    from onnxptq.config.presets import get_preset

    calib, held = nm.sscd_feeds(16, 1), nm.sscd_feeds(n, 1000)
    src = str(nm.SSCD / "sscd_distilled.onnx")
    ref = nm.zoo.session_runner(src)
    a = np.stack([ref(f)[0][0] for f in held])
    res = {}
    for excl in ((), ("^/conv_stem.*",), *[(f"^/blocks/blocks.{i}/.*",) for i in range(5)], ("^/embeddings/.*",)):
        cfg = dataclasses.replace(get_preset("BFP16"), nodes_to_exclude=excl, repair=False)
        onnxptq.quantize(src, cfg, data=list(calib), output="/tmp/round22_sscd.onnx")
        test = nm.zoo.session_runner("/tmp/round22_sscd.onnx")
        b = np.stack([test(f)[0][0] for f in held])
        cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
        key = excl[0] if excl else "all quantized"
        res[key] = (round(float(cos.mean()), 4), round(float(cos.min()), 4))
        print(json.dumps({key: res[key]}), flush=True)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("dfn3", "sscd"))
    ap.add_argument("--out-dir", default="/work/cache/newmodels22/out")
    ap.add_argument("--presets", default="A8W8,A16W8")
    ap.add_argument("--n", type=int, default=16, help="held-out clips / images")
    a = ap.parse_args()
    if a.what == "dfn3":
        dfn3(a.out_dir, a.presets.split(","), a.n)
    else:
        sscd(a.n)


if __name__ == "__main__":
    main()
