"""Round 29: how musicnn's top-3 tags move under each preset, against float's own gap between its 3rd and 4th tag.

A patch whose top-3 set changed is counted with float's gap there (score 3 minus score 4): a gap within the quantized
model's own error on that patch (its largest |difference| over the 50 tags) is a near-tie any rounding can flip; also
the song-level reading the package prints (tagger.top_tags: the taggram averaged over a clip's patches, top 3), over
clips of ``--patches`` consecutive 3 s patches (default 4; ``--songs`` of them, default 12).

    NEWMODELS29_SRC=/work/cache/newmodels29/src PYTHONPATH=src:.:bench python bench/round29_tags.py musicnn_mtt \
        /work/cache/newmodels29/out [--songs 24 --patches 5]
"""
from __future__ import annotations

import argparse
import random
from pathlib import Path

import numpy as np

import newmodels as nm
from testkit import zoo


def song_feeds(n: int, seed: int, patches: int = 4) -> list[list[dict]]:
    """Clips of ``patches`` consecutive 3 s patches (extractor's batch_data without overlap) of synthesized music."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        rep = nm._musicnn_logmel(np.concatenate([nm._music_clip(rng, 3.0) for _ in range(patches)]))
        out.append([{"model/Placeholder:0": rep[None, k * nm._MUSICNN_FRAMES:(k + 1) * nm._MUSICNN_FRAMES]}
                    for k in range(patches) if (k + 1) * nm._MUSICNN_FRAMES <= len(rep)])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("key")
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--songs", type=int, default=12)
    ap.add_argument("--patches", type=int, default=4)
    args = ap.parse_args()
    key, out_dir = args.key, args.out_dir
    ref = zoo.session_runner(Path(nm.MODELS[key][0]))
    feeds = nm.musicnn_feeds(48, 1000)
    songs = song_feeds(args.songs, 2000, args.patches)
    f_out = np.array([ref(f)[0][0] for f in feeds])
    f_song = [np.mean([ref(p)[0][0] for p in s], axis=0) for s in songs]
    srt = np.sort(f_out, axis=1)
    print(f"{key}: float's gap between tag 3 and tag 4: median {np.median(srt[:, -3] - srt[:, -4]):.4f}, "
          f"under 0.01 on {np.mean(srt[:, -3] - srt[:, -4] < 0.01):.3f} of 48 patches")
    print("| preset | top-3 set kept (48 patches) | changed where float's gap 3-4 ≤ the patch's max error | gaps at the changes | "
          f"songs' top-3 kept ({args.songs} clips of {args.patches} patches) | max |error| median |")
    print("| --- | --- | --- | --- | --- | --- |")
    for path in sorted(out_dir.glob(f"{key}.*.onnx")):
        test = zoo.session_runner(path)
        q = np.array([test(f)[0][0] for f in feeds])
        keep = [set(np.argsort(a)[-3:]) == set(np.argsort(b)[-3:]) for a, b in zip(f_out, q)]
        err = np.abs(q - f_out).max(axis=1)
        gaps = srt[:, -3] - srt[:, -4]
        changed = [i for i, k in enumerate(keep) if not k]
        near = sum(gaps[i] <= err[i] for i in changed)
        q_song = [np.mean([test(p)[0][0] for p in s], axis=0) for s in songs]
        song_keep = np.mean([set(np.argsort(a)[-3:]) == set(np.argsort(b)[-3:]) for a, b in zip(f_song, q_song)])
        print(f"| {path.name.split('.')[1]} | {np.mean(keep):.4f} | {near} of {len(changed)} | "
              f"{', '.join(f'{gaps[i]:.4f}' for i in changed)} | {song_keep:.3f} | {np.median(err):.4f} |")


if __name__ == "__main__":
    main()
