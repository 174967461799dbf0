"""Block quantizers whose block axis is followed by a short span (issue 26 item 3, blocklat20): what the
(rows, bs, post) view costs when ``post`` is a handful of elements, against the transposed view.

onnxruntime's reductions and broadcasts run along the innermost dims; with the block axis followed by
``post`` elements every block maximum and every scale broadcast is a loop over runs of ``post`` — the
reason the bodies already view a *last* block axis transposed (``onnx_ops.body.view_last``). An
attention's keys read by ``MatMul`` as its B operand (``[batch, d, seq]`` blocked along ``d``, ``seq``
short) get no such view. Two readings:

* ``calls``: ``--calls`` chained calls of each preset on ``[8, 256, 11]`` blocked along axis 1
  (declared ``[?, 256, 11]`` and ``[?, 256, ?]``) against the same values transposed, ``[8, 11, 256]``
  blocked along the last axis (declared ``[?, 11, 256]`` and ``[?, ?, 256]``); the outputs checked equal
  (transposed back) bit for bit; CPU µs per call, best of ``--rounds``.
* ``whatif``: in a block file of ``bench/block_latency_zoo.py`` (``--files``), the one call whose input a
  ``Transpose`` writes replaced by ``Transpose → the preset's body along the last axis → Transpose``
  (graph surgery in the bench, not a library change); outputs compared with the file's on 16 held-out
  feeds bit for bit, then float / file / what-if timed in turn (CPU per pass, best of 11 rounds).

    PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 nice -n 5 python bench/block_latency_spans.py calls --presets MX9,BFP16,MXINT8
    PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 nice -n 5 python bench/block_latency_spans.py whatif --model romanizer_decoder \\
        --presets MX9,BFP16,MXINT8 [--files /work/cache/blocklat20/files/base]
"""

from __future__ import annotations

import _common  # noqa: F401  (the repository root on sys.path: testkit)
import argparse
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

import block_latency_zoo as blz

#: the MX presets' element types (block 32, round half to even, no scale search: the presets' bodies)
MX_ELEMENTS = {"MXINT8": "int8"}


def quantizer(preset: str, x: str, y: str, name: str, opset: int, shape: Any, axis: int) -> Any:
    """One call of ``preset``'s activation body (the emitter's arguments for a float32 tensor)."""
    from onnxptq.formats.bfp import PRESETS
    from onnxptq.onnx_ops import bfp, mx

    if preset in PRESETS:
        return bfp.build("bfp", x, y, name=name, opset=opset, shape=shape, dtype="float32", **dict(PRESETS[preset], axis=axis))
    if preset not in MX_ELEMENTS:
        raise ValueError(f"--presets: {preset!r} is not one this bench builds (BFP presets, {', '.join(MX_ELEMENTS)})")
    return mx.build("mx", x, y, name=name, opset=opset, element_dtype=MX_ELEMENTS[preset], axis=axis, block_size=32,
                    rounding_mode=2, shape=shape, dtype="float32")


def chain(preset: str, shape: list, axis: int, calls: int) -> onnx.ModelProto:
    nodes, functions = [], {}
    for k in range(calls):
        q = quantizer(preset, f"t{k}", "y" if k == calls - 1 else f"t{k + 1}", f"q{k}", 18, shape, axis)
        nodes += q.nodes
        functions.update({f.name: f for f in q.functions})
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("t0", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("onnxptq", 1)],
                              functions=list(functions.values()))
    model.ir_version = 10
    return model


def calls(args: argparse.Namespace) -> None:
    x = np.random.default_rng(0).standard_normal((8, 256, 11)).astype(np.float32)
    xt = np.ascontiguousarray(x.transpose(0, 2, 1))
    cases = {"[?,256,11] axis 1": (["b", 256, 11], 1, x), "[?,256,?] axis 1": (["b", 256, "t"], 1, x),
             "[?,11,256] axis -1": (["b", 11, 256], -1, xt), "[?,?,256] axis -1": (["b", "t", 256], -1, xt)}
    print(f"<!-- {time.strftime('%H:%M', time.gmtime())} UTC, load {__import__('os').getloadavg()[0]:.1f}; "
          f"{args.calls} chained calls, CPU µs per call, best of {args.rounds} -->")
    print("| preset | " + " | ".join(cases) + " | same bits |\n|---|" + "---:|" * len(cases) + "---|")
    for preset in args.presets.split(","):
        sessions = {k: blz.open_session_bytes(chain(preset, shape, axis, args.calls).SerializeToString()) for k, (shape, axis, _) in cases.items()}
        outs = {k: s.run(None, {"t0": cases[k][2]})[0] for k, s in sessions.items()}
        same = all(np.array_equal((o if cases[k][1] == 1 else o.transpose(0, 2, 1)).view(np.uint32), outs["[?,256,11] axis 1"].view(np.uint32))
                   for k, o in outs.items())
        cpu: dict[str, list[float]] = {k: [] for k in sessions}
        for _ in range(args.rounds):
            for k, s in sessions.items():
                c = time.process_time()
                for _ in range(10):
                    s.run(None, {"t0": cases[k][2]})
                cpu[k].append((time.process_time() - c) / (10 * args.calls) * 1e6)
        print(f"| {preset} | " + " | ".join(f"{min(v):.0f}" for v in cpu.values()) + f" | {'yes' if same else 'NO'} |", flush=True)


def whatif(args: argparse.Namespace) -> None:
    print(f"<!-- {time.strftime('%H:%M', time.gmtime())} UTC, load {__import__('os').getloadavg()[0]:.1f}; "
          "CPU ms per pass of 2 feeds, best of 11 rounds -->")
    print("| model | preset | call | float ms | file ×float | what-if ×float | same bits (16 feeds) |\n|---|---|---|---:|---:|---:|---|")
    for preset in args.presets.split(","):
        src = Path(args.files) / f"{args.model}_{preset}.onnx"
        model = onnx.load(str(src))
        nodes = list(model.graph.node)
        producer = {o: n for n in nodes for o in n.output}
        i = next(k for k, n in enumerate(nodes) if n.domain == "onnxptq" and n.input[0] in producer
                 and producer[n.input[0]].op_type == "Transpose")
        x, y = nodes[i].input[0], nodes[i].output[0]
        opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
        q = quantizer(preset, "wi_t", "wi_q", "wi_call", opset, ["b", "t", args.length], -1)
        new = [helper.make_node("Transpose", [x], ["wi_t"], perm=[0, 2, 1], name="wi_in"), *q.nodes,
               helper.make_node("Transpose", ["wi_q"], [y], perm=[0, 2, 1], name="wi_out")]
        del model.graph.node[:]
        model.graph.node.extend(nodes[:i] + new + nodes[i + 1:])
        model.functions.extend(q.functions)
        sessions = {"float": blz.open_session(blz.model_file(args.model)), "file": blz.open_session(src),
                    "what-if": blz.open_session_bytes(model.SerializeToString())}
        held = blz.feeds(args.model, "heldout", 16)
        same = all(blz.same_bits(sessions["file"].run(None, blz.fit(sessions["file"], f)),
                                 sessions["what-if"].run(None, blz.fit(sessions["what-if"], f))) for f in held)
        fed = {k: [blz.fit(s, f) for f in held[:2]] for k, s in sessions.items()}
        cpu = blz.rounds(sessions, fed, 11, 20)
        base = min(cpu["float"])
        ratio = {k: f"{min(v) / base:.2f} (median {statistics.median(a / b for a, b in zip(v, cpu['float'])):.2f})" for k, v in cpu.items()}
        print(f"| {args.model} | {preset} | `{x}` | {base:.3f} | {ratio['file']} | {ratio['what-if']} | {'yes' if same else 'NO'} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("calls")
    c.add_argument("--calls", type=int, default=10)
    c.add_argument("--rounds", type=int, default=9)
    w = sub.add_parser("whatif")
    w.add_argument("--model", default="romanizer_decoder")
    w.add_argument("--files", default=str(blz.DEFAULT_OUT / "base"))
    w.add_argument("--length", type=int, default=256, help="the block axis's length (the call's input dim 1)")
    for s in (c, w):
        s.add_argument("--presets", default="MX9,BFP16,MXINT8")
    args = ap.parse_args()
    calls(args) if args.cmd == "calls" else whatif(args)


if __name__ == "__main__":
    main()
