"""How realistic round 31's feeds are: each float model against what was drawn (bench/newmodels.py's generators).

* rxnfp_cls: the reaction class float gives each template's reactions (a class per template, the share of the
  template's reactions in its most common class: how consistently the fine-tuned classifier reads the templates).
* rxnfp_ft: the nearest gallery reaction (the bench's reading) of the same template as the query (the fingerprints'
  kNN template accuracy, the rxnfp paper's use).
* textgenrnn: the arg-max next character equal to the passage's real next character.
* pesto_g7: on sung lines (whose pitch was drawn), the frames sung: float's pitch within 50 cents of the drawn one
  (raw pitch accuracy) and its confidence >= 0.5 (voicing recall); on rests, confidence < 0.5.

    NEWMODELS31_SRC=/work/cache/newmodels31/src PYTHONPATH=src:.:bench python bench/round31_realism.py --n 48
"""

from __future__ import annotations

import argparse
import collections
import random

import numpy as np
import onnxruntime as ort

import newmodels as nm


def _session(key: str):
    s = ort.InferenceSession(nm.MODELS[key][0], providers=["CPUExecutionProvider"])
    return lambda feed: s.run(None, feed)


def rxnfp(n: int) -> None:
    rng = random.Random(1000)
    named = [nm._rx_reaction_named(rng) for _ in range(n)]
    run = _session("rxnfp_cls")
    classes = np.concatenate([np.argmax(run(nm._rx_batch([r for _, r in named[i:i + 8]], "bert_ft_10k_25s"))[0], 1)
                              for i in range(0, n, 8)])
    by = collections.defaultdict(list)
    for (name, _), c in zip(named, classes):
        by[name].append(int(c))
    for name, cs in sorted(by.items()):
        top, count = collections.Counter(cs).most_common(1)[0]
        print(f"rxnfp_cls  {name:28s} n={len(cs):2d} most common class {top:2d} share {count / len(cs):.2f}")
    distinct = len({collections.Counter(cs).most_common(1)[0][0] for cs in by.values()})
    print(f"rxnfp_cls  templates {len(by)}, distinct majority classes {distinct}")
    gallery = nm._rx_gallery()
    ft = _session("rxnfp_ft")
    g = np.concatenate([ft(nm._rx_batch([r for _, r in gallery[i:i + 16]], "bert_ft"))[0] for i in range(0, 96, 16)])
    q = np.concatenate([ft(nm._rx_batch([r for _, r in named[i:i + 8]], "bert_ft"))[0] for i in range(0, n, 8)])
    g /= np.linalg.norm(g, axis=1, keepdims=True)
    picks = np.argmax((q / np.linalg.norm(q, axis=1, keepdims=True)) @ g.T, axis=1)
    same = np.mean([gallery[p][0] == named[i][0] for i, p in enumerate(picks)])
    print(f"rxnfp_ft   nearest gallery reaction of the query's template: {same:.3f} of {n}")


def textgenrnn(n: int) -> None:
    passages = nm._wl_corpus()[1][1::2]
    rng = random.Random(1000)
    run = _session("textgenrnn")
    hits = []
    for _ in range(n):
        p = rng.choice(passages)
        k = rng.randint(5, min(200, len(p) - 1))
        pred = int(np.argmax(run({"input": nm._tg_encode(p[:k])[None]})[0][0]))
        hits.append(nm._TG_VOCAB.get(p[k], -1) == pred)
    print(f"textgenrnn next char = the passage's: {np.mean(hits):.3f} of {n}")


def pesto(n: int) -> None:
    rng = random.Random(1000)
    run = _session("pesto_g7")
    rpa, recall, rest_ok = [], [], []
    for _ in range(n):
        audio, track, sung = nm._pesto_sung_track(rng, rng.uniform(1.2, 2.4))
        pitch, conf = (o[0] for o in run({"audio": audio[None]})[:2])
        centres = (np.arange(len(pitch)) * 160).clip(0, len(track) - 1)
        drawn, voiced = track[centres], sung[centres]
        rpa.append(np.abs(pitch - drawn)[voiced] <= 0.5)
        recall.append(conf[voiced] >= 0.5)
        rest_ok.append(conf[~voiced] < 0.5)
    print(f"pesto_g7   sung frames: pitch within 50 cents of the drawn {np.mean(np.concatenate(rpa)):.3f}, "
          f"confidence >= 0.5 on {np.mean(np.concatenate(recall)):.3f}; rests: confidence < 0.5 on "
          f"{np.mean(np.concatenate(rest_ok)):.3f} ({n} lines)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=48)
    args = ap.parse_args()
    rxnfp(args.n)
    textgenrnn(args.n * 4)
    pesto(args.n // 2)


if __name__ == "__main__":
    main()
