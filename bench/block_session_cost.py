"""Where finish's session creation on a block-format model goes: CPU seconds of creating it on
variants of the same quantized model (issue 26 item 1, blockquant10).

``python bench/block_session_cost.py MODEL PRESET [PRESET...]`` quantizes ``MODEL`` (as
bench/quantize_stages.py reads it: ``cls``/``rec``/``det``, a zoo name or ``new:<name>``; no repair)
with each preset, packed weights (the delivered file) and unpacked (``pack_weights=False``), and
times ``--rounds`` creations (best of) of a session opened as finish opens it (level all, functions
inlined after level 1, one thread) on:

* **as is**: the delivered file;
* **unpacked**: the weights stored unpacked (no decoding subgraph for onnxruntime to fold at load);
* **no If**: every function body's ``If`` replaced by its ``else`` branch (timing only: other outputs);
* **hoisted**: every body ``Constant`` made a function input fed by one outer initializer shared by
  every call (timing only: another file);
* **no If + hoisted**;
* **level none / basic / extended**: the delivered file at lower optimisation levels, with whether
  the outputs on one random feed equal the level-all session's bit for bit (they need not on other
  models: lower levels are not what users run);

and prints the node counts (outer graph, calls, body nodes, nodes after inlining) beside them. The
variants that change the file are not what users get: they say what share of the creation each
part of a body costs, for whoever shapes the bodies (onnx_ops).

    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/block_session_cost.py cls BF16,MX9,MXINT8 --samples 8
"""

from __future__ import annotations

import _common  # noqa: F401  (the repository root on sys.path: testkit)
import argparse
import copy
import dataclasses
import logging
import os
import tempfile
import time
from typing import Any, Iterator

import numpy as np
import onnx


def _no_if(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with every function body's If replaced by its else branch's nodes."""
    model = copy.deepcopy(model)
    for f in model.functions:
        nodes = []
        for n in f.node:
            if n.op_type != "If":
                nodes.append(n)
                continue
            branch = next(a for a in n.attribute if a.name == "else_branch").g
            rename = {o.name: outer for o, outer in zip(branch.output, n.output)}
            produced = set()
            for inner in branch.node:
                inner = copy.deepcopy(inner)
                outs = [rename.get(o, o) for o in inner.output]
                produced.update(outs)
                del inner.output[:]
                inner.output.extend(outs)
                nodes.append(inner)
            for name, outer in rename.items():  # a branch handing out a value of the body as it is
                if outer not in produced:
                    nodes.append(onnx.helper.make_node("Identity", [name], [outer]))
        del f.node[:]
        f.node.extend(nodes)
    return model


def _hoisted(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with every body Constant (``value``) a function input fed by one outer initializer."""
    model = copy.deepcopy(model)
    extra: dict[str, list[str]] = {}
    for f in model.functions:
        keep, names = [], []
        for n in f.node:
            if n.op_type == "Constant" and n.attribute[0].name == "value":
                outer = f"{f.name}__{n.output[0]}"
                t = copy.deepcopy(n.attribute[0].t)
                t.name = outer
                model.graph.initializer.append(t)
                names.append((n.output[0], outer))
            else:
                keep.append(n)
        del f.node[:]
        f.node.extend(keep)
        f.input.extend(a for a, _ in names)
        extra[f.name] = [b for _, b in names]
    for n in model.graph.node:
        if n.op_type in extra:
            n.input.extend(extra[n.op_type])
    return model


def _create(data: bytes, level: str = "all") -> tuple[Any, float]:
    from onnxptq.sessions import open_session

    t = time.process_time()
    session = open_session(data, log_severity=3, inline_functions_first=False, spinning=False, threads=1, optimization=level)
    return session, time.process_time() - t


def _inlined_nodes(model: onnx.ModelProto) -> int:
    import onnx.inliner

    return len(onnx.inliner.inline_local_functions(model).graph.node)


def quantized_files(model: str, presets: list[str], samples: int,
                    packings: tuple[bool, ...] = (True, False)) -> Iterator[tuple[str, bool, onnx.ModelProto, Any]]:
    """``(preset, packed, the delivered file's model, the model's feeds)`` of ``model`` (as
    bench/quantize_stages.py reads it) quantized with each preset, repair off, weights packed and/or
    not (``pack_weights``), in that order (also bench/session_phases.py)."""
    from onnxptq import quantize
    from onnxptq.config.presets import get_preset

    import quantize_stages

    path, data = quantize_stages._data(model, samples)
    logging.disable(logging.WARNING)
    tmp = tempfile.mkdtemp(prefix="block_session_cost_")
    for preset in presets:
        cfg = get_preset(preset)
        cfg = cfg.replace(calibration=dataclasses.replace(cfg.calibration, progress=False), repair=False)
        for packed in packings:
            out = os.path.join(tmp, f"{preset}.{packed}.onnx")
            quantize(path, cfg.replace(pack_weights=packed), data, out)
            yield preset, packed, onnx.load(out), data


def measure(model: str, presets: list[str], samples: int, rounds: int) -> None:
    print(f"## {model}: session creation CPU s (best of {rounds}), one thread, level all, functions inlined after level 1")
    print("| preset | outer nodes | calls | body nodes | inlined nodes | as is | unpacked | no If | hoisted | no If + hoisted "
          "| none (same) | basic (same) | extended (same) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|")
    files: dict[bool, onnx.ModelProto] = {}
    for preset, packed, quantized, data in quantized_files(model, presets, samples):
        files[packed] = quantized
        if packed:
            continue  # its unpacked twin comes next
        m = files[True]
        variants = {"as is": m, "unpacked": files[False], "no If": _no_if(m), "hoisted": _hoisted(m),
                    "no If + hoisted": _hoisted(_no_if(m))}
        blobs = {k: v.SerializeToString() for k, v in variants.items()}
        best = {}
        for k, b in blobs.items():
            try:
                best[k] = f"{min(_create(b)[1] for _ in range(rounds)):.3f}"
            except Exception as exc:  # noqa: BLE001 - a variant onnxruntime refuses: said, not timed
                print(f"{preset} {k}: onnxruntime refuses it: {' '.join(str(exc).split())[:200]}")
                best[k] = "refused"
        feed = data[0] if isinstance(data, list) else next(iter(data))
        feed = {k: v for k, v in feed.items() if k in {i.name for i in m.graph.input}}
        ref = _create(blobs["as is"])[0].run(None, feed)
        levels = []
        for level in ("none", "basic", "extended"):
            times, same = [], True
            for _ in range(rounds):
                s, d = _create(blobs["as is"], level)
                times.append(d)
            same = all(np.array_equal(a, b) for a, b in zip(s.run(None, feed), ref))
            levels.append(f"{min(times):.3f} ({'yes' if same else 'NO'})")
        calls = sum(1 for n in m.graph.node if n.domain == "onnxptq")
        body = sum(len(f.node) for f in m.functions)
        print(f"| {preset} | {len(m.graph.node)} | {calls} | {body} | {_inlined_nodes(m)} | "
              + " | ".join(best[k] for k in variants) + " | " + " | ".join(levels) + " |", flush=True)


def parser(doc: str) -> argparse.ArgumentParser:
    """The arguments of a script on :func:`quantized_files` (``doc``: its module doc; also bench/session_phases.py)."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("presets", help="comma-separated, e.g. BF16,MX9,MXINT8")
    ap.add_argument("--samples", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=3)
    return ap


def main() -> None:
    args = parser(__doc__).parse_args()
    measure(args.model, args.presets.split(","), args.samples, args.rounds)


if __name__ == "__main__":
    main()
