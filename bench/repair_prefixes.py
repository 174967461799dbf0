"""The graph's prefixes as repair's search would keep them stepped up, judged (issue 27 item 2, branch repair15).

Two readings of one question (which input-side prefixes of the candidates, graph order, hold the floor):

* ``--scan``: repair's own judge (the floor's verdict on the held-out feeds, the margins measure) on each length of
  ``--lengths``, the prefix and the suffix of that length, at the rung the search runs on (the whole plan's first
  rung that held, found with ``repair_budget=50``): what a search could find, not what four builds find.
* ``--fresh N``: the plain build's plan with each prefix stepped to the ladder's first rung (``repair=False``: the
  delivered bytes of such a kept set), judged on N fresh feeds (seed 3000) by top-1 agreement and output cosine
  with float: whether a held prefix holds beyond the feeds that chose it.

    PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 nice -n 5 python bench/repair_prefixes.py --scan sscd_distilled \\
        --presets MXINT8,A8W8 --lengths 12,22,45,62,69
    NEWMODELS24_SRC=/work/cache/newmodels24/src PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 nice -n 5 python \\
        bench/repair_prefixes.py --fresh 240 iqc_effnet_b3 --presets A8W8 --lengths 48,96,150,207,385 --calib 40
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import newmodels  # noqa: E402  (the outside models, their feeds)
from testkit import zoo  # noqa: E402


def scan(name: str, presets: list[str], lengths: list[int], calib_n: int, out_dir: Path) -> None:
    import onnxptq
    from onnxptq.algorithms import repair
    from onnxptq.config.presets import resolve_config

    def judged(judge, candidates, allowance, *, rung=None, **_):  # in place of the search: every length judged
        print(f"rung {rung.describe() if rung else 'float'}, {len(candidates)} candidates", flush=True)
        for k in lengths:
            for tag, kept in (("prefix", candidates[:k]), ("suffix", candidates[len(candidates) - k:])):
                v = judge(frozenset(kept), rung)
                print(f"{tag} {k:4d} held={v is not None and v.ok} {v.describe()[:100] if v else 'not built'}", flush=True)
        return frozenset(candidates), True

    repair._search = judged
    rel, make, _, _ = newmodels.MODELS[name]
    calib = make(calib_n, 1)
    for preset in presets:
        print("==", name, preset, flush=True)
        onnxptq.quantize(str(newmodels.SRC / rel), resolve_config(preset).replace(repair_budget=50), data=list(calib),
                         output=str(out_dir / f"scan_{name}_{preset}.onnx"))


def fresh(name: str, presets: list[str], lengths: list[int], calib_n: int, n: int, out_dir: Path) -> None:
    import onnxptq
    from onnxptq.algorithms.step_up import ladder, stepped_config
    from onnxptq.config.presets import resolve_config

    rel, make, _, _ = newmodels.MODELS[name]
    path = str(newmodels.SRC / rel)
    calib, feeds = make(calib_n, 1), make(n, 3000)
    ref = zoo.session_runner(path)
    floats = [ref(f)[0] for f in feeds]

    def judge(out: Path, label: str) -> None:
        run = zoo.session_runner(out)
        got = [run(f)[0] for f in feeds]
        agree = np.mean([np.argmax(r) == np.argmax(g) for r, g in zip(floats, got)])
        cos = [float(r.ravel() @ g.ravel() / (np.linalg.norm(r) * np.linalg.norm(g))) for r, g in zip(floats, got)]
        print(f"{label}: top-1 agreement {agree:.4f}, cosine mean {np.mean(cos):.4f} min {min(cos):.4f} ({n} fresh feeds)",
              flush=True)

    for preset in presets:
        cfg = resolve_config(preset).replace(repair=False)
        plain_out = out_dir / f"fresh_{name}_{preset}_plain.onnx"
        plain = onnxptq.quantize(path, cfg, data=list(calib), output=str(plain_out))
        candidates, rung = list(plain.plan.nodes), ladder(plain.plan)[0]
        print("==", name, preset, f"{len(candidates)} candidates, rung {rung.describe(plain.plan)}", flush=True)
        judge(plain_out, "plain")
        for k in lengths:
            out = out_dir / f"fresh_{name}_{preset}_p{k}.onnx"
            onnxptq.quantize(path, stepped_config(cfg, plain.plan, rung, candidates[:k]), data=list(calib), output=str(out))
            judge(out, f"prefix {k}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--scan", metavar="MODEL")
    mode.add_argument("--fresh", nargs=2, metavar=("N", "MODEL"))
    ap.add_argument("--presets", required=True)
    ap.add_argument("--lengths", required=True, help="prefix lengths, comma separated")
    ap.add_argument("--calib", type=int, default=12)
    ap.add_argument("--out-dir", default="/tmp/repair_prefixes")
    a = ap.parse_args()
    out_dir = Path(a.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    presets, lengths = a.presets.split(","), [int(k) for k in a.lengths.split(",")]
    if a.scan:
        scan(a.scan, presets, lengths, a.calib, out_dir)
    else:
        fresh(a.fresh[1], presets, lengths, a.calib, int(a.fresh[0]), out_dir)


if __name__ == "__main__":
    main()
