"""What one shared "core" function would save in a block-format file: the longest run of
top-level nodes that several of our activation quantizer definitions hold identically (the block
scale, the element rounding and the Inf/NaN put-back after the view), outlined once and called
from each definition (issue 26 item 2, branch blockfile10; measured, not built).

Why: the definitions left in a file after share_functions are per body *shape* (the view: a
transpose for last-axis blocks, halves for one-row views, a reshape for rank 2), and their common
part cannot be lifted as constants: it is a run of nodes. This counts, per file, the best such run
(canonical names: a node list equal up to renaming, its constants' values and ranks included)
and the bytes outlining it would save: (k - 1) copies of the run, less k calls and one
definition's framing. It does not change any file.

    python bench/file_sizes_common_tails.py --rows after.json --dir after_files [--presets MXINT8,MXFP8_E4M3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import _common  # noqa: F401 - the repository root on sys.path
import onnx

#: Shortest run worth a call (a call and a definition's framing cost ~60-100 B).
MIN_NODES = 6


def _subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    return [a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH]


def _walk(nodes) -> list[onnx.NodeProto]:
    out = []
    for n in nodes:
        out.append(n)
        for g in _subgraphs(n):
            out.extend(_walk(g.node))
    return out


def _reads_after(fn: onnx.FunctionProto, j: int) -> set[str]:
    read = set(fn.output)
    for n in _walk(fn.node[j:]):
        read.update(n.input)
    return read


def window_signature(fn: onnx.FunctionProto, i: int, j: int) -> tuple[bytes, int, int, int] | None:
    """(canonical bytes, node bytes, external inputs, outputs) of ``fn.node[i:j]``; None when a node
    reads a function attribute (an outlined copy could not)."""
    names: dict[str, str] = {}
    n_ext = n_def = 0
    defined: set[str] = set()
    parts = []
    size = 0
    for top in fn.node[i:j]:
        size += top.ByteSize()
        for n in _walk([top]):
            if any(a.ref_attr_name for a in n.attribute):
                return None
    for top in fn.node[i:j]:
        c = onnx.NodeProto()
        c.CopyFrom(top)
        c.name = ""

        def rename(node: onnx.NodeProto) -> None:
            nonlocal n_ext, n_def
            for k, x in enumerate(node.input):
                if x and x not in names:
                    names[x] = f"e{n_ext}"
                    n_ext += 1
                node.input[k] = names.get(x, x)
            for a in node.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    a.g.name = ""
                    for s in a.g.node:
                        rename(s)
                    for o in a.g.output:
                        o.name = names.get(o.name, o.name)
            for k, o in enumerate(node.output):
                if o:
                    defined.add(o)
                    names[o] = f"d{n_def}"
                    n_def += 1
                    node.output[k] = names[o]

        rename(c)
        parts.append(c.SerializeToString(deterministic=True))
    outs = sorted(names[o] for o in defined & _reads_after(fn, j))
    return b"".join(parts) + repr(outs).encode(), size, n_ext, len(outs)


def best_outline(model: onnx.ModelProto, domain: str = "onnxptq") -> tuple[int, int, int]:
    """(bytes saved, nodes in the run, definitions sharing it) of the best single run."""
    fns = [f for f in model.functions if f.domain == domain]
    seen: dict[bytes, dict[str, tuple[int, int, int, int]]] = defaultdict(dict)
    for f in fns:
        n = len(f.node)
        for i in range(n):
            for j in range(i + MIN_NODES, n + 1):
                sig = window_signature(f, i, j)
                if sig is None:
                    break
                key, size, n_in, n_out = sig
                seen[key].setdefault(f.name, (size, n_in, n_out, j - i))
    best = (0, 0, 0)
    for key, members in seen.items():
        if len(members) < 2:
            continue
        size, n_in, n_out, length = next(iter(members.values()))
        k = len(members)
        call = 12 + 3 * (n_in + n_out)
        saved = (k - 1) * size - k * call - (40 + 3 * (n_in + n_out))
        if saved > best[0]:
            best = (saved, length, k)
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", required=True, help="file_sizes.py --keep JSON")
    ap.add_argument("--dir", required=True, help="its --out-dir")
    ap.add_argument("--presets", default="BFP16,MX9,MXINT8,MXFP8_E4M3")
    args = ap.parse_args(argv)
    presets = args.presets.split(",")
    rows = [r for r in json.loads(Path(args.rows).read_text()) if r.get("preset") in presets and "ratio" in r]
    med: dict[str, tuple[list[float], list[float]]] = {p: ([], []) for p in presets}
    print("| model | preset | file | functions | definitions | best shared run saves | file after |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        path = Path(args.dir) / f"{r['model'].replace(':', '_')}.{r['preset']}.onnx"
        m = onnx.load(str(path))
        size = path.stat().st_size
        saved, length, k = best_outline(m)
        fp32 = r["fp32_bytes"]
        funcs = sum(f.ByteSize() for f in m.functions)
        print(f"| {r['model']} | {r['preset']} | {size / fp32:.4f} | {funcs} B | {len(m.functions)} | "
              f"{saved} B ({length} nodes, {k} defs) | {(size - saved) / fp32:.4f} |", flush=True)
        med[r["preset"]][0].append(size / fp32)
        med[r["preset"]][1].append((size - saved) / fp32)
    for p, (a, b) in med.items():
        if a:
            print(f"| **median** | {p} | {statistics.median(a):.4f} | | | | {statistics.median(b):.4f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
