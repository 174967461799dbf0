"""Round 28: how realistic the feeds are, by the float models against what was drawn (RESULTS.md, newmodels28).

* resemblyzer_ge2e: the enrolled speaker picked against the speaker that spoke (seed 1000's utterances cycle the six).
* crepe_tiny / crepe_full: the share of frames called voiced, the median voiced pitch per espeak pitch setting is not
  known to the drawing, so the voiced pitch's range (5th-95th percentile) is printed against speech's 70-400 Hz.
* face_parsing: the classes float finds on the portraits (skin, hair, hat, cloth ...) and the share of pixels called hair.
* wordllama_l2: each query's own passage (the rest of its docstring) ranked first among all passages (the package's
  intended retrieval), against 1/number of passages by chance.

    NEWMODELS28_SRC=/work/cache/newmodels28/src PYTHONPATH=src:.:bench python bench/round28_realism.py
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

import newmodels as nm
from testkit import zoo


def main() -> None:
    run = zoo.session_runner(Path(nm.MODELS["resemblyzer_ge2e"][0]))
    feeds = nm.resemblyzer_feeds(48, 1000)
    picked = np.argmax(nm._rsz_utterance_embeds(run, feeds) @ nm._rsz_enrolled(run).T, axis=1)
    truth = np.arange(48) % len(nm._RSZ_SPEAKERS)
    sims = np.sort(nm._rsz_utterance_embeds(run, feeds) @ nm._rsz_enrolled(run).T, axis=1)
    print(f"resemblyzer_ge2e: float identifies the speaker on {np.mean(picked == truth):.3f} of 48 utterances; "
          f"median margin best - second cosine {np.median(sims[:, -1] - sims[:, -2]):.4f}")
    for key in ("crepe_tiny", "crepe_full"):
        run = zoo.session_runner(Path(nm.MODELS[key][0]))
        feeds = nm.MODELS[key][1](48 if key == "crepe_tiny" else 24, 1000)
        f0, per = zip(*(nm._crepe_decode(run(f)[0]) for f in feeds))
        f0, per = np.concatenate(f0), np.concatenate(per)
        voiced = per >= 0.21
        near = np.mean(np.abs(per - 0.21) < 0.05)
        print(f"{key}: {len(per)} frames, voiced {voiced.mean():.3f}, voiced pitch 5-95 % "
              f"{np.percentile(f0[voiced], 5):.0f}-{np.percentile(f0[voiced], 95):.0f} Hz; periodicity within 0.05 of "
              f"the 0.21 threshold on {near:.3f} of frames")
    run = zoo.session_runner(Path(nm.MODELS["face_parsing"][0]))
    maps = [run(f)[0][0].argmax(0) for f in nm.face_parsing_feeds(16, 1000)]
    hair = np.array([np.mean(m == 17) for m in maps])
    found = sorted({int(c) for m in maps for c, k in zip(*np.unique(m, return_counts=True)) if k / m.size > 0.01})
    print(f"face_parsing: classes over 1 % of a portrait: {found}; hair on {np.mean(hair > 0.01):.3f} of 16 portraits "
          f"(astronaut {np.mean(hair[0::2] > 0.01):.2f}, cameraman {np.mean(hair[1::2] > 0.01):.2f}), "
          f"median hair share {np.median(hair):.3f}")
    run = zoo.session_runner(Path(nm.MODELS["wordllama_l2"][0]))
    queries, passages = nm._wl_corpus()
    q = np.concatenate([run(nm._wl_batch(queries[i:i + 32]))[0] for i in range(0, len(queries), 32)])
    d = np.concatenate([run(nm._wl_batch(passages[i:i + 32]))[0] for i in range(0, len(passages), 32)])
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    s = q @ d.T
    top = np.argmax(s, axis=1)
    srt = np.sort(s[:, ::5][:, :96], axis=1)
    print(f"wordllama_l2: {len(queries)} docstring pairs; a query's own passage first of all {len(passages)} on "
          f"{np.mean(top == np.arange(len(queries))):.3f} (chance {1 / len(passages):.4f}); over the bench's 96 passages "
          f"the median top-1 minus top-2 cosine is {np.median(srt[:, -1] - srt[:, -2]):.4f}")


if __name__ == "__main__":
    main()
