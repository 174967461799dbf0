"""Round 18's diagnoses (bench/RESULTS.md, "The eighteenth round of outside models (newmodels18)"), each from the rows'
delivered models in --out-dir (bench/newmodels.py wrote them) and the same held-out feeds (seed 1000):

    NEWMODELS18_SRC=/work/cache/newmodels18/src PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 python bench/newmodels18_diag.py \
        {minimol-margins,sudachi-sentences,asr-bf16-nodes,asr-no-repair} [--out-dir /work/cache/newmodels18/out]

minimol-margins: the nearest-molecule flips against float's top-2 cosine margin (why MXFP8_E4M3 reads 0.949 with every
fingerprint's cosine >= 0.994). sudachi-sentences: the tagger's sentences whose tags all equal float's (the floor's
"reads") beside the per-character agreement the row reports. asr-bf16-nodes: the frame top-1 of hama's phoneme
recognizer with one node's output re-rounded to bfloat16 at a time (is there one culprit?). asr-no-repair: A16W8 with
repair off, judged as the floor judges (CTC strings) and as the row does (1 - PER).
"""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np

import newmodels as nm
from testkit import zoo


def _nearest(vecs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    v = vecs / np.linalg.norm(vecs, axis=1, keepdims=True)
    sim = v @ v.T
    np.fill_diagonal(sim, -np.inf)
    top2 = np.sort(sim, 1)[:, -2:]
    return sim.argmax(1), top2[:, 1] - top2[:, 0]


def minimol_margins(out_dir: str) -> None:
    feeds = nm.minimol_feeds(32, 1000)
    ref = zoo.session_runner(nm.MODELS["minimol"][0])
    a = np.concatenate([ref(f)[0] for f in feeds])
    pick, margin = _nearest(a)
    print(f"float: median top-2 margin {np.median(margin):.4f}, share under 0.002 {np.mean(margin < 0.002):.3f}")
    for preset in ("BF16", "A8W8", "MXINT8", "MXFP8_E4M3"):
        b = np.concatenate([zoo.session_runner(f"{out_dir}/minimol.{preset}.onnx")(f)[0] for f in feeds])
        cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
        flip = pick != _nearest(b)[0]
        print(f"{preset}: {int(flip.sum())}/{len(flip)} flips, fingerprint cosine min {cos.min():.4f}; float margin at the flips "
              f"median {np.median(margin[flip]) if flip.any() else 0:.4f} max {margin[flip].max() if flip.any() else 0:.4f}")


def sudachi_sentences(out_dir: str) -> None:
    rel, make, _, metric = nm.MODELS["sudachi_c_pos"]
    held, ref = make(32, 1000), zoo.session_runner(rel)
    for preset in nm.PRESETS:
        test = zoo.session_runner(f"{out_dir}/sudachi_c_pos.{preset}.onnx")
        same = [bool((ref(f)[0][0][f["onnx::Unsqueeze_1"][0] > 0] == test(f)[0][0][f["onnx::Unsqueeze_1"][0] > 0]).all())
                for f in held]
        print(f"{preset}: per character {metric(ref, test, held, None):.4f}, sentences exact {np.mean(same):.4f}")


def asr_bf16_nodes(out_dir: str) -> None:
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    path = nm.MODELS["hama_asr"][0]
    feeds, base = nm.hama_asr_feeds(6, 1000), onnx.load(path)
    inferred = onnx.shape_inference.infer_shapes(base).graph
    types = {vi.name: vi.type.tensor_type.elem_type for vi in [*inferred.value_info, *inferred.input, *inferred.output]}
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    refs = [ort.InferenceSession(path, so, providers=["CPUExecutionProvider"]).run(None, f) for f in feeds]
    rows = []
    for i, node in enumerate(base.graph.node):
        out = node.output[0]
        if node.op_type in ("Constant", "Shape") or types.get(out) not in (TensorProto.FLOAT16, TensorProto.FLOAT):
            continue
        m = onnx.ModelProto()
        m.CopyFrom(base)
        for n in m.graph.node:
            n.input[:] = [out + "__rt" if x == out else x for x in n.input]
        m.graph.node.insert(i + 1, helper.make_node("Cast", [out], [out + "__bf"], to=TensorProto.BFLOAT16))
        m.graph.node.insert(i + 2, helper.make_node("Cast", [out + "__bf"], [out + "__rt"], to=types[out]))
        s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
        same = total = 0
        for f, r in zip(feeds, refs):
            n = int(r[1][0])
            same += int((s.run(None, f)[0][0][:n].argmax(-1) == r[0][0][:n].argmax(-1)).sum())
            total += n
        rows.append((same / total, node.name))
    rows.sort()
    print(f"{len(rows)} nodes; the lowest frame top-1 with one node's output in bfloat16:",
          ", ".join(f"{n} {v:.4f}" for v, n in rows[:5]))


def asr_no_repair(out_dir: str) -> None:
    import onnxptq
    from onnxptq.analysis import class_scores as cs
    from onnxptq.config.presets import get_preset

    calib, held = nm.hama_asr_feeds(12, 1), nm.hama_asr_feeds(32, 1000)
    out = f"{out_dir}/hama_asr.A16W8.norepair.onnx"
    onnxptq.quantize(nm.MODELS["hama_asr"][0], dataclasses.replace(get_preset("A16W8"), repair=False), data=calib, output=out)
    ref, got = zoo.session_runner(nm.MODELS["hama_asr"][0]), zoo.session_runner(out)
    p = cs.judge_positions([ref(f)[0] for f in held], [got(f)[0] for f in held], strings_only=True)
    print(f"A16W8, repair off: strings {p.agreement:.4f} ({p.changed} of {p.reads} read differently, CER {p.cer:.3f}); "
          f"1 - PER {nm.hama_asr_per(ref, got, held, None):.4f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("minimol-margins", "sudachi-sentences", "asr-bf16-nodes", "asr-no-repair"))
    ap.add_argument("--out-dir", default="/work/cache/newmodels18/out")
    a = ap.parse_args()
    {"minimol-margins": minimol_margins, "sudachi-sentences": sudachi_sentences, "asr-bf16-nodes": asr_bf16_nodes,
     "asr-no-repair": asr_no_repair}[a.what](a.out_dir)


if __name__ == "__main__":
    main()
