"""Which activation quantizers of a PP-OCRv4 rec A8W8 model cost the most accuracy: one at a time float.

Quantizes rec with A8W8 (64 rendered lines, seed 1; ``--runtime``), then for every activation
QuantizeLinear → DequantizeLinear pair rewires the DequantizeLinear's readers to the float tensor
(that one quantizer removed, everything else as it was) and scores the model on ``--lines``
evaluation lines (seed 3) against the float model's softmax outputs: the mean KL divergence per
frame and the fraction of frames whose argmax changed. KL is used rather than CER because on a
50-line subset one character moves the CER by 0.002, more than most single quantizers do. Prints
the base score, then the ``--top`` quantizers whose removal lowers the KL most.

    python bench/ablate_quantizers.py [--lines 50] [--top 15] [--runtime cpu]
"""

from __future__ import annotations

import _common  # the repository root on sys.path (testkit), the bench's session helper
import dataclasses
import argparse

import numpy as np
import onnx


def outputs(model: onnx.ModelProto | str, images: np.ndarray) -> np.ndarray:
    sess = _common.session(model, 1)
    return np.concatenate([sess.run(None, {"x": images[i:i + 10]})[0] for i in range(0, len(images), 10)])


def score(reference: np.ndarray, probs: np.ndarray) -> tuple[float, float]:
    """(mean KL(float ‖ quantized) per frame, fraction of frames whose argmax differs)."""
    kl = (reference * (np.log(reference + 1e-9) - np.log(probs + 1e-9))).sum(-1).mean()
    return float(kl), float((reference.argmax(-1) != probs.argmax(-1)).mean())


def without(model: onnx.ModelProto, q: onnx.NodeProto, dq_outputs: set[str]) -> onnx.ModelProto:
    """``model`` with the readers of ``dq_outputs`` reading ``q``'s float input instead."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for node in copy.graph.node:
        for k, name in enumerate(node.input):
            if name in dq_outputs:
                node.input[k] = q.input[0]
    return copy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=50)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--runtime", default="cpu")
    args = parser.parse_args()

    import onnxptq
    from testkit import ocr
    from testkit.models import model_path

    path = str(model_path("rec"))
    chars = ocr.load_characters(onnx.load(path))
    calib = ocr.render_lines(64, seed=1, characters=chars)[0]
    images = ocr.render_lines(args.lines, seed=3, characters=chars)[0]
    config = onnxptq.get_preset("A8W8").replace(runtime=args.runtime)
    config = config.replace(calibration=dataclasses.replace(config.calibration, progress=False))
    model = onnxptq.quantize(path, config, [{"x": calib[i:i + 8]} for i in range(0, 64, 8)], eval_samples=0).model
    reference = outputs(path, images)
    base = score(reference, outputs(model, images))
    print(f"base: KL {base[0]:.4f}, frames changed {base[1]:.4f}", flush=True)
    inits = {t.name for t in model.graph.initializer}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in model.graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    rows = []
    for q in model.graph.node:
        if q.op_type != "QuantizeLinear" or q.input[0] in inits:
            continue
        dqs = {n.output[0] for n in readers.get(q.output[0], []) if n.op_type == "DequantizeLinear"}
        if dqs:
            rows.append((*score(reference, outputs(without(model, q, dqs), images)), q.input[0]))
    rows.sort()
    print(f"\n| tensor kept float | KL | frames changed |\n|---|---:|---:|")
    for kl, changed, name in rows[: args.top]:
        print(f"| {name} | {kl:.4f} | {changed:.4f} |")


if __name__ == "__main__":
    main()
