"""Where the bytes of a quantized file go (issue 26 item 2, branch blocksize): initializers by
dtype, node records by op type, the bytes of names, function definitions and how many distinct
bodies they hold (byte-identical but for the name; identical but for constant values).

Why: bench/file_sizes.py's breakdown says "functions 56 KB" but not that 11 of 24 definitions
were the same body under another name; this one says what sharing would leave.

    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/file_sizes_anatomy.py --model shipped:cls --preset MXINT8 [--tree main-src]
    python bench/file_sizes_anatomy.py --file some.onnx [--one]      # --one: bytes by kind
    python bench/file_sizes_anatomy.py --rows run.json --dir files/   # median kinds of a file_sizes.py --keep run
    python bench/file_sizes_anatomy.py --rows run.json --dir files/ --per-model BFP16,MXFP4   # per model, sorted
    python bench/file_sizes_anatomy.py --rows run.json --dir files/ --rows-kinds nm:surfaces_dtc@BFP16,...  # rows by kind
    python bench/file_sizes_anatomy.py --rows run.json --dir files/ --overhead BFP16,MX9   # against the ideal, by part
    python bench/file_sizes_anatomy.py --rows run.json --dir files/ --parts ''   # every row by PARTS, furthest over its goal first

A file kept by ``file_sizes.py --keep`` has a sidecar (``*.names.json``) with its initializers'
in-memory names: the delivered file writes them short, and a packed stream's kind is read there.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import sys
import tempfile
from pathlib import Path

import _common  # noqa: F401 - the repository root on sys.path
import numpy as np
import onnx

import file_sizes as fs


def _skeleton(fn: onnx.FunctionProto, blank_constants: bool) -> bytes:
    g = onnx.FunctionProto()
    g.CopyFrom(fn)
    g.name = ""
    if blank_constants:
        for node in g.node:
            if node.op_type == "Constant":
                del node.attribute[:]
    return g.SerializeToString(deterministic=True)


def anatomy(path: str, reference_bytes: int | None = None) -> list[str]:
    m = onnx.load(path)
    g = m.graph
    size = m.ByteSize()
    ref = reference_bytes or size
    out = [f"file {size} B" + (f" ({size / ref:.3f}x the fp32 file)" if reference_bytes else "")]
    by_type: dict[str, int] = collections.Counter()
    count: dict[str, int] = collections.Counter()
    for t in g.initializer:
        k = onnx.TensorProto.DataType.Name(t.data_type)
        by_type[k] += t.ByteSize()
        count[k] += 1
    out.append("initializers: " + ", ".join(f"{k} {v} B ({count[k]})" for k, v in by_type.most_common())
               + f"; their names {sum(len(t.name) for t in g.initializer)} B")
    ops: dict[str, int] = collections.Counter()
    n_ops: dict[str, int] = collections.Counter()
    for n in g.node:
        key = n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}:{n.op_type}"
        ops[key] += n.ByteSize()
        n_ops[key] += 1
    strings = sum(len(n.name) + sum(map(len, n.input)) + sum(map(len, n.output)) for n in g.node)
    out.append(f"nodes: {len(g.node)}, {sum(ops.values())} B, of which names {strings} B; by op: "
               + ", ".join(f"{k} {n_ops[k]}x {v} B" for k, v in ops.most_common(10)))
    fns = list(m.functions)
    total = sum(f.ByteSize() for f in fns)
    exact = {_skeleton(f, False) for f in fns}
    shapes = collections.defaultdict(list)
    for f in fns:
        shapes[_skeleton(f, True)].append(f)
    kept = sum(v[0].ByteSize() for v in shapes.values())
    out.append(f"functions: {len(fns)} definitions, {total} B; {len(exact)} distinct bodies; "
               f"{len(shapes)} distinct but for constant values ({kept} B, one of each)")
    out.append(f"value_info: {sum(v.ByteSize() for v in g.value_info)} B")
    return out


def _constant_fed(g: onnx.GraphProto) -> set[int]:
    """Indices of main-graph nodes that read only initializers or such nodes' outputs (the decode
    chains onnxruntime folds at load; a source model's own constant subgraphs count too)."""
    const = {t.name for t in g.initializer} | {""}
    out: set[int] = set()
    for i, n in enumerate(g.node):
        if n.op_type != "Constant" and n.input and all(x in const for x in n.input):
            out.add(i)
            const.update(n.output)
    return out


def in_memory_names(path: str | Path, g: onnx.GraphProto) -> list[str]:
    """The names the file's main-graph initializers had in memory, in order: from the sidecar
    ``file_sizes.py --keep`` writes (the delivered file writes 1-3 letter names since blockfile12),
    matched in order by type and shape (an initializer the file stores sparse is skipped); the
    file's own names where there is no sidecar or no entry matches (the entries are not consumed then)."""
    import json

    side = fs.names_of(path)
    if not side.is_file():
        return [t.name for t in g.initializer]
    entries = json.loads(side.read_text())
    half = {onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16}

    def same(entry: list, t: onnx.TensorProto) -> bool:  # a small float the file stores 16-bit (packed18) is the same entry
        return entry[2] == list(t.dims) and (entry[1] == t.data_type or (entry[1] == onnx.TensorProto.FLOAT and t.data_type in half))

    out, k = [], 0
    for t in g.initializer:
        j = k
        while j < len(entries) and not same(entries[j], t):
            j += 1
        if j < len(entries):
            out.append(entries[j][0])
            k = j + 1
        else:  # a tensor only the file has (a compact form's pieces, packed19): the entries after it still match
            out.append(t.name)
    return out


def _initializer_kind(t: onnx.TensorProto, name: str | None = None) -> str:
    name = t.name if name is None else name
    if name.startswith("packed_"):
        if "_exponents_at" in name or name.endswith("_exponents_esc"):  # planes (blockfile8), escapes (blockfile11)
            return "exponents"
        if "_singles" in name:  # one-element blocks as small floats: code and exponent (blockfile8)
            return "one-element small floats"
        for tail, kind in (("_codes", "payload"), ("_codes_lo", "payload"), ("_codes_hi", "payload"),
                           ("_exponents", "exponents"), ("_shifts", "microexponents")):
            if name.endswith(tail):
                return kind
    if name.startswith("pkt_"):
        return "tables"
    if name.startswith("fc") and name[2:].isdigit():
        return "lifted constants"
    if t.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE):
        return "float tensors kept"
    if t.data_type in (onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16):
        return "16-bit tensors"
    if t.data_type in (onnx.TensorProto.INT8, onnx.TensorProto.UINT8, onnx.TensorProto.INT4,
                       onnx.TensorProto.FLOAT8E4M3FN, onnx.TensorProto.FLOAT8E5M2):
        return "payload"
    return "int/other tensors"


def kinds(path: str) -> dict[str, int]:
    """Bytes of a delivered file by kind (issue 26 item 2's anatomy, branch blockfile7): payload
    (element codes), exponents, microexponents, decode tables, lifted constants, float tensors kept,
    our call nodes (and of them their attributes), decode-chain nodes, the model's own nodes,
    function definitions, value_info, the rest (opsets, metadata, protobuf framing); names are a
    separate reading across initializers and nodes (already inside the kinds above)."""
    m = onnx.load(path)
    g = m.graph
    out: dict[str, int] = collections.Counter()
    for t, name in zip(g.initializer, in_memory_names(path, g)):
        out[_initializer_kind(t, name)] += t.ByteSize()
    chain = _constant_fed(g)
    for i, n in enumerate(g.node):
        if n.domain not in ("", "ai.onnx"):
            out["our calls"] += n.ByteSize()
            out["  of which attributes"] += sum(a.ByteSize() for a in n.attribute)
            out["  of which names"] += len(n.name) + sum(map(len, n.input)) + sum(map(len, n.output))
        elif i in chain:
            out["decode chains"] += n.ByteSize()
        else:
            out["own nodes"] += n.ByteSize()
    out["functions"] = sum(f.ByteSize() for f in m.functions)
    out["value_info"] = sum(v.ByteSize() for v in g.value_info)
    out["names (all nodes + initializers)"] = (sum(len(t.name) for t in g.initializer)
                                              + sum(len(n.name) + sum(map(len, n.input)) + sum(map(len, n.output)) for n in g.node))
    counted = sum(v for k, v in out.items() if not k.startswith("  ") and not k.startswith("names"))
    out["rest (framing, opsets, metadata)"] = m.ByteSize() - counted
    out["file"] = m.ByteSize()
    return dict(out)


def anatomy_table(rows: list[dict], files: Path) -> str:
    """Median share of the fp32 file per kind and preset over the rows of a file_sizes.py --keep run."""
    import numpy as np

    per: dict[str, dict[str, list[float]]] = collections.defaultdict(lambda: collections.defaultdict(list))
    for r in rows:
        f = files / f"{r['model'].replace(':', '_')}.{r['preset']}.onnx"
        if "ratio" not in r or not f.is_file():
            continue
        for k, v in kinds(str(f)).items():
            per[r["preset"]][k].append(v / r["fp32_bytes"])
    presets = list(per)
    keys = list(dict.fromkeys(k for p in presets for k in per[p]))
    lines = ["| kind (median share of fp32) | " + " | ".join(presets) + " |", "|---|" + "---|" * len(presets)]
    for k in keys:
        lines.append(f"| {k} | " + " | ".join(f"{np.median(per[p][k]):.4f}" if per[p].get(k) else "—" for p in presets) + " |")
    return "\n".join(lines)


#: kinds summed per model by :func:`per_model_table`: the weights' own bytes, and what else a file holds
WEIGHT_KINDS = ("payload", "exponents", "microexponents", "one-element small floats")
OURS_KINDS = ("tables", "lifted constants", "decode chains", "our calls", "functions")


def per_model_table(rows: list[dict], files: Path, preset: str) -> str:
    """Per model, one preset: the file's share of fp32, of which the quantized weights (payload,
    exponents, shifts), the float tensors the plan keeps, the model's own nodes, our decode and
    quantizer bytes (tables, chains, calls, function definitions), and the rest; sorted by ratio.

    Why (branch blockfile8): the medians hide which rows cannot reach the issue's targets and why
    (a row whose own nodes alone are 0.09 of fp32 cannot reach 0.30 with 9-bit weights)."""
    lines = [f"| model ({preset}) | file | weights | float kept | own nodes | our decode + quantizers | rest |",
             "|---|---|---|---|---|---|---|"]
    out = []
    for r in rows:
        f = files / f"{r['model'].replace(':', '_')}.{r['preset']}.onnx"
        if r["preset"] != preset or "ratio" not in r or not f.is_file():
            continue
        k, fp = kinds(str(f)), r["fp32_bytes"]
        w = sum(k.get(x, 0) for x in WEIGHT_KINDS)
        ours = sum(k.get(x, 0) for x in OURS_KINDS)
        kept, own = k.get("float tensors kept", 0), k.get("own nodes", 0)
        rest = k["file"] - w - ours - kept - own
        out.append((k["file"] / fp, f"| {r['model']} | {k['file'] / fp:.3f} | {w / fp:.3f} | {kept / fp:.3f} | {own / fp:.3f} | "
                                    f"{ours / fp:.3f} | {rest / fp:.3f} |"))
    return "\n".join(lines + [line for _, line in sorted(out)])


def rows_kinds_table(rows: list[dict], files: Path, picks: list[tuple[str, str]]) -> str:
    """The chosen (model, preset) rows' bytes by kind, as shares of their fp32 files: what each
    holds above its weights' payload (branch blockfile11: the rows at the medians, item 1 of the
    task "say what is above 0.28x on each")."""
    by = {(r["model"], r["preset"]): r for r in rows if "ratio" in r}
    cols = [("payload", ("payload",)), ("exponents", ("exponents",)), ("shifts", ("microexponents",)),
            ("one-element", ("one-element small floats",)), ("float kept", ("float tensors kept",)),
            ("16-bit", ("16-bit tensors",)), ("own nodes", ("own nodes",)),
            ("decode (tables, chains, lifted, ints)", ("tables", "decode chains", "lifted constants", "int/other tensors")),
            ("calls", ("our calls",)), ("functions", ("functions",)), ("rest", ("rest (framing, opsets, metadata)",))]
    lines = ["| row | file | " + " | ".join(c for c, _ in cols) + " |", "|---|---|" + "---|" * len(cols)]
    for model, preset in picks:
        r = by[(model, preset)]
        k, fp = kinds(str(files / f"{model.replace(':', '_')}.{preset}.onnx")), r["fp32_bytes"]
        lines.append(f"| {model} {preset} | {k['file'] / fp:.3f} | "
                     + " | ".join(f"{sum(k.get(x, 0) for x in ks) / fp:.3f}" for _, ks in cols) + " |")
    return "\n".join(lines)


#: the ideal an 8-bit block format stores a weight element in (issue 26 item 2, blockfile12's brief):
#: the 8-bit code, one exponent byte a block (and MX9's one shift bit per two elements)
IDEAL_BYTES_PER_ELEMENT = {"BFP16": 1 + 1 / 8, "MX9": 1 + 1 / 16 + 1 / 16, "MXINT8": 1 + 1 / 32, "MXFP8_E4M3": 1 + 1 / 32,
                           "MX6": (5 + 8 / 16 + 1 / 2) / 8, "MX4": (3 + 8 / 16 + 1 / 2) / 8,
                           "MXFP6_E3M2": (6 + 8 / 32) / 8, "MXFP6_E2M3": (6 + 8 / 32) / 8, "MXFP4": (4 + 8 / 32) / 8,
                           "BF16": 2.0, "FP16": 2.0}


def overhead(path: str) -> dict[str, int]:
    """Bytes of a delivered file in the parts issue 26 item 2 asks about (branch blockfile12): the
    weights' codes (and one-element small floats), exponent bytes (and MX9's shifts), function
    bodies, names (every string of the main graph: node names, node inputs and outputs, initializer
    and graph input/output names), float tensors kept (fp32 and 16-bit), decode tables and other
    constants, and the rest (node records without their names, framing, opsets); plus the count of
    quantized weight elements (a code byte each) and of blocks of one element (a small float's low byte)."""
    m = onnx.load(path)
    g = m.graph
    out: dict[str, int] = collections.Counter()
    elements = ones = 0
    for t, name in zip(g.initializer, in_memory_names(path, g)):
        kind = _initializer_kind(t, name)
        part = {"payload": "weights data", "one-element small floats": "weights data", "exponents": "exponents",
                "microexponents": "exponents", "float tensors kept": "float kept", "16-bit tensors": "float kept"}
        out[part.get(kind, "tables and constants")] += t.ByteSize() - len(t.name)
        out["names"] += len(t.name)
        if kind == "payload":
            elements += int(np.prod(t.dims)) if t.dims else 1
        elif kind == "one-element small floats" and name.endswith("_singles"):  # a block of one: its low byte
            ones += int(np.prod(t.dims)) if t.dims else 1
    out["names"] += sum(len(n.name) + sum(map(len, n.input)) + sum(map(len, n.output)) for n in g.node)
    out["names"] += sum(len(v.name) for v in list(g.input) + list(g.output))
    out["function bodies"] = sum(f.ByteSize() for f in m.functions)
    out["rest"] = m.ByteSize() - sum(out.values())
    out["file"] = m.ByteSize()
    out["elements"], out["one-element blocks"] = elements, ones
    return dict(out)


OVERHEAD_PARTS = ("weights data", "exponents", "function bodies", "names", "float kept", "tables and constants", "rest")


def overhead_table(rows: list[dict], files: Path, preset: str) -> str:
    """Per model (one preset), shares of the fp32 file: the file, the ideal (8 bits + an exponent
    byte a block, :data:`IDEAL_BYTES_PER_ELEMENT`, over the quantized elements), each part of
    :func:`overhead`, and the largest part over the ideal; the median of each column last."""
    per_el = IDEAL_BYTES_PER_ELEMENT[preset]
    head = ("| model (" + preset + ") | file | ideal | " + " | ".join(OVERHEAD_PARTS) + " | largest over the ideal |")
    lines = [head, "|---|" + "---|" * (len(OVERHEAD_PARTS) + 3)]
    cols: dict[str, list[float]] = collections.defaultdict(list)
    out = []
    for r in rows:
        f = files / f"{r['model'].replace(':', '_')}.{r['preset']}.onnx"
        if r["preset"] != preset or "ratio" not in r or not f.is_file():
            continue
        o, fp = overhead(str(f)), r["fp32_bytes"]
        ideal = o["elements"] * per_el + o.get("one-element blocks", 0) * 2  # a block of one: code + exponent byte
        over = {"exponents over an exponent byte a block": o["weights data"] + o["exponents"] - ideal,
                **{k: o[k] for k in OVERHEAD_PARTS[2:]}}
        top = max(over, key=over.get)
        vals = {"file": o["file"] / fp, "ideal": ideal / fp, **{k: o[k] / fp for k in OVERHEAD_PARTS}}
        for k, v in vals.items():
            cols[k].append(v)
        out.append((vals["file"], f"| {r['model']} | " + " | ".join(f"{v:.4f}" for v in vals.values())
                    + f" | {top} ({over[top] / fp:.4f}) |"))
    lines += [line for _, line in sorted(out)]
    lines.append("| **median** | " + " | ".join(f"{np.median(v):.4f}" for v in cols.values()) + " | |")
    return "\n".join(lines)


#: the categories issue 26 item 2 names (packed18's brief): what a file holds beyond its weights' elements and exponents
PARTS = ("elements", "exponents", "tables", "functions", "float weights kept", "biases", "structure")
#: (op type, input slot) a bias is read at; an ``Add`` whose other input a MatMul/Gemm/Conv makes counts too
BIAS_SLOTS = {("Conv", 2), ("ConvTranspose", 2), ("Gemm", 2), ("LSTM", 3), ("GRU", 3), ("RNN", 3)}
_BIAS_ADD_AFTER = {"MatMul", "Gemm", "Conv", "ConvTranspose", "MatMulInteger", "ConvInteger"}


def _final_readers(g: onnx.GraphProto, chain: set[int]) -> dict[str, list[tuple[onnx.NodeProto, int]]]:
    """Each main-graph initializer's readers past the decode chains onnxruntime folds (``Cast``,
    ``Gather`` of a table, ``DequantizeLinear``...): the (node, input slot) that reads what the
    chain makes of it."""
    readers: dict[str, list[tuple[int, int]]] = collections.defaultdict(list)
    for i, n in enumerate(g.node):
        for j, x in enumerate(n.input):
            readers[x].append((i, j))
    dq = {i for i, n in enumerate(g.node) if n.op_type == "DequantizeLinear"
          and all(x in {t.name for t in g.initializer} or not x for x in n.input)}
    out: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for t in g.initializer:
        seen, todo, found = set(), [t.name], []
        while todo:
            name = todo.pop()
            for i, j in readers.get(name, []):
                if (i in chain or i in dq) and (i, name) not in seen:
                    seen.add((i, name))
                    todo.extend(g.node[i].output)
                elif i not in chain and i not in dq:
                    found.append((g.node[i], j))
        out[t.name] = found
    return out


def _is_bias(readers: list[tuple[onnx.NodeProto, int]], producer: dict[str, onnx.NodeProto]) -> bool:
    if not readers:
        return False
    for node, slot in readers:
        if (node.op_type, slot) in BIAS_SLOTS:
            continue
        other = [x for k, x in enumerate(node.input) if k != slot]
        if node.op_type == "Add" and other and getattr(producer.get(other[0]), "op_type", "") in _BIAS_ADD_AFTER:
            continue
        return False
    return True


def parts(path: str) -> dict[str, int]:
    """Bytes of a delivered file in :data:`PARTS` (packed18): the weights' elements (packed codes,
    int8/int4 payload, a BF16/FP16 file's 16-bit weights), their exponents and shifts, decode tables
    and other small constants, function definitions, float weights the plan left float (fp32
    tensors that are not biases), biases (read at a Conv/Gemm/recurrent bias slot or added to a
    MatMul/Conv output, past any decode chain; any element type), and the graph's structure (node
    records, names, value_info, opsets, framing: the rest)."""
    m = onnx.load(path)
    g = m.graph
    chain = _constant_fed(g)
    readers = _final_readers(g, chain)
    producer = {o: n for n in g.node for o in n.output}
    out: dict[str, int] = collections.Counter()
    for t, name in zip(g.initializer, in_memory_names(path, g)):
        kind = _initializer_kind(t, name)
        size = t.ByteSize()
        if kind in ("microexponents", "exponents"):
            out["exponents"] += size
        elif kind in ("tables", "lifted constants") or name.startswith(("packed_", "pkt_")):
            out["elements" if kind in ("payload", "one-element small floats") else "tables"] += size
        elif _is_bias(readers[t.name], producer):
            out["biases"] += size
        elif kind in ("payload", "16-bit tensors", "one-element small floats"):
            out["elements"] += size
        elif kind == "float tensors kept":
            out["float weights kept"] += size
        else:
            out["tables"] += size
    out["functions"] = sum(f.ByteSize() for f in m.functions)
    out["structure"] = m.ByteSize() - sum(out.values())
    out["file"] = m.ByteSize()
    return dict(out)


def parts_medians(rows: list[dict], files: Path, presets: list[str] | None = None) -> str:
    """Per preset, the median share of the fp32 file of each of :data:`PARTS` over the rows."""
    per: dict[str, dict[str, list[float]]] = collections.defaultdict(lambda: collections.defaultdict(list))
    for r in rows:
        f = files / f"{r['model'].replace(':', '_')}.{r['preset']}.onnx"
        if "ratio" not in r or not f.is_file() or (presets and r["preset"] not in presets):
            continue
        k = parts(str(f))
        for x in PARTS + ("file",):
            per[r["preset"]][x].append(k.get(x, 0) / r["fp32_bytes"])
    lines = ["| preset (median of rows) | rows | file | " + " | ".join(PARTS) + " |", "|---|---|---|" + "---|" * len(PARTS)]
    for p, cols in per.items():
        lines.append(f"| {p} | {len(cols['file'])} | {np.median(cols['file']):.4f} | "
                     + " | ".join(f"{np.median(cols[x]):.4f}" for x in PARTS) + " |")
    return "\n".join(lines)


def parts_table(rows: list[dict], files: Path, presets: list[str] | None = None) -> str:
    """Per (model, preset), shares of the fp32 file in :data:`PARTS`, the goal and how far above it,
    sorted by that excess (the outliers first)."""
    lines = ["| model | preset | file | goal | over | " + " | ".join(PARTS) + " |", "|---|---|---|---|---|" + "---|" * len(PARTS)]
    out = []
    for r in rows:
        f = files / f"{r['model'].replace(':', '_')}.{r['preset']}.onnx"
        if "ratio" not in r or not f.is_file() or (presets and r["preset"] not in presets):
            continue
        k, fp = parts(str(f)), r["fp32_bytes"]
        goal = fs.goal(r["preset"])
        over = r["ratio"] - goal if goal else float("nan")
        out.append((-over if goal else 9, f"| {r['model']} | {r['preset']} | {r['ratio']:.4f} | {goal or '—'} | "
                    f"{over:+.4f} | " + " | ".join(f"{k.get(x, 0) / fp:.4f}" for x in PARTS) + " |"))
    return "\n".join(lines + [line for _, line in sorted(out)])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", help="zoo:NAME / nm:NAME / shipped:cls|rec (quantized here)")
    ap.add_argument("--preset", default="MXINT8")
    ap.add_argument("--file", help="an already quantized file instead")
    ap.add_argument("--rows", help="a file_sizes.py --keep JSON: the median kinds table of its files (with --dir)")
    ap.add_argument("--dir", help="the --out-dir of that run")
    ap.add_argument("--one", action="store_true", help="with --file: bytes by kind")
    ap.add_argument("--per-model", default="", help="with --rows: per-model tables of these presets (comma-separated)")
    ap.add_argument("--rows-kinds", default="", help="with --rows: MODEL@PRESET,... rows by kind (share of fp32)")
    ap.add_argument("--parts", default=None, help="with --rows: every row's bytes in PARTS, outliers first ('' or presets, comma-separated)")
    ap.add_argument("--overhead", default="", help="with --rows: per model, the file against the ideal and its parts (presets, comma-separated)")
    args = ap.parse_args(argv)
    if args.rows:
        import json

        rows = json.loads(Path(args.rows).read_text())
        if args.parts is not None:
            picked = [p for p in args.parts.split(",") if p]
            print(parts_medians(rows, Path(args.dir), picked) + "\n\n" + parts_table(rows, Path(args.dir), picked))
        elif args.overhead:
            print("\n\n".join(overhead_table(rows, Path(args.dir), p) for p in args.overhead.split(",")))
        elif args.rows_kinds:
            picks = [tuple(x.rsplit("@", 1)) for x in args.rows_kinds.split(",")]
            print(rows_kinds_table(rows, Path(args.dir), picks))  # type: ignore[arg-type]
        elif args.per_model:
            print("\n\n".join(per_model_table(rows, Path(args.dir), p) for p in args.per_model.split(",")))
        else:
            print(anatomy_table(rows, Path(args.dir)))
        return 0
    if args.file and args.one:
        print("\n".join(f"{k}: {v}" for k, v in kinds(args.file).items()))
        return 0
    if args.file:
        print("\n".join(anatomy(args.file)))
        return 0
    from onnxptq import quantize
    from onnxptq.config.presets import resolve_config

    path, feeds = fs.model_source(args.model)
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "q.onnx")
        quantize(path, dataclasses.replace(resolve_config(args.preset), repair=False), data=feeds(4, 1), output=out)
        print(f"{args.model} {args.preset}")
        print("\n".join(anatomy(out, fs.total_bytes(path))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
