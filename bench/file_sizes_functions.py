"""The bytes of a delivered file's local functions, one row each (issue 26 item 2, blockfile13).

Why: MX9's activation functions are its second cost over BFP16 on the median zoo row (akiki_vad:
0.0079 of fp32 against 0.0051), after the micro-exponent bits. This says how much of each
definition is its attribute declarations, its doc string and its value names, and which bodies
differ only in their constants (shape-baked Reshape/Pad/Slice values), i.e. what sharing one
shape-generic body could at most save.

    PYTHONPATH=src:. python bench/file_sizes_functions.py FILE.onnx [FILE.onnx ...]
"""

from __future__ import annotations

import argparse
import collections

import _common  # noqa: F401 - the repository root on sys.path
import onnx

from file_sizes_anatomy import _skeleton


def function_rows(path: str) -> list[str]:
    """One line per function (bytes, nodes, attribute declarations, doc, value-name bytes), then
    how many distinct bodies remain with constants blanked and what the duplicates weigh."""
    m = onnx.load(path)
    out = [f"{path}: file {m.ByteSize()} B, {len(m.functions)} functions, {sum(f.ByteSize() for f in m.functions)} B"]
    for f in m.functions:
        names = sum(len(v) for n in f.node for v in list(n.input) + list(n.output))
        attrs = sum(a.ByteSize() + 3 for a in f.attribute_proto) + sum(len(a) + 2 for a in f.attribute)
        out.append(f"  {f.domain}.{f.name}: {f.ByteSize()} B, {len(f.node)} nodes, attribute declarations {attrs} B, "
                   f"doc {len(f.doc_string)} B, value names {names} B")
    bodies: dict[bytes, list[onnx.FunctionProto]] = collections.defaultdict(list)
    for f in m.functions:
        bodies[_skeleton(f, blank_constants=True)].append(f)
    dup = sum(sum(f.ByteSize() for f in fs) - max(f.ByteSize() for f in fs) for fs in bodies.values())
    out.append(f"  distinct bodies with constants blanked: {len(bodies)}; the others weigh {dup} B "
               f"({dup / m.ByteSize():.4f} of this file)")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+")
    args = ap.parse_args(argv)
    for p in args.files:
        print("\n".join(function_rows(p)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
