"""Round 29: how realistic the bench's feeds are, by each float model against what was drawn.

    NEWMODELS29_SRC=/work/cache/newmodels29/src PYTHONPATH=src:.:bench python bench/round29_realism.py
"""
from __future__ import annotations

import collections
import sys
from pathlib import Path

import numpy as np

import newmodels as nm
from testkit import zoo


def main() -> None:
    run = zoo.session_runner(Path(nm.MODELS["fpkws_wrn12"][0]))
    p = nm.fpkws_keyword_prob(run, nm.fpkws_feeds(96, 1000))
    print(f"fpkws: keyword windows detected {np.mean(p[0::2] > 0.1):.3f}, other words {np.mean(p[1::2] > 0.1):.3f} "
          f"(96 windows); p within 0.05 of the 0.1 threshold on {np.mean(np.abs(p - 0.1) < 0.05):.3f}")
    run = zoo.session_runner(Path(nm.MODELS["fer_mini_xception"][0]))
    probs = np.concatenate([run(f)[0] for f in nm.fer_feeds(48, 1000)])
    top = np.sort(probs, axis=1)
    print("fer: top emotions", dict(collections.Counter(nm._FER_LABELS[i] for i in probs.argmax(1))),
          f"median top-1 minus top-2 {np.median(top[:, -1] - top[:, -2]):.3f}, under 0.05 on {np.mean(top[:, -1] - top[:, -2] < 0.05):.3f}")
    sys.path.insert(0, str(nm.SRC29))
    from musicnn import configuration as cfg

    feeds = nm.musicnn_feeds(48, 1000)
    for key, labels in (("musicnn_mtt", cfg.MTT_LABELS), ("musicnn_msd_vgg", cfg.MSD_LABELS)):
        run = zoo.session_runner(Path(nm.MODELS[key][0]))
        out = np.array([run(f)[0][0] for f in feeds])
        tops = collections.Counter(labels[i] for row in out for i in np.argsort(row)[-3:])
        print(f"{key}: top-3 tags over 48 patches {dict(tops.most_common(10))}; highest tag median {np.median(out.max(1)):.3f}")


if __name__ == "__main__":
    main()
